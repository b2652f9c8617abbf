//! An image at an `http(s)` URL, downloaded on a worker thread: bounded in size and time, a few
//! redirects followed (each checked again), and never from a loopback, private, link-local or
//! other internal address unless the user allows it (`security.allow_private_urls`).

use std::net::IpAddr;
use std::time::Duration;

use crate::model::blocking::{self, Exchange};
use crate::model::http::Url;

/// Redirects followed at most.
const REDIRECTS_MAX: usize = 3;

/// Whether an address is one a URL fetch may reach.
pub fn address_ok(ip: IpAddr, allow_private: bool) -> Result<(), String> {
    if allow_private {
        return Ok(());
    }
    let internal = match ip {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_multicast()
                || v4.is_documentation()
                // Carrier-grade NAT (100.64/10) and the benchmarking and reserved ranges.
                || (o[0] == 100 && (64..128).contains(&o[1]))
                || (o[0] == 198 && (18..20).contains(&o[1]))
                || o[0] == 0
                || o[0] >= 240
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return address_ok(IpAddr::V4(v4), false);
            }
            let s = v6.segments();
            v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (s[0] & 0xfe00) == 0xfc00
                || (s[0] & 0xffc0) == 0xfe80
        }
    };
    match internal {
        true => Err(format!(
            "refused: {ip} is a loopback, private or internal address (set security.allow_private_urls: true in config.yaml to allow it)"
        )),
        false => Ok(()),
    }
}

/// The bytes at `url`, at most `max` of them.
pub fn download(
    url: &str,
    max: u64,
    allow_private: bool,
    timeout: Duration,
) -> Result<Vec<u8>, String> {
    let mut url = url.trim().to_string();
    for _ in 0..=REDIRECTS_MAX {
        let parsed = Url::parse(&url).map_err(|_| format!("not an http(s) URL: {url}"))?;
        let answer = blocking::exchange(&Exchange {
            method: "GET",
            url: &parsed,
            target: &parsed.target(""),
            headers: &[("Accept".into(), "image/*".into())],
            body: None,
            answer_max: max as usize,
            timeout,
            address_ok: &|ip| address_ok(ip, allow_private),
        })?;
        match answer.status {
            200 => return Ok(answer.body),
            301 | 302 | 303 | 307 | 308 => {
                let to = answer
                    .location
                    .ok_or("a redirect without a Location header")?;
                url = match to.starts_with("http://") || to.starts_with("https://") {
                    true => to,
                    false => format!(
                        "{}://{}{}",
                        if parsed.tls { "https" } else { "http" },
                        parsed.authority(),
                        if to.starts_with('/') {
                            to
                        } else {
                            format!("/{to}")
                        }
                    ),
                };
            }
            status => return Err(format!("the server answered HTTP {status} for {url}")),
        }
    }
    Err(format!("more than {REDIRECTS_MAX} redirects"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_addresses_are_refused_unless_allowed() {
        for bad in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "::1",
            "fd00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
        ] {
            let ip: IpAddr = bad.parse().unwrap();
            assert!(address_ok(ip, false).is_err(), "{bad}");
            assert!(address_ok(ip, true).is_ok(), "{bad}");
        }
        for good in ["93.184.216.34", "2606:4700::1111", "8.8.8.8"] {
            assert!(address_ok(good.parse().unwrap(), false).is_ok(), "{good}");
        }
    }
}
