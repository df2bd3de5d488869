//! The accept loop: every TCP connection the server holds, capped, with
//! read timeouts, each served by hyper's HTTP/1 connection (upgrades on, so
//! `/v1/realtime` can take the socket over).
//!
//! - **Cap**: at most `max_connections` HTTP connections at once (WebSocket
//!   sessions leave the count once upgraded; `max_sessions` caps those).
//!   Past it a connection gets a `503` JSON refusal and is closed — except
//!   `GET /health`, answered even then, so a flood does not make a live
//!   server look dead. Refusals run on a small pool of their own
//!   ([`MAX_REFUSING`]); past that, connections are closed unanswered.
//! - **Header read timeout**: a request head (and the wait for the next one
//!   on a kept-alive connection) must arrive within `header_read_timeout`,
//!   or hyper closes the connection: slow-header and idle sockets go away.
//! - **Write stall timeout**: a write the peer takes no bytes of for
//!   [`WRITE_STALL`] fails, which closes the connection and, through the
//!   dropped response body, cancels the synthesis feeding it
//!   ([`crate::write_timeout`]).
//! - **Body read timeout**: a request body must arrive within
//!   `body_read_timeout` of the handler's first read (see [`timed_body`]),
//!   or the request is answered 408.
//! - **Drain**: once shutdown starts, each connection finishes its request
//!   and closes (hyper's graceful shutdown); new connections are still
//!   accepted, one request each, so `/ready` can say "draining".
//! - **TLS** (`--tls-cert`/`--tls-key`, [`crate::tls`]): each accepted
//!   socket's handshake runs on its own task, holding its connection slot,
//!   and must finish within `header_read_timeout` or the socket is closed;
//!   a failed handshake (a plain-HTTP client, a client that distrusts the
//!   certificate) is logged at debug and closes only that connection. A
//!   plain-HTTP request is answered a plain `400` naming https first. Past
//!   the cap a TLS connection is closed unanswered (the `503` and the
//!   `/health` answer are plain HTTP; `--health-port` serves probes).
//! - **TCP_NODELAY**: set on every accepted socket (see [`no_delay`]).
//!   `ServeConfig::nodelay` false leaves Nagle's algorithm on instead: a
//!   measurement switch (`benches/nodelay.sh` compares both), not a tuning
//!   knob. `tts-rt` sets it from the environment variable
//!   `TTS_RT_NODELAY=off`, read once when the binary starts and parsed by
//!   [`parse_nodelay`]: `on` (or unset, or empty) is the default, and any
//!   other value refuses to start with the accepted values named.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::Response;
use axum::Router;
use futures_util::StreamExt;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio_rustls::TlsAcceptor;

use crate::http_error::error_response;
use crate::state::Drain;
use crate::write_timeout::{WriteTimeout, WRITE_STALL};

/// Connections being refused at once (each for at most [`REFUSAL_TIME`]).
pub const MAX_REFUSING: usize = 64;
/// Longest a refusal holds its socket: read what the client sent (so the
/// close is not a reset), write the 503, close.
pub const REFUSAL_TIME: Duration = Duration::from_millis(500);

/// The connection limits (from `ServeConfig`; the cap itself is the `open`
/// semaphore the accept loop is given).
#[derive(Clone, Copy, Debug)]
pub struct ConnLimits {
    pub header_read_timeout: Duration,
    /// TCP_NODELAY on accepted sockets (`ServeConfig::nodelay`).
    pub nodelay: bool,
}

/// The variable `tts-rt` reads [`ServeConfig::nodelay`](crate::ServeConfig::nodelay)
/// from: `TTS_RT_NODELAY=off` leaves Nagle on.
pub const NODELAY_ENV: &str = "TTS_RT_NODELAY";

/// Parses a value of [`NODELAY_ENV`] (the program reads the variable, once
/// at start, and passes what it found): `None`, `""`, `on`, `1`, `true`,
/// `yes` → TCP_NODELAY on; `off`, `0`, `false`, `no` → off
/// (case-insensitive, surrounding blanks ignored). Anything else is refused
/// with a message naming the variable and its accepted values.
pub fn parse_nodelay(value: Option<&str>) -> Result<bool, String> {
    let Some(v) = value else { return Ok(true) };
    match v.trim().to_ascii_lowercase().as_str() {
        "" | "on" | "1" | "true" | "yes" => Ok(true),
        "off" | "0" | "false" | "no" => Ok(false),
        _ => Err(format!(
            "environment variable {NODELAY_ENV}={v:?} is not understood; use `on` (the default) or `off` (leaves Nagle's algorithm on, for measurements)"
        )),
    }
}

/// Accepts until `stop` is set; returns when it is. Connections already
/// accepted keep running on their own tasks; `open` counts them.
pub async fn accept_loop(
    listener: TcpListener,
    app: Router,
    limits: ConnLimits,
    drain: watch::Receiver<Drain>,
    open: Arc<Semaphore>,
    tls: Option<TlsAcceptor>,
    mut stop: watch::Receiver<bool>,
) {
    let refusing = Arc::new(Semaphore::new(MAX_REFUSING));
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = stop.wait_for(|s| *s) => return,
        };
        let tcp = match accepted {
            Ok((tcp, _)) => tcp,
            // Out of file handles (EMFILE) or a connection reset before
            // accept: back off briefly instead of spinning.
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        no_delay(&tcp, limits.nodelay);
        match open.clone().try_acquire_owned() {
            Ok(permit) => {
                let keep_alive = *drain.borrow() == Drain::Running;
                tokio::spawn(serve_connection(
                    tcp,
                    app.clone(),
                    limits,
                    drain.clone(),
                    permit,
                    keep_alive,
                    tls.clone(),
                ));
            }
            // Over TLS the plain-HTTP refusals would be noise to the
            // client: closed unanswered.
            Err(_) if tls.is_some() => drop(tcp),
            Err(_) => match refusing.clone().try_acquire_owned() {
                Ok(p) => {
                    tokio::spawn(refuse(tcp, p));
                }
                // The refusals are all busy (a reconnecting flood keeps
                // them so): a probe whose request has already arrived is
                // still answered, from what the socket holds now, without
                // waiting; anything else is closed unanswered.
                Err(_) => {
                    tokio::spawn(answer_health_now(tcp));
                }
            },
        }
    }
}

async fn serve_connection(
    tcp: TcpStream,
    app: Router,
    limits: ConnLimits,
    drain: watch::Receiver<Drain>,
    _permit: OwnedSemaphorePermit,
    keep_alive: bool,
    tls: Option<TlsAcceptor>,
) {
    let tcp = WriteTimeout::new(tcp, WRITE_STALL);
    match tls {
        None => serve_http(tcp, app, limits, drain, keep_alive).await,
        Some(acceptor) => {
            if let Some(stream) = handshake(tcp, &acceptor, limits.header_read_timeout).await {
                serve_http(stream, app, limits, drain, keep_alive).await;
            }
        }
    }
}

/// The TLS handshake of an accepted socket, within `within`; `None` (the
/// socket closed, the reason logged at debug) if it failed, took longer,
/// or the client spoke plain HTTP (answered a `400` that says so first).
async fn handshake(
    mut tcp: WriteTimeout<TcpStream>,
    acceptor: &TlsAcceptor,
    within: Duration,
) -> Option<tokio_rustls::server::TlsStream<WriteTimeout<TcpStream>>> {
    let peer = tcp.get_ref().peer_addr().ok();
    let deadline = tokio::time::Instant::now() + within;
    let outcome = tokio::time::timeout_at(deadline, async {
        let mut first = [0u8; 1];
        let n = tcp.get_ref().peek(&mut first).await?;
        if crate::tls::looks_like_plain_http(&first[..n]) {
            tcp.write_all(crate::tls::PLAIN_HTTP_ANSWER.as_bytes())
                .await?;
            tcp.shutdown().await?;
            // Let the rest of the request in, so closing is a FIN.
            let mut sink = [0u8; 4096];
            while tcp.read(&mut sink).await? > 0 {}
            return Err(std::io::Error::other(
                "a plain-HTTP request on the TLS port (answered 400)",
            ));
        }
        acceptor.accept(tcp).await
    })
    .await;
    match outcome {
        Ok(Ok(stream)) => Some(stream),
        Ok(Err(e)) => {
            tracing::debug!(peer = ?peer, error = %e, "TLS handshake failed");
            None
        }
        Err(_) => {
            tracing::debug!(
                peer = ?peer,
                "TLS handshake not done within {:.1} s (--header-timeout-s); closed",
                within.as_secs_f64()
            );
            None
        }
    }
}

/// One HTTP/1 connection (plain or TLS) served by hyper until it closes.
async fn serve_http<S>(
    io: S,
    app: Router,
    limits: ConnLimits,
    mut drain: watch::Receiver<Drain>,
    keep_alive: bool,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mut b = hyper::server::conn::http1::Builder::new();
    b.timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .keep_alive(keep_alive);
    let conn = b
        .serve_connection(TokioIo::new(io), TowerToHyperService::new(app))
        .with_upgrades();
    tokio::pin!(conn);
    // Accepted during the drain: one request, no keep-alive, so no
    // graceful shutdown either (on a fresh connection it would close it
    // before its request is read).
    let mut closing = !keep_alive;
    loop {
        tokio::select! {
            _ = conn.as_mut() => return,
            _ = drain.wait_for(|d| *d != Drain::Running), if !closing => {
                closing = true;
                conn.as_mut().graceful_shutdown();
            }
        }
    }
}

/// Over the connection cap: a `503` in the OpenAI error shape (or `/health`
/// answered), then close.
async fn refuse(mut tcp: TcpStream, _permit: OwnedSemaphorePermit) {
    let _ = tokio::time::timeout(REFUSAL_TIME, async {
        let mut head = [0u8; 1024];
        let n = tokio::time::timeout(REFUSAL_TIME / 2, tcp.read(&mut head))
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or(0);
        if is_health_probe(&head[..n]) {
            tcp.write_all(HEALTH_ANSWER.as_bytes()).await?;
        } else {
            let body = serde_json::json!({"error": {
                "message": "too many connections; retry shortly (the server caps open connections: --max-connections)",
                "type": "server_error", "param": null, "code": null,
            }})
            .to_string();
            let resp = format!(
                "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: {}\r\nretry-after: 1\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            tcp.write_all(resp.as_bytes()).await?;
        }
        tcp.shutdown().await?;
        // Let the rest of what the client sent in, so closing is a FIN.
        let mut sink = [0u8; 4096];
        while tcp.read(&mut sink).await? > 0 {}
        Ok::<(), std::io::Error>(())
    })
    .await;
}

/// Past the cap with every refusal busy: `GET /health` answered if its
/// request is already in the socket (a probe sends it right after
/// connecting; on loopback it is there by the time it is accepted), else
/// closed at once. Holds nothing: one read attempt, one write.
async fn answer_health_now(mut tcp: TcpStream) {
    let mut head = [0u8; 64];
    let n = match tokio::time::timeout(QUICK_HEALTH_WAIT, tcp.read(&mut head)).await {
        Ok(Ok(n)) => n,
        _ => return,
    };
    if is_health_probe(&head[..n]) {
        let _ =
            tokio::time::timeout(QUICK_HEALTH_WAIT, tcp.write_all(HEALTH_ANSWER.as_bytes())).await;
    }
}

/// A request head that is `GET /health` (with or without a query).
fn is_health_probe(head: &[u8]) -> bool {
    head.starts_with(b"GET /health ") || head.starts_with(b"GET /health?")
}

/// What a connection past the cap that asked `GET /health` is answered.
const HEALTH_ANSWER: &str = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 15\r\nconnection: close\r\n\r\n{\"status\":\"ok\"}";

/// How long [`answer_health_now`] waits for a probe's request, and for its
/// answer to be taken.
const QUICK_HEALTH_WAIT: Duration = Duration::from_millis(20);

/// Most probe connections the health listener holds at once; past it a
/// connection is closed unanswered.
pub const MAX_PROBES: usize = 256;
/// Longest a probe connection is held: its request must arrive, and its
/// answer be taken, within this.
pub const PROBE_TIME: Duration = Duration::from_secs(2);

/// The health listener (`--health-port`): serves `app` (its `/health` and
/// `/ready` only), one request per connection, each within [`PROBE_TIME`].
/// It has no token and shares no cap with the main port, so a connection
/// flood there cannot make a live server look dead to its orchestrator.
pub async fn probe_loop(listener: TcpListener, app: Router, mut stop: watch::Receiver<bool>) {
    let probes = Arc::new(Semaphore::new(MAX_PROBES));
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            _ = stop.wait_for(|s| *s) => return,
        };
        let Ok((tcp, _)) = accepted else {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        };
        let Ok(permit) = probes.clone().try_acquire_owned() else {
            continue;
        };
        no_delay(&tcp, true);
        let app = app.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let mut b = hyper::server::conn::http1::Builder::new();
            b.timer(TokioTimer::new())
                .header_read_timeout(PROBE_TIME)
                .keep_alive(false);
            let conn = b.serve_connection(
                TokioIo::new(WriteTimeout::new(tcp, PROBE_TIME)),
                TowerToHyperService::new(app),
            );
            let _ = tokio::time::timeout(PROBE_TIME, conn).await;
        });
    }
}

/// Middleware: the request body must arrive within `timeout` of its first
/// read, else the request is answered `408` (whatever the handler said
/// after its read failed). Bodies are read only after the token check, so
/// this bounds what an authorised slow client can pin.
pub async fn timed_body(timeout: Duration, req: Request, next: Next) -> Response {
    let expired = Arc::new(AtomicBool::new(false));
    let (parts, body) = req.into_parts();
    let start = (body.into_data_stream(), None, expired.clone(), false);
    let chunks =
        futures_util::stream::unfold(start, move |(mut data, deadline, flag, done)| async move {
            if done {
                return None;
            }
            let deadline = deadline.unwrap_or_else(|| tokio::time::Instant::now() + timeout);
            match tokio::time::timeout_at(deadline, data.next()).await {
                Ok(Some(Ok(b))) => Some((Ok(b), (data, Some(deadline), flag, false))),
                Ok(Some(Err(e))) => Some((
                    Err(std::io::Error::other(e)),
                    (data, Some(deadline), flag, true),
                )),
                Ok(None) => None,
                Err(_) => {
                    flag.store(true, Ordering::Relaxed);
                    let e =
                        std::io::Error::new(std::io::ErrorKind::TimedOut, "request body timed out");
                    Some((Err(e), (data, Some(deadline), flag, true)))
                }
            }
        });
    let req = Request::from_parts(parts, axum::body::Body::from_stream(chunks));
    let resp = next.run(req).await;
    if expired.load(Ordering::Relaxed) {
        return error_response(
            StatusCode::REQUEST_TIMEOUT,
            &format!(
                "the request body did not arrive within {:.0} s; send it at once, or raise --body-timeout-s",
                timeout.as_secs_f64()
            ),
            "invalid_request_error",
            None,
        );
    }
    resp
}

/// TCP_NODELAY on every accepted connection: audio leaves in small writes
/// (a chunk, an SSE event, a WebSocket frame) that Nagle's algorithm would
/// hold back until the peer's delayed ACK (~40 ms on Linux) releases them.
/// `on = false` (`TTS_RT_NODELAY=off`) leaves the socket as accepted, Nagle
/// on, for measuring what the option buys.
fn no_delay(tcp: &tokio::net::TcpStream, on: bool) {
    if on {
        // A socket that refuses the option still works, only slower to flush.
        let _ = tcp.set_nodelay(true);
    }
}

#[cfg(test)]
mod nodelay_tests {
    use tokio::net::{TcpListener, TcpStream};

    /// An accepted loopback connection and its client end.
    async fn accepted() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(l.local_addr().unwrap());
        let ((tcp, _), c) = tokio::try_join!(l.accept(), client).unwrap();
        (tcp, c)
    }

    #[tokio::test]
    async fn accepted_connections_have_tcp_nodelay() {
        let (tcp, _c) = accepted().await;
        assert!(!tcp.nodelay().unwrap(), "the default is Nagle on");
        super::no_delay(&tcp, true);
        assert!(tcp.nodelay().unwrap());
    }

    #[tokio::test]
    async fn the_switch_off_leaves_nagle_on() {
        let (tcp, _c) = accepted().await;
        super::no_delay(&tcp, false);
        assert!(!tcp.nodelay().unwrap(), "off must leave Nagle on");
    }

    #[test]
    fn the_switch_parses_on_off_and_refuses_the_rest() {
        use super::parse_nodelay as p;
        for v in [
            None,
            Some(""),
            Some("on"),
            Some(" ON "),
            Some("1"),
            Some("true"),
            Some("yes"),
        ] {
            assert_eq!(p(v), Ok(true), "{v:?}");
        }
        for v in ["off", "Off", "0", "false", "no", " off\n"] {
            assert_eq!(p(Some(v)), Ok(false), "{v:?}");
        }
        for v in ["maybe", "2", "nodelay", "\u{fffd}"] {
            let e = p(Some(v)).unwrap_err();
            assert!(e.contains("TTS_RT_NODELAY") && e.contains("`off`"), "{e}");
        }
    }
}

#[cfg(test)]
mod health_answer_tests {
    #[test]
    fn the_health_answer_states_its_body_length() {
        let (head, body) = super::HEALTH_ANSWER.split_once("\r\n\r\n").unwrap();
        assert!(head.contains(&format!("content-length: {}\r\n", body.len())));
        assert!(super::is_health_probe(b"GET /health?x=1 HTTP/1.1"));
        assert!(!super::is_health_probe(b"GET /healthz HTTP/1.1"));
    }
}
