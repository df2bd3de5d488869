//! Reference audio carried inside a JSON field (an upload's `audio`, or the
//! speech route's inline `ref_audio`): base64, or a `data:` URL around it.
//! URLs and `file://` paths are refused: the server fetches nothing and
//! reads no file a client names.

use base64::Engine as _;

use crate::http_error::Refusal;

/// A clip's bytes and a file-name hint for the decoder (from a data URL's
/// media type).
#[derive(Debug, PartialEq)]
pub struct AudioField {
    pub bytes: Vec<u8>,
    pub hint: Option<&'static str>,
}

/// Decodes `value` (base64 or a base64 `data:` URL) into the clip's bytes,
/// refusing more than `max_bytes` with a 413.
pub fn decode(value: &str, param: &'static str, max_bytes: usize) -> Result<AudioField, Refusal> {
    let v = value.trim();
    let lower = v.get(..8).unwrap_or(v).to_ascii_lowercase();
    if ["http://", "https://", "file:", "ftp://"]
        .iter()
        .any(|p| lower.starts_with(p))
    {
        return Err(Refusal::bad(
            format!("{param} must be the clip itself, base64 or a data URL (data:audio/wav;base64,...); this server fetches no URLs and reads no server-side files"),
            param,
        ));
    }
    let (hint, payload) = match v
        .strip_prefix("data:")
        .or_else(|| lower.starts_with("data:").then(|| &v[5..]))
    {
        Some(rest) => {
            let Some((meta, data)) = rest.split_once(',') else {
                return Err(Refusal::bad(
                    format!("{param} is a data URL without a ',' before its data"),
                    param,
                ));
            };
            let meta = meta.to_ascii_lowercase();
            if !meta.split(';').any(|p| p.trim() == "base64") {
                return Err(Refusal::bad(
                    format!("{param} must be a base64 data URL (data:audio/wav;base64,...)"),
                    param,
                ));
            }
            (hint_for(meta.split(';').next().unwrap_or("")), data)
        }
        None => (None, v),
    };
    // Base64 is 4 characters per 3 bytes: refuse an oversized clip before
    // decoding it.
    if payload.len() / 4 * 3 > max_bytes + 3 {
        return Err(too_large(param, max_bytes));
    }
    let clean: String = payload.chars().filter(|c| !c.is_whitespace()).collect();
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(clean.as_bytes())
        .or_else(|_| base64::engine::general_purpose::STANDARD_NO_PAD.decode(clean.as_bytes()))
        .map_err(|e| Refusal::bad(format!("{param} is not valid base64: {e}"), param))?;
    if bytes.len() > max_bytes {
        return Err(too_large(param, max_bytes));
    }
    if bytes.is_empty() {
        return Err(Refusal::bad(format!("{param} is empty"), param));
    }
    Ok(AudioField { bytes, hint })
}

/// The 413 for a clip over the server's upload limit.
pub fn too_large(param: &'static str, max_bytes: usize) -> Refusal {
    Refusal::new(
        axum::http::StatusCode::PAYLOAD_TOO_LARGE,
        format!(
            "{param} is larger than this server's upload limit of {max_bytes} bytes ({:.1} MB); send a shorter clip (a few seconds to a minute is what cloning needs)",
            max_bytes as f64 / 1e6
        ),
        Some(param),
    )
}

/// A decoder file-name hint for a media type.
fn hint_for(media: &str) -> Option<&'static str> {
    Some(match media.trim() {
        "audio/wav" | "audio/x-wav" | "audio/wave" | "audio/vnd.wave" => "clip.wav",
        "audio/flac" | "audio/x-flac" => "clip.flac",
        "audio/mpeg" | "audio/mp3" => "clip.mp3",
        "audio/ogg" | "audio/vorbis" => "clip.ogg",
        "audio/opus" => "clip.opus",
        "audio/mp4" | "audio/m4a" | "audio/x-m4a" | "audio/aac" => "clip.m4a",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_and_data_urls_decode_and_urls_are_refused() {
        let b64 = base64::engine::general_purpose::STANDARD.encode(b"RIFFxxxx");
        assert_eq!(decode(&b64, "ref_audio", 100).unwrap().bytes, b"RIFFxxxx");
        let url = format!("data:audio/wav;base64,{b64}");
        let f = decode(&url, "ref_audio", 100).unwrap();
        assert_eq!(
            (f.bytes.as_slice(), f.hint),
            (&b"RIFFxxxx"[..], Some("clip.wav"))
        );
        for bad in [
            "https://example.com/a.wav",
            "http://x/y",
            "file:///etc/passwd",
            "FILE:///x",
        ] {
            let e = decode(bad, "ref_audio", 100).unwrap_err();
            assert!(e.message.contains("fetches no URLs"), "{}", e.message);
        }
        let e = decode("data:audio/wav,abc", "audio", 100).unwrap_err();
        assert!(e.message.contains("base64 data URL"), "{}", e.message);
        let e = decode("!!!", "audio", 100).unwrap_err();
        assert!(e.message.contains("not valid base64"), "{}", e.message);
        let e = decode(&b64, "audio", 4).unwrap_err();
        assert_eq!(e.status, axum::http::StatusCode::PAYLOAD_TOO_LARGE);
    }
}
