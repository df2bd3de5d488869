//! A WebSocket client of `/v1/realtime` for the probes: connect, read one
//! message (audio counted, close codes kept), and speak one whole context
//! checking its audio is complete and contiguous.

use std::net::SocketAddr;

use anyhow::{bail, Context, Result};
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};
use tts_transport::protocol::{self, AudioHeader, ServerMessage};

use super::WAIT;

pub type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Got {
    Msg(ServerMessage),
    /// A binary audio frame: its header and sample count.
    Audio(AudioHeader, usize),
    Closed(Option<u16>),
}

/// Connects and reads `session.created`.
pub async fn connect(addr: SocketAddr) -> Result<Ws> {
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{addr}/v1/realtime")).await?;
    match next(&mut ws).await? {
        Got::Msg(ServerMessage::SessionCreated { .. }) => Ok(ws),
        other => bail!("first message: {other:?}"),
    }
}

pub async fn next(ws: &mut Ws) -> Result<Got> {
    loop {
        let m = tokio::time::timeout(WAIT, ws.next())
            .await
            .context("timed out waiting for the server")?;
        return Ok(match m {
            None => Got::Closed(None),
            Some(Err(e)) => bail!("websocket error (not a close frame): {e}"),
            Some(Ok(Message::Text(t))) => Got::Msg(
                protocol::parse_server_text(t.as_str())
                    .map_err(|e| anyhow::anyhow!("unparsable {t}: {e:?}"))?,
            ),
            Some(Ok(Message::Binary(b))) => {
                let (h, payload) = AudioHeader::parse(&b).map_err(|e| anyhow::anyhow!("{e:?}"))?;
                let width = if h.format == protocol::AudioFormat::F32 {
                    4
                } else {
                    2
                };
                Got::Audio(h, payload.len() / width)
            }
            Some(Ok(Message::Close(f))) => Got::Closed(f.map(|f| u16::from(f.code))),
            Some(Ok(_)) => continue,
        });
    }
}

pub async fn send(ws: &mut Ws, v: Value) -> Result<()> {
    ws.send(Message::text(v.to_string())).await?;
    Ok(())
}

/// Reads until the server's close frame and returns its code.
pub async fn close_code(ws: &mut Ws) -> Result<Option<u16>> {
    loop {
        if let Got::Closed(code) = next(ws).await? {
            return Ok(code);
        }
    }
}

/// What one context delivered.
#[derive(Debug)]
pub struct Spoken {
    pub samples: usize,
    pub frames: u32,
    pub sample_rate: u32,
}

/// Speaks `text` as context `id` on `ws` and checks the audio came whole:
/// `context.done`, sequence numbers 0, 1, … without a gap, one terminal
/// frame and it last, every frame of the context's stream.
pub async fn speak(ws: &mut Ws, id: &str, text: &str) -> Result<Spoken> {
    send(
        ws,
        json!({"type": "context.append", "context_id": id, "text": text}),
    )
    .await?;
    send(ws, json!({"type": "context.end", "context_id": id})).await?;
    let mut stream = None;
    let mut spoken = Spoken {
        samples: 0,
        frames: 0,
        sample_rate: 0,
    };
    let mut terminal = false;
    loop {
        match next(ws).await? {
            Got::Msg(ServerMessage::ContextStarted { stream_id, .. }) => stream = Some(stream_id),
            Got::Audio(h, n) => {
                anyhow::ensure!(Some(h.stream_id) == stream, "audio of another stream");
                anyhow::ensure!(!terminal, "audio after the terminal frame");
                anyhow::ensure!(
                    h.seq == spoken.frames,
                    "seq {} where {} was due",
                    h.seq,
                    spoken.frames
                );
                spoken.frames += 1;
                spoken.samples += n;
                spoken.sample_rate = h.sample_rate;
                terminal = h.terminal;
            }
            Got::Msg(ServerMessage::ContextDone { .. }) => break,
            Got::Msg(
                m @ (ServerMessage::ContextFailed { .. } | ServerMessage::ContextCancelled { .. }),
            ) => bail!("context {id} ended {m:?}"),
            Got::Msg(_) => {}
            Got::Closed(c) => bail!("closed ({c:?}) during context {id}"),
        }
    }
    anyhow::ensure!(terminal, "no terminal frame");
    anyhow::ensure!(spoken.samples > 0, "no audio");
    Ok(spoken)
}
