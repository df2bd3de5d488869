//! Home Assistant's Wyoming protocol (`--wyoming-port`): a TCP listener
//! whose connections each run an ordinary realtime session
//! (`realtime::run`: the same context queue, segmentation, engine session,
//! send bounds and drain as `/v1/realtime`) on a [`port::WyomingPort`],
//! which translates Wyoming's TTS events into the session's typed input
//! and its events and audio back, as the vendor sockets' ports do
//! (`crate::dialects`).
//!
//! Files:
//! - `framing`: Wyoming's event framing, read incrementally with hard
//!   bounds.
//! - `info`: the `info` event (the program, its voices and languages).
//! - `port`: the translation.
//!
//! Admission: at most `max_connections` Wyoming connections at once (past
//! it a connection is closed unanswered), then a session slot shared with
//! the WebSocket routes (`--max-sessions`, the longest-idle session may be
//! evicted for it); a connection the server cannot take (draining, the
//! model still loading, no session slot) gets an `error` event saying why
//! and is closed. Wyoming has no authentication: the port serves without
//! `--token` (bind it where only trusted clients reach it).

mod framing;
mod info;
mod port;

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};

use crate::realtime::{self, SEND_TIMEOUT};
use crate::state::{AppState, Drain};

pub use framing::{MAX_DATA_BYTES, MAX_HEADER_BYTES, MAX_PAYLOAD_BYTES};

/// Wyoming's default TTS port.
pub const DEFAULT_PORT: u16 = 10200;

/// Accepts Wyoming connections until `stop` is set.
pub async fn accept_loop(
    listener: TcpListener,
    st: Arc<AppState>,
    max_connections: usize,
    nodelay: bool,
    mut stop: watch::Receiver<bool>,
) {
    let open = Arc::new(Semaphore::new(max_connections));
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = stop.wait_for(|s| *s) => return,
        };
        let Ok((tcp, peer)) = accepted else {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        };
        let Ok(permit) = open.clone().try_acquire_owned() else {
            tracing::debug!(peer = %peer, "Wyoming connection over the cap (--max-connections); closed");
            continue;
        };
        if nodelay {
            let _ = tcp.set_nodelay(true);
        }
        let span = tracing::info_span!("session", wyoming = %peer);
        tokio::spawn(tracing::Instrument::instrument(
            serve(tcp, st.clone(), permit),
            span,
        ));
    }
}

/// One connection: admitted (ready, a session slot), then its session.
async fn serve(tcp: TcpStream, st: Arc<AppState>, _conn: OwnedSemaphorePermit) {
    let m = match st.ready_for_work("draining") {
        Ok(m) => m,
        Err(_) if st.drain_state() != Drain::Running => {
            return refuse(
                tcp,
                "shutting_down",
                "the server is shutting down; reconnect to another instance",
            )
            .await
        }
        Err(_) => return refuse(tcp, "not_ready", crate::state::NOT_READY).await,
    };
    let permit = match st.session_permit().await {
        Ok(p) => p,
        Err(_) => {
            return refuse(
                tcp,
                "too_many_sessions",
                "too many sessions, all in use; retry later or raise --max-sessions",
            )
            .await
        }
    };
    let (r, w) = tcp.into_split();
    let p = port::WyomingPort::new(r, w, m.clone(), st.max_pending_chars);
    realtime::run(st, m, p, permit).await;
}

/// An `error` event, then the close.
async fn refuse(mut tcp: TcpStream, code: &str, text: &str) {
    let e = framing::encode("error", Some(&json!({"text": text, "code": code})), &[]);
    let _ = tokio::time::timeout(SEND_TIMEOUT, async {
        tcp.write_all(&e).await?;
        tcp.shutdown().await
    })
    .await;
}
