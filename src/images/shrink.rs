//! An image made to fit before it goes into the history (Hermes' embed bounds in
//! `tools/vision_tools.py`, and its conversion of types not every provider takes in
//! `agent/image_routing.py`): a data URL of at most 4 MB, at most 7,900 pixels a side, of a
//! type every provider takes. One past them is decoded and halved (at most four times) until it
//! fits: a PNG or a converted BMP stays a PNG, anything else becomes a JPEG at quality 85, 70,
//! then 50. When nothing fits, the smallest try is kept if its data URL is under Hermes' 20 MB
//! ceiling, else the image is refused with the reason. An image that cannot be decoded is sent
//! as it is when its type is taken and it is under the ceiling (as Hermes does without Pillow).
//! CPU work: callers run it off the loop.

use std::io::Cursor;

use image::codecs::jpeg::JpegEncoder;
use image::imageops::FilterType;
use image::{DynamicImage, ImageFormat, ImageReader, Limits};

use super::Image;

/// The data URL's length an image is made to fit (Hermes' `_EMBED_TARGET_BYTES`).
pub const TARGET_URL_BYTES: usize = 4 * 1024 * 1024;
/// The longest side an image is made to fit (Hermes' `_EMBED_MAX_DIMENSION`).
pub const MAX_SIDE: u32 = 7_900;
/// No provider takes a data URL past this (Hermes' `_MAX_BASE64_BYTES`).
pub const CEILING_URL_BYTES: usize = 20 * 1024 * 1024;
/// Memory a decode may take (an 8,000 x 16,000 RGBA picture); a bigger one is refused.
const DECODE_ALLOC: u64 = 512 * 1024 * 1024;
/// Halvings tried after the image's own size (Hermes: five rounds in all).
const HALVINGS: usize = 4;
/// No side is halved below this (Hermes').
const MIN_SIDE: u32 = 64;

/// The length of `bytes` of type `mime` as a base64 data URL.
pub fn url_len(bytes: usize, mime: &str) -> usize {
    "data:;base64,".len() + mime.len() + bytes.div_ceil(3) * 4
}

/// Whether `img` must be converted or made smaller before it is sent.
pub fn needs_fitting(img: &Image) -> bool {
    !super::universal(img.mime)
        || url_len(img.bytes.len(), img.mime) > TARGET_URL_BYTES
        || super::dimensions(&img.bytes).is_some_and(|(w, h)| w.max(h) > MAX_SIDE)
}

/// `img` as it is sent: as it is when it fits, else converted and made smaller (see the
/// module's words), or why it cannot be sent.
pub fn fit(img: Image) -> Result<Image, String> {
    if !needs_fitting(&img) {
        return Ok(img);
    }
    let picture = match decode(&img.bytes) {
        Ok(p) => p,
        Err(why) => {
            let url = url_len(img.bytes.len(), img.mime);
            if super::universal(img.mime) && url <= CEILING_URL_BYTES {
                return Ok(img);
            }
            return Err(format!("cannot make the {} smaller: {why}", img.mime));
        }
    };
    let png = img.mime == "image/png" || !super::universal(img.mime);
    let qualities: &[u8] = if png { &[0] } else { &[85, 70, 50] };
    let mut pic = picture;
    let mut best: Option<Image> = None;
    for round in 0..=HALVINGS {
        if round > 0 {
            let (w, h) = halved(pic.width(), pic.height());
            if (w, h) == (pic.width(), pic.height()) {
                break;
            }
            pic = pic.resize_exact(w, h, FilterType::Triangle);
        }
        // Too many pixels a side: not worth encoding at this size.
        if pic.width().max(pic.height()) > MAX_SIDE {
            continue;
        }
        for &q in qualities {
            let candidate = encode(&pic, png, q)?;
            let fits = url_len(candidate.bytes.len(), candidate.mime) <= TARGET_URL_BYTES;
            best = Some(candidate);
            if fits {
                return Ok(best.take().unwrap_or(img));
            }
        }
    }
    match best {
        Some(b) if url_len(b.bytes.len(), b.mime) <= CEILING_URL_BYTES => Ok(b),
        Some(b) => Err(format!(
            "image too large for the model: {} even made smaller (the most any provider takes is {})",
            super::size_words(url_len(b.bytes.len(), b.mime) as u64),
            super::size_words(CEILING_URL_BYTES as u64)
        )),
        None => Err(format!(
            "image too large for the model: it cannot be made smaller than {MAX_SIDE} pixels a side"
        )),
    }
}

/// Half of `w` x `h`, no side under 64 pixels, the other side kept in proportion (Hermes').
fn halved(w: u32, h: u32) -> (u32, u32) {
    let scaled =
        |side: u32, of: u32| (u64::from(side) * u64::from(MIN_SIDE) / u64::from(of.max(1))) as u32;
    let (nw, nh) = ((w / 2).max(MIN_SIDE), (h / 2).max(MIN_SIDE));
    if nw == MIN_SIDE {
        (nw, scaled(h, w).max(MIN_SIDE))
    } else if nh == MIN_SIDE {
        (scaled(w, h).max(MIN_SIDE), nh)
    } else {
        (nw, nh)
    }
}

/// The picture in `bytes`, its memory bounded.
fn decode(bytes: &[u8]) -> Result<DynamicImage, String> {
    let mut reader = ImageReader::new(Cursor::new(bytes))
        .with_guessed_format()
        .map_err(|e| e.to_string())?;
    let mut limits = Limits::default();
    limits.max_alloc = Some(DECODE_ALLOC);
    reader.limits(limits);
    reader.decode().map_err(|e| e.to_string())
}

/// `pic` as a PNG, or as a JPEG of quality `q`.
fn encode(pic: &DynamicImage, png: bool, q: u8) -> Result<Image, String> {
    let mut out = Cursor::new(Vec::new());
    let done = if png {
        pic.write_to(&mut out, ImageFormat::Png)
    } else {
        JpegEncoder::new_with_quality(&mut out, q).encode_image(&pic.to_rgb8())
    };
    done.map_err(|e| format!("cannot encode the smaller image: {e}"))?;
    Ok(Image {
        bytes: out.into_inner(),
        mime: if png { "image/png" } else { "image/jpeg" },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use image::{Rgb, RgbImage, Rgba, RgbaImage};

    /// A PNG of noise (it does not compress) of `w` x `h`.
    fn noise_png(w: u32, h: u32) -> Vec<u8> {
        let mut seed = 12345u32;
        let pic = RgbaImage::from_fn(w, h, |_, _| {
            seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            let b = seed.to_le_bytes();
            Rgba([b[0], b[1], b[2], 255])
        });
        let mut out = Cursor::new(Vec::new());
        DynamicImage::ImageRgba8(pic)
            .write_to(&mut out, ImageFormat::Png)
            .unwrap();
        out.into_inner()
    }

    #[test]
    fn a_small_image_is_left_as_it_is() {
        let bytes = noise_png(32, 32);
        let img = fit(Image {
            bytes: bytes.clone(),
            mime: "image/png",
        })
        .unwrap();
        assert_eq!(img.bytes, bytes);
    }

    #[test]
    fn a_big_png_is_halved_until_it_fits_and_stays_a_png() {
        // 1,600 x 1,000 of noise: ~6.4 MB, over the 4 MB data URL.
        let bytes = noise_png(1600, 1000);
        assert!(url_len(bytes.len(), "image/png") > TARGET_URL_BYTES);
        let img = fit(Image {
            bytes,
            mime: "image/png",
        })
        .unwrap();
        assert_eq!(img.mime, "image/png");
        assert!(url_len(img.bytes.len(), img.mime) <= TARGET_URL_BYTES);
        assert_eq!(super::super::dimensions(&img.bytes), Some((800, 500)));
    }

    #[test]
    fn a_tall_image_is_brought_under_the_side_bound_and_a_bmp_becomes_a_png() {
        let pic = RgbImage::from_pixel(100, 9000, Rgb([200, 10, 10]));
        let mut out = Cursor::new(Vec::new());
        DynamicImage::ImageRgb8(pic)
            .write_to(&mut out, ImageFormat::Bmp)
            .unwrap();
        let img = fit(Image {
            bytes: out.into_inner(),
            mime: "image/bmp",
        })
        .unwrap();
        assert_eq!(img.mime, "image/png");
        let (w, h) = super::super::dimensions(&img.bytes).unwrap();
        assert_eq!((w, h), (64, 5760), "no side under 64 pixels, in proportion");
    }

    #[test]
    fn what_cannot_be_decoded_is_sent_as_it_is_or_refused() {
        // A PNG header over 7,900 pixels a side with nothing after it: not decodable, small.
        let fake = super::super::tests::png(9000, 10);
        let img = fit(Image {
            bytes: fake.clone(),
            mime: "image/png",
        })
        .unwrap();
        assert_eq!(img.bytes, fake);
        let bad_bmp = b"BM not really a bitmap".to_vec();
        let err = fit(Image {
            bytes: bad_bmp,
            mime: "image/bmp",
        })
        .err()
        .unwrap();
        assert!(err.contains("cannot make the image/bmp smaller"), "{err}");
    }
}
