//! The native port: `/v1/realtime`'s WebSocket. Text messages are the
//! protocol's JSON (`protocol::parse_client_text`), binary ones input
//! audio; events go out as JSON, audio as the binary frame with its header
//! or a base64 `audio` event (`output::audio_message`), every send bounded
//! by [`SEND_TIMEOUT`].

use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::{self, Message};

use crate::protocol::{self, ServerMessage};

use super::output::{audio_message, SEND_TIMEOUT};
use super::port::{AudioOut, Closed, Incoming, Port, Res};
use super::upgrade::{close_and_drain, Socket};

/// A native realtime WebSocket.
pub struct NativePort {
    ws: Socket,
}

impl NativePort {
    pub fn new(ws: Socket) -> Self {
        NativePort { ws }
    }

    async fn send_message(&mut self, msg: Message) -> Res {
        match tokio::time::timeout(SEND_TIMEOUT, self.ws.send(msg)).await {
            Ok(Ok(())) => Ok(()),
            _ => Err(Closed),
        }
    }
}

/// A frame the WebSocket layer refused: the close code RFC 6455 names for
/// it (1009 too big, 1007 not UTF-8, 1002 a protocol violation), its
/// reason naming `limit` for a message that is too big; a broken socket
/// just ends. Every WebSocket port closes so.
pub fn socket_error(e: tungstenite::Error, limit: &str) -> Incoming {
    use tungstenite::Error as E;
    match e {
        E::Capacity(_) => Incoming::Close(
            1009,
            format!(
                "message over {} MiB ({limit})",
                protocol::HARD_MESSAGE_BYTES >> 20
            ),
        ),
        E::Utf8(_) => Incoming::Close(1007, "text message is not valid UTF-8".to_string()),
        E::Protocol(p) => Incoming::Close(1002, format!("WebSocket protocol error: {p}")),
        _ => Incoming::Closed,
    }
}

impl Port for NativePort {
    async fn recv(&mut self) -> Incoming {
        match self.ws.next().await {
            Some(Ok(Message::Text(t))) => match protocol::parse_client_text(t.as_str()) {
                Ok(m) => Incoming::Client(m),
                Err(e) => Incoming::Refused(e),
            },
            Some(Ok(Message::Binary(b))) => match protocol::parse_client_binary(&b) {
                Ok(a) => Incoming::InputAudio(a),
                Err(e) => Incoming::Refused(e),
            },
            Some(Ok(Message::Close(_))) | None => Incoming::Closed,
            // tungstenite answers pings itself.
            Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => {
                Incoming::Heard { message: false }
            }
            Some(Err(e)) => socket_error(e, "the protocol's hard limit"),
        }
    }

    async fn send(&mut self, m: &ServerMessage) -> Res {
        self.send_message(Message::Text(m.to_json().into())).await
    }

    async fn send_audio(&mut self, a: AudioOut<'_>) -> Res {
        let msg = audio_message(
            a.context_id,
            a.stream_id,
            a.seq,
            a.settings,
            a.payload,
            a.terminal,
        );
        self.send_message(msg).await
    }

    async fn ping(&mut self, payload: Vec<u8>) -> Res {
        self.send_message(Message::Ping(payload.into())).await
    }

    async fn close(&mut self, code: u16, reason: &str) {
        close_and_drain(&mut self.ws, code, reason, SEND_TIMEOUT).await;
    }
}
