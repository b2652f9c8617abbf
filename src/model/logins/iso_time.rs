//! The timestamps auth.json holds, as Hermes writes and reads them: ISO 8601 in UTC
//! (`2026-05-01T11:00:00.123456+00:00`, Codex's `last_refresh` with `Z`), naive ones read as UTC.

/// `YYYY-MM-DDTHH:MM:SS[.ffffff]+00:00`, as Python's `isoformat()` of a UTC time (microseconds
/// only when there are some).
pub fn iso(unix: f64) -> String {
    let whole = unix.floor();
    let micros = ((unix - whole) * 1e6).round() as u32;
    let (whole, micros) = if micros >= 1_000_000 {
        (whole + 1.0, 0)
    } else {
        (whole, micros)
    };
    let (y, mo, d, h, mi, s) = crate::util::utc_parts(whole);
    let fraction = match micros {
        0 => String::new(),
        m => format!(".{m:06}"),
    };
    format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}{fraction}+00:00")
}

/// [`iso`] with `Z` for the offset (Codex's `last_refresh`).
pub fn iso_z(unix: f64) -> String {
    let text = iso(unix);
    format!("{}Z", text.trim_end_matches("+00:00"))
}

/// Unix seconds of an ISO 8601 time (`T` or a space between date and time; an offset `Z` or
/// `±HH:MM`; none: UTC). `None` for anything else.
pub fn parse(text: &str) -> Option<f64> {
    let t = text.trim();
    let num = |s: &str| -> Option<i64> {
        (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse().ok())
            .flatten()
    };
    let (date, rest) = (t.get(..10)?, t.get(10..)?);
    let mut ymd = date.split('-');
    let (y, mo, d) = (num(ymd.next()?)?, num(ymd.next()?)?, num(ymd.next()?)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || date.len() != 10 {
        return None;
    }
    let days = crate::util::days_from_civil(y, mo, d);
    if rest.is_empty() {
        return Some(days as f64 * 86_400.0);
    }
    let rest = rest.strip_prefix('T').or_else(|| rest.strip_prefix(' '))?;
    let (clock, offset) = match rest.find(['Z', 'z', '+', '-']) {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let (hms, fraction) = clock.split_once('.').unwrap_or((clock, ""));
    let mut parts = hms.split(':');
    let h = num(parts.next()?)?;
    let mi = parts.next().map_or(Some(0), num)?;
    let s = parts.next().map_or(Some(0), num)?;
    if parts.next().is_some() || h > 23 || mi > 59 || s > 59 {
        return None;
    }
    let fraction = match fraction {
        "" => 0.0,
        f => format!("0.{f}")
            .parse::<f64>()
            .ok()
            .filter(|_| num(f).is_some())?,
    };
    let offset_secs = match offset {
        "" | "Z" | "z" => 0,
        o => {
            let sign = if o.starts_with('-') { -1 } else { 1 };
            let (oh, om) = o[1..].split_once(':').unwrap_or((&o[1..], "00"));
            let (oh, om) = (num(oh)?, num(om)?);
            if oh > 23 || om > 59 {
                return None;
            }
            sign * (oh * 3600 + om * 60)
        }
    };
    let secs = days * 86_400 + h * 3600 + mi * 60 + s - offset_secs;
    Some(secs as f64 + fraction)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hermes_timestamps_both_ways() {
        assert_eq!(iso(1_777_636_800.0), "2026-05-01T12:00:00+00:00");
        assert_eq!(
            iso(1_777_633_200.123456),
            "2026-05-01T11:00:00.123456+00:00"
        );
        assert_eq!(iso_z(1_777_633_200.5), "2026-05-01T11:00:00.500000Z");
        assert_eq!(parse("2026-05-01T12:00:00+00:00"), Some(1_777_636_800.0));
        assert_eq!(parse("2026-05-01T12:00:00Z"), Some(1_777_636_800.0));
        assert_eq!(parse("2026-05-01 12:00:00"), Some(1_777_636_800.0));
        assert_eq!(parse("2026-05-01T14:00:00+02:00"), Some(1_777_636_800.0));
        assert_eq!(parse("2026-05-01T11:30:00-00:30"), Some(1_777_636_800.0));
        let t = parse("2026-05-01T11:00:00.123456+00:00").unwrap();
        assert!((t - 1_777_633_200.123456).abs() < 1e-5, "{t}");
        assert_eq!(parse("1970-01-01"), Some(0.0));
        assert_eq!(parse("2000-02-29T00:00:00"), Some(951_782_400.0));
        for bad in [
            "",
            "soon",
            "2026-13-01T00:00:00",
            "2026-05-01T25:00:00",
            "2026-05-01X",
            "2026-5-1T00:00:00",
        ] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
    }
}
