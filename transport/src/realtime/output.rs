//! What leaves a native socket: audio frames (binary with the 16-byte
//! header, or base64 inside JSON), and the bound on every send
//! ([`SEND_TIMEOUT`]) — a client that stops reading closes its own
//! connection and pauses nobody else.

use std::time::Duration;

use tokio_tungstenite::tungstenite::Message;

use crate::protocol::{self, AudioHeader, AudioTransport, ServerMessage};

use super::settings::CtxSettings;

/// A client that takes no frame for this long is gone.
pub const SEND_TIMEOUT: Duration = Duration::from_secs(10);

/// Frame `seq` of context `id` in the transport its settings chose;
/// `payload` is already in the context's format (`realtime/encode.rs`).
pub fn audio_message(
    id: &str,
    stream_id: Option<u32>,
    seq: u64,
    s: &CtxSettings,
    payload: &[u8],
    terminal: bool,
) -> Message {
    let header = AudioHeader {
        stream_id: stream_id.unwrap_or(0),
        seq: seq as u32,
        sample_rate: s.rate,
        format: s.format,
        terminal,
    };
    match s.transport {
        AudioTransport::Binary => {
            Message::Binary(protocol::audio_frame_bytes(&header, payload).into())
        }
        AudioTransport::Base64 => Message::Text(
            ServerMessage::Audio {
                context_id: id.to_string(),
                stream_id: header.stream_id,
                seq,
                terminal,
                sample_rate: header.sample_rate,
                format: header.format,
                audio: protocol::base64_encode(payload),
            }
            .to_json()
            .into(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::AudioFormat;

    fn settings(transport: AudioTransport) -> CtxSettings {
        CtxSettings::for_tests(transport)
    }

    #[test]
    fn binary_frame_is_the_header_then_the_samples() {
        let s = settings(AudioTransport::Binary);
        let mut pcm = Vec::new();
        protocol::encode_samples(&[0.5, -0.5], AudioFormat::Pcm16, &mut pcm);
        let Message::Binary(b) = audio_message("a", Some(7), 3, &s, &pcm, true) else {
            panic!("binary");
        };
        let (h, payload) = AudioHeader::parse(&b).expect("parses");
        assert_eq!(
            h,
            AudioHeader {
                stream_id: 7,
                seq: 3,
                sample_rate: 16000,
                format: AudioFormat::Pcm16,
                terminal: true,
            }
        );
        assert_eq!(payload.len(), 4);
        assert_eq!(b.len(), 16 + 4, "the version-1 PCM header, unchanged");
    }

    #[test]
    fn an_encoded_frame_names_its_encoding_in_the_extended_header() {
        let mut s = settings(AudioTransport::Binary);
        s.format = AudioFormat::Aac;
        let Message::Binary(b) = audio_message("a", Some(1), 0, &s, &[0xFF, 0xF1, 9], false) else {
            panic!("binary");
        };
        assert_eq!(b[1] & protocol::FLAG_ENCODED, protocol::FLAG_ENCODED);
        assert_eq!(b[16], 5, "aac");
        let (h, payload) = AudioHeader::parse(&b).expect("parses");
        assert_eq!(h.format, AudioFormat::Aac);
        assert_eq!(payload, &[0xFF, 0xF1, 9]);
    }

    #[test]
    fn frame_before_context_started_carries_stream_id_zero() {
        let s = settings(AudioTransport::Binary);
        let Message::Binary(b) = audio_message("a", None, 0, &s, &[], false) else {
            panic!("binary");
        };
        assert_eq!(AudioHeader::parse(&b).expect("parses").0.stream_id, 0);
    }

    #[test]
    fn base64_frame_is_an_audio_event_with_the_same_fields() {
        let s = settings(AudioTransport::Base64);
        let mut bytes = Vec::new();
        protocol::encode_samples(&[0.25], AudioFormat::Pcm16, &mut bytes);
        let Message::Text(t) = audio_message("ctx", Some(2), 9, &s, &bytes, false) else {
            panic!("text");
        };
        assert_eq!(
            protocol::parse_server_text(t.as_str()).expect("parses"),
            ServerMessage::Audio {
                context_id: "ctx".into(),
                stream_id: 2,
                seq: 9,
                terminal: false,
                sample_rate: 16000,
                format: AudioFormat::Pcm16,
                audio: protocol::base64_encode(&bytes),
            }
        );
    }
}
