//! What leaves the socket: JSON events, audio frames (binary with the
//! 16-byte header, or base64 inside JSON) and the close frame, each send
//! bounded by [`SEND_TIMEOUT`] — a client that stops reading closes its own
//! connection and pauses nobody else.

use std::time::Duration;

use axum::extract::ws::{CloseFrame, Message, WebSocket};

use crate::protocol::{self, AudioHeader, AudioTransport, ServerMessage};

use super::settings::CtxSettings;

/// A client that takes no frame for this long is gone.
pub const SEND_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the connection loop stopped (the socket is closed or gone).
pub struct Closed;

pub type Res<T = ()> = Result<T, Closed>;

pub async fn send(ws: &mut WebSocket, msg: Message) -> Res {
    match tokio::time::timeout(SEND_TIMEOUT, ws.send(msg)).await {
        Ok(Ok(())) => Ok(()),
        _ => Err(Closed),
    }
}

pub async fn send_json(ws: &mut WebSocket, m: &ServerMessage) -> Res {
    send(ws, Message::Text(m.to_json().into())).await
}

/// Sends a close frame (best effort) and stops the loop.
pub async fn close(ws: &mut WebSocket, code: u16, reason: &str) -> Res {
    let _ = send(
        ws,
        Message::Close(Some(CloseFrame {
            code,
            reason: reason.into(),
        })),
    )
    .await;
    Err(Closed)
}

/// Frame `seq` of context `id` in the transport its settings chose.
pub fn audio_message(
    id: &str,
    stream_id: Option<u32>,
    seq: u64,
    s: &CtxSettings,
    samples: &[f32],
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
        AudioTransport::Binary => Message::Binary(protocol::audio_frame(&header, samples).into()),
        AudioTransport::Base64 => {
            let mut bytes = Vec::new();
            protocol::encode_samples(samples, header.format, &mut bytes);
            Message::Text(
                ServerMessage::Audio {
                    context_id: id.to_string(),
                    stream_id: header.stream_id,
                    seq,
                    terminal,
                    sample_rate: header.sample_rate,
                    format: header.format,
                    audio: protocol::base64_encode(&bytes),
                }
                .to_json()
                .into(),
            )
        }
    }
}
