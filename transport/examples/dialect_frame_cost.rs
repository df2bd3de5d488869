//! What one audio frame costs a dialect socket on its way out, the two
//! ways a dialect's frame has been made (benches/dialect_frames.sh measures
//! the whole server; this isolates the per-frame work, which the model's
//! own cost hides there):
//!
//! - `through a native socket`: the session's frame as the native
//!   protocol's base64 f32 `audio` event (JSON), parsed back, decoded from
//!   base64 and f32 bytes, encoded again in the vendor's encoding, then the
//!   vendor's base64 JSON — what a dialect did while it drove a native
//!   session over an in-process WebSocket (the WebSocket framing itself is
//!   left out, so this side is an underestimate).
//! - `as a port`: the session encodes in the vendor's encoding and the
//!   dialect wraps the payload in its base64 JSON.
//!
//! Usage: `cargo run --release -p tts-transport --example dialect_frame_cost
//! [FRAMES]` — one 80 ms frame at 24 kHz (1920 samples) in PCM16, the
//! median of 9 runs of FRAMES frames each (default 20000), arms
//! interleaved.

use std::time::Instant;

use tts_audio::Format;
use tts_transport::dialects::ElevenLabsOut;
use tts_transport::protocol::{self, AudioFormat, ServerMessage};

const SAMPLES: usize = 1920;

fn through_native_socket(samples: &[f32], sink: &mut dyn tts_audio::Encoder) -> usize {
    // The session's side: f32 samples, base64, a JSON event.
    let mut raw = Vec::new();
    protocol::encode_samples(samples, AudioFormat::F32, &mut raw);
    let event = ServerMessage::Audio {
        context_id: "c#1".into(),
        stream_id: 1,
        seq: 7,
        terminal: false,
        sample_rate: 24000,
        format: AudioFormat::F32,
        audio: protocol::base64_encode(&raw),
    }
    .to_json();
    // The dialect's side: parse, decode, encode again, wrap.
    let Ok(ServerMessage::Audio { audio, .. }) = protocol::parse_server_text(&event) else {
        unreachable!("the event parses");
    };
    let bytes = protocol::base64_decode(&audio).unwrap_or_default();
    let decoded = protocol::decode_samples(&bytes, AudioFormat::F32);
    let mut out = Vec::new();
    sink.push(&decoded, &mut out).expect("pcm encodes");
    wrap(&out).len()
}

fn as_a_port(samples: &[f32]) -> usize {
    let mut payload = Vec::new();
    protocol::encode_samples(samples, AudioFormat::Pcm16, &mut payload);
    wrap(&payload).len()
}

fn wrap(payload: &[u8]) -> String {
    ElevenLabsOut::Audio {
        audio: protocol::base64_encode(payload),
        is_final: Some(false),
        normalized_alignment: None,
        alignment: None,
        context_id: Some("c".into()),
    }
    .to_json()
}

fn main() {
    let frames: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(20_000);
    let samples: Vec<f32> = (0..SAMPLES)
        .map(|i| (i as f32 * 0.031).sin() * 0.4)
        .collect();
    let mut sink = Format::Pcm.encoder(24000).expect("pcm encoder");
    assert_eq!(
        through_native_socket(&samples, sink.as_mut()),
        as_a_port(&samples),
        "both ways send the same message"
    );
    let mut old = Vec::new();
    let mut new = Vec::new();
    let mut keep = 0usize;
    for round in 0..9 {
        for arm in [round % 2, 1 - round % 2] {
            let t = Instant::now();
            for _ in 0..frames {
                keep += if arm == 0 {
                    through_native_socket(&samples, sink.as_mut())
                } else {
                    as_a_port(&samples)
                };
            }
            let us = t.elapsed().as_secs_f64() * 1e6 / frames as f64;
            if arm == 0 { &mut old } else { &mut new }.push(us);
        }
    }
    let stat = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        (v[v.len() / 2], v[0], v[v.len() - 1])
    };
    let (o, n) = (stat(&mut old), stat(&mut new));
    println!(
        "one 80 ms PCM16 frame at 24 kHz, ElevenLabs JSON; median (min..max) of 9 runs of {frames}"
    );
    println!(
        "  through a native socket: {:.1} us ({:.1}..{:.1})",
        o.0, o.1, o.2
    );
    println!(
        "  as a port:               {:.1} us ({:.1}..{:.1})",
        n.0, n.1, n.2
    );
    std::hint::black_box(keep);
}
