//! The session's lifecycle through a test port: typed input in, typed
//! events and audio out, no socket. Time is under the test's control
//! (`tokio::time::pause`): the liveness, idle and text-wait bounds are
//! checked at their exact deadlines, not by sleeping.
//!
//! The session runs on the tiny fixture checkpoint, loaded by a server on
//! a loopback port (nothing is sent to it: its state and model are what a
//! session needs).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::protocol::{
    ChunkingMode, ChunkingUpdate, ClientMessage, ErrorCode, ServerMessage, SessionUpdate,
};
use crate::server::{ServeConfig, Server};
use crate::state::{AppState, Drain, Loaded};

use super::port::{AudioOut, Incoming, Port, Res};

/// What the session sent its port, in order.
#[derive(Debug)]
enum Sent {
    Event(Box<ServerMessage>),
    Audio {
        context_id: String,
        seq: u64,
        terminal: bool,
        bytes: usize,
    },
    Ping,
    Close(u16, String),
}

/// A port of channels: the test sends [`Incoming`] values and reads
/// [`Sent`] ones, each stamped with the (test-controlled) time it left.
struct TestPort {
    input: mpsc::UnboundedReceiver<Incoming>,
    sent: mpsc::UnboundedSender<(Instant, Sent)>,
}

impl TestPort {
    fn out(&self, s: Sent) -> Res {
        let _ = self.sent.send((Instant::now(), s));
        Ok(())
    }
}

impl Port for TestPort {
    async fn recv(&mut self) -> Incoming {
        self.input.recv().await.unwrap_or(Incoming::Closed)
    }

    async fn send(&mut self, m: &ServerMessage) -> Res {
        self.out(Sent::Event(Box::new(m.clone())))
    }

    async fn send_audio(&mut self, a: AudioOut<'_>) -> Res {
        self.out(Sent::Audio {
            context_id: a.context_id.to_string(),
            seq: a.seq,
            terminal: a.terminal,
            bytes: a.payload.len(),
        })
    }

    async fn ping(&mut self, _payload: Vec<u8>) -> Res {
        self.out(Sent::Ping)
    }

    async fn close(&mut self, code: u16, reason: &str) {
        let _ = self.out(Sent::Close(code, reason.to_string()));
    }
}

/// A session on a test port, and the ends the test holds.
struct Harness {
    st: Arc<AppState>,
    input: mpsc::UnboundedSender<Incoming>,
    sent: mpsc::UnboundedReceiver<(Instant, Sent)>,
    session: tokio::task::JoinHandle<()>,
    _server: Server,
}

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/tiny-a")
}

/// Loads the fixture (real time), then pauses the clock and opens one
/// session on a test port.
async fn session(configure: impl FnOnce(&mut ServeConfig)) -> Harness {
    open(configure, true).await
}

/// One session on a test port, the clock paused once the model is loaded
/// (`pause`) or left running (synthesis runs on the engine's own threads
/// in real time).
async fn open(configure: impl FnOnce(&mut ServeConfig), pause: bool) -> Harness {
    let mut cfg = ServeConfig::new(fixture());
    cfg.addr = std::net::SocketAddr::from(([127, 0, 0, 1], 0));
    cfg.max_frames = Some(400);
    configure(&mut cfg);
    let server = Server::start(cfg).await.expect("server starts");
    tokio::time::timeout(Duration::from_secs(60), server.ready())
        .await
        .expect("model loads in time")
        .expect("model loads");
    let st = server.state().clone();
    let m: Arc<Loaded> = st.loaded.get().expect("loaded").clone();
    if pause {
        tokio::time::pause();
    }
    let Ok(permit) = st.session_permit().await else {
        panic!("no session slot");
    };
    let (input, rx) = mpsc::unbounded_channel();
    let (tx, sent) = mpsc::unbounded_channel();
    let port = TestPort {
        input: rx,
        sent: tx,
    };
    let session = tokio::spawn(super::run(st.clone(), m, port, permit));
    Harness {
        st,
        input,
        sent,
        session,
        _server: server,
    }
}

impl Harness {
    fn send(&self, m: ClientMessage) {
        self.input.send(Incoming::Client(m)).expect("session runs");
    }

    /// The next thing the session sent (the clock runs until it does).
    async fn next(&mut self) -> (Instant, Sent) {
        self.sent
            .recv()
            .await
            .expect("the session sends before it ends")
    }

    /// The next event; pings are answered (the peer is alive).
    async fn event(&mut self) -> (Instant, ServerMessage) {
        loop {
            match self.next().await {
                (t, Sent::Event(e)) => return (t, *e),
                (_, Sent::Ping) => {
                    let _ = self.input.send(Incoming::Heard { message: false });
                }
                (_, other) => panic!("expected an event, got {other:?}"),
            }
        }
    }

    /// `session.created`, and the time it went out.
    async fn created(&mut self) -> Instant {
        let (t, e) = self.event().await;
        assert!(matches!(e, ServerMessage::SessionCreated { .. }), "{e:?}");
        t
    }

    async fn manual_chunking(&mut self) {
        self.send(ClientMessage::SessionUpdate {
            session: Box::new(SessionUpdate {
                chunking: Some(ChunkingUpdate {
                    mode: Some(ChunkingMode::Manual),
                    ..ChunkingUpdate::default()
                }),
                ..SessionUpdate::default()
            }),
        });
        let (_, e) = self.event().await;
        assert!(matches!(e, ServerMessage::SessionUpdated { .. }), "{e:?}");
    }

    /// The session ends after its close (and nothing after it).
    async fn closed(mut self) -> (Instant, u16, String) {
        loop {
            match self.next().await {
                (t, Sent::Close(code, reason)) => {
                    tokio::time::timeout(Duration::from_secs(5), &mut self.session)
                        .await
                        .expect("the session ends after its close")
                        .expect("no panic");
                    assert!(self.sent.try_recv().is_err(), "nothing after the close");
                    return (t, code, reason);
                }
                (_, Sent::Ping) => {
                    // Answered: the peer is alive.
                    let _ = self.input.send(Incoming::Heard { message: false });
                }
                (_, other) => panic!("expected the close, got {other:?}"),
            }
        }
    }
}

#[tokio::test]
async fn a_context_waiting_for_text_fails_at_the_text_wait_and_keepalives_do_not_hold_it() {
    let mut h = session(|c| c.text_wait_timeout = Duration::from_secs(30)).await;
    h.created().await;
    h.manual_chunking().await;
    let t0 = Instant::now();
    h.send(ClientMessage::ContextAppend {
        context_id: "a".into(),
        text: "Held until a flush".into(),
    });
    // Keepalives: a ping, an acknowledgement-free whitespace append.
    tokio::time::sleep(Duration::from_secs(10)).await;
    h.send(ClientMessage::Ping { id: None });
    let (_, pong) = h.event().await;
    assert!(matches!(pong, ServerMessage::Pong { .. }), "{pong:?}");
    h.send(ClientMessage::ContextAppend {
        context_id: "a".into(),
        text: "   ".into(),
    });
    let (t, e) = h.event().await;
    let ServerMessage::ContextFailed {
        context_id, code, ..
    } = e
    else {
        panic!("expected context.failed, got {e:?}");
    };
    assert_eq!((context_id.as_str(), code), ("a", ErrorCode::TextTimeout));
    let waited = t - t0;
    assert!(
        waited >= Duration::from_secs(30) && waited < Duration::from_secs(31),
        "failed after {waited:?}, the wait is 30 s from the last text"
    );
}

#[tokio::test]
async fn text_moves_the_text_wait_clock() {
    let mut h = session(|c| c.text_wait_timeout = Duration::from_secs(30)).await;
    h.created().await;
    h.manual_chunking().await;
    h.send(ClientMessage::ContextAppend {
        context_id: "a".into(),
        text: "First words,".into(),
    });
    tokio::time::sleep(Duration::from_secs(20)).await;
    let last_text = Instant::now();
    h.send(ClientMessage::ContextAppend {
        context_id: "a".into(),
        text: " and more words".into(),
    });
    let (t, e) = h.event().await;
    assert!(
        matches!(
            e,
            ServerMessage::ContextFailed {
                code: ErrorCode::TextTimeout,
                ..
            }
        ),
        "{e:?}"
    );
    let waited = t - last_text;
    assert!(
        waited >= Duration::from_secs(30) && waited < Duration::from_secs(31),
        "failed {waited:?} after the last text"
    );
}

#[tokio::test]
async fn an_idle_session_closes_at_the_idle_timeout() {
    let mut h = session(|c| c.idle_timeout = Duration::from_secs(120)).await;
    let t0 = h.created().await;
    let (t, code, reason) = h.closed().await;
    assert_eq!(code, 1001);
    assert!(reason.contains("idle for 120 s"), "{reason}");
    let after = t - t0;
    assert!(
        after >= Duration::from_secs(120) && after < Duration::from_secs(121),
        "closed after {after:?}"
    );
}

#[tokio::test]
async fn a_peer_that_never_answers_a_ping_is_closed_at_the_pong_deadline() {
    let mut h = session(|c| {
        c.ping_interval = Duration::from_secs(10);
        c.pong_timeout = Duration::from_secs(5);
    })
    .await;
    let t0 = h.created().await;
    let (ping_at, s) = h.next().await;
    assert!(matches!(s, Sent::Ping), "{s:?}");
    // Timers fire on the millisecond after their deadline.
    let ms = Duration::from_millis(10);
    assert!(ping_at - t0 >= Duration::from_secs(10) && ping_at - t0 < Duration::from_secs(10) + ms);
    // No answer: the next thing is the close, at the pong deadline.
    let (t, s) = h.next().await;
    let Sent::Close(code, reason) = s else {
        panic!("expected the close, got {s:?}");
    };
    assert_eq!(code, 1001);
    assert!(
        reason.contains("no answer to a ping within 5 s"),
        "{reason}"
    );
    assert!(t - ping_at >= Duration::from_secs(5) && t - ping_at < Duration::from_secs(5) + ms);
}

#[tokio::test]
async fn a_draining_server_closes_an_idle_session_and_refuses_new_text() {
    let mut h = session(|_| {}).await;
    h.created().await;
    h.manual_chunking().await;
    h.send(ClientMessage::ContextAppend {
        context_id: "a".into(),
        text: "Spoken before the drain ends".into(),
    });
    // Its answer says the append before it was taken.
    h.send(ClientMessage::Ping { id: None });
    let (_, pong) = h.event().await;
    assert!(matches!(pong, ServerMessage::Pong { .. }), "{pong:?}");
    h.st.drain.send_replace(Drain::Draining);
    h.send(ClientMessage::ContextAppend {
        context_id: "b".into(),
        text: "Too late".into(),
    });
    let (_, e) = h.event().await;
    let ServerMessage::Error {
        code, context_id, ..
    } = e
    else {
        panic!("expected the refusal of a new context, got {e:?}");
    };
    assert_eq!(
        (code, context_id.as_deref()),
        (ErrorCode::ShuttingDown, Some("b"))
    );
    // The open context is cancelled at the drain's force deadline.
    h.st.drain.send_replace(Drain::Force);
    let (_, e) = h.event().await;
    assert!(
        matches!(&e, ServerMessage::ContextCancelled { context_id, .. } if context_id == "a"),
        "{e:?}"
    );
    let (_, code, reason) = h.closed().await;
    assert_eq!((code, reason.as_str()), (1001, "server shutting down"));
}

#[tokio::test]
async fn refused_input_is_answered_and_the_session_goes_on() {
    let mut h = session(|_| {}).await;
    h.created().await;
    h.input
        .send(Incoming::Refused(crate::protocol::ProtocolError::new(
            ErrorCode::InvalidMessage,
            "not a message",
        )))
        .unwrap();
    let (_, e) = h.event().await;
    assert!(
        matches!(
            &e,
            ServerMessage::Error {
                code: ErrorCode::InvalidMessage,
                ..
            }
        ),
        "{e:?}"
    );
    h.send(ClientMessage::Ping {
        id: Some("p".into()),
    });
    let (_, e) = h.event().await;
    assert!(matches!(e, ServerMessage::Pong { .. }), "{e:?}");
    h.input
        .send(Incoming::Close(1009, "too big".into()))
        .unwrap();
    let (_, code, reason) = h.closed().await;
    assert_eq!((code, reason.as_str()), (1009, "too big"));
}

/// Synthesis runs on the engine's own threads in real time: this test
/// leaves the clock running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spoken_context_starts_sends_its_frames_in_order_and_is_done() {
    let Harness {
        input,
        mut sent,
        session,
        _server,
        ..
    } = open(|c| c.max_frames = Some(40), false).await;
    for m in [
        ClientMessage::ContextAppend {
            context_id: "c".into(),
            text: "Hello there.".into(),
        },
        ClientMessage::ContextEnd {
            context_id: "c".into(),
        },
    ] {
        input.send(Incoming::Client(m)).unwrap();
    }
    let mut started = false;
    let mut seqs = Vec::new();
    let mut terminal = false;
    loop {
        let (_, s) = tokio::time::timeout(Duration::from_secs(60), sent.recv())
            .await
            .expect("the session answers")
            .expect("the session runs");
        let s = match s {
            Sent::Event(e) => Ok(*e),
            other => Err(other),
        };
        match s {
            Ok(ServerMessage::SessionCreated { .. }) | Err(Sent::Ping) => {}
            Ok(ServerMessage::ContextStarted { context_id, .. }) => {
                assert_eq!(context_id, "c");
                started = true;
            }
            Err(Sent::Audio {
                context_id,
                seq,
                terminal: t,
                bytes,
            }) => {
                assert!(started, "audio after context.started");
                assert!(!terminal, "nothing after the terminal frame");
                assert_eq!(context_id, "c");
                assert!(bytes > 0 || t, "only the terminal frame may be empty");
                seqs.push(seq);
                terminal = t;
            }
            Ok(ServerMessage::ContextDone { context_id, .. }) => {
                assert_eq!(context_id, "c");
                break;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(terminal, "the last frame is terminal");
    assert_eq!(seqs, (0..seqs.len() as u64).collect::<Vec<_>>());
    drop(input);
    tokio::time::timeout(Duration::from_secs(5), session)
        .await
        .expect("the session ends when its port closes")
        .expect("no panic");
}
