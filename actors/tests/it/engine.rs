//! The streaming runtime end to end on the tiny fixtures: streamed equals
//! offline, cancellation, slow consumers, crashed and stalled stages,
//! admission. Assertions are on content and lifecycle, never on speed; the
//! timeouts only turn a hang into a failure.
//!
//! (One module of ~960 lines on purpose: every test here shares one loaded
//! fixture.)

use std::panic::AssertUnwindSafe;
use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use tts_actors::{
    AudioChunk, ChunkSchedule, Engine, EngineConfig, ErrorKind, Event, Fault, FaultAction,
    RequestMetrics, StageKind, StageThreads, Stream, TeamHold,
};
use tts_models::{GenOptions, Qwen3Tts, Request};

fn model(name: &str) -> Arc<Qwen3Tts> {
    static A: OnceLock<Arc<Qwen3Tts>> = OnceLock::new();
    static B: OnceLock<Arc<Qwen3Tts>> = OnceLock::new();
    let cell = if name == "tiny-a" { &A } else { &B };
    cell.get_or_init(|| {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures")
            .join(name);
        Arc::new(Qwen3Tts::load(&dir).expect("load fixture"))
    })
    .clone()
}

fn request(m: &Qwen3Tts, text: &str, frames: usize, greedy: bool, seed: u64) -> Request {
    let mut options: GenOptions = m.default_options();
    if greedy {
        options = options.greedy();
    }
    options.max_frames = frames;
    options.seed = seed;
    Request {
        text: text.into(),
        speaker: Some(m.speakers()[0].clone()),
        language: "english".into(),
        instruct: None,
        voice_clone: None,
        text_streaming: false,
        options,
    }
}

/// The non-streamed reference: `FrameGenerator` to the end, then codes.
struct Reference {
    frames: usize,
    codes: Vec<u32>,
    /// One whole-utterance decode.
    whole: Vec<f32>,
}

fn reference(m: &Arc<Qwen3Tts>, req: &Request) -> Reference {
    let mut g = m.start(req).unwrap();
    let codes = g.run_to_end();
    let frames = g.frames();
    Reference {
        frames,
        whole: m.code2wav.decode(&codes, frames).unwrap(),
        codes,
    }
}

/// Streamed audio against the reference: bit-identical to the reference
/// codes decoded with the same chunk boundaries (so the generated codes are
/// identical), and within the codec's documented streaming tolerance
/// (`STREAM_TOL` = 1e-5 in models/src/codec/tests.rs) of one whole decode.
fn assert_matches(m: &Qwen3Tts, c: &Collected, want: &Reference, what: &str) {
    let q = m.config.talker.num_code_groups;
    let mut state = m.code2wav.new_state();
    let mut same_chunks = Vec::new();
    let mut at = 0;
    for ch in &c.chunks {
        m.code2wav
            .decode_step(
                &mut state,
                &want.codes[at * q..(at + ch.frames) * q],
                ch.frames,
                &mut same_chunks,
            )
            .unwrap();
        at += ch.frames;
    }
    assert_eq!(at, want.frames, "{what}: frames");
    let codes: Vec<u32> = c
        .chunks
        .iter()
        .flat_map(|ch| ch.codes.iter().copied())
        .collect();
    assert_eq!(codes, want.codes, "{what}: codes");
    let got = c.audio();
    assert!(
        got == same_chunks,
        "{what}: not bit-identical to the reference codes decoded in the same chunks"
    );
    assert_close(&got, &want.whole, 1e-5, what);
}

fn assert_close(got: &[f32], want: &[f32], tol: f32, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: sample count");
    let worst = got
        .iter()
        .zip(want)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(worst <= tol, "{what}: max |diff| {worst:e} > {tol:e}");
}

/// Runs `f` on a helper thread; fails the test instead of hanging.
fn within<T: Send + 'static>(secs: u64, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(std::panic::catch_unwind(AssertUnwindSafe(f)));
    });
    match rx.recv_timeout(Duration::from_secs(secs)) {
        Ok(Ok(v)) => v,
        Ok(Err(p)) => std::panic::resume_unwind(p),
        Err(_) => panic!("test did not finish within {secs} s"),
    }
}

struct Collected {
    chunks: Vec<AudioChunk>,
    terminal: Event,
}

impl Collected {
    fn audio(&self) -> Vec<f32> {
        self.chunks
            .iter()
            .flat_map(|c| c.samples.iter().copied())
            .collect()
    }
    fn metrics(&self) -> &RequestMetrics {
        match &self.terminal {
            Event::Done { metrics, .. }
            | Event::Cancelled { metrics, .. }
            | Event::Error { metrics, .. } => metrics,
            _ => unreachable!(),
        }
    }
    fn done(&self) -> &RequestMetrics {
        match &self.terminal {
            Event::Done { metrics, .. } => metrics,
            other => panic!("expected Done, got {other:?}"),
        }
    }
    fn error_kind(&self) -> ErrorKind {
        match &self.terminal {
            Event::Error { kind, .. } => *kind,
            other => panic!("expected Error, got {other:?}"),
        }
    }
}

/// Reads a stream to its terminal event, checking the sequence invariants:
/// Started first, seq contiguous from 0, frames contiguous, `terminal` only
/// on the last chunk, nothing after the terminal event.
fn collect(s: &mut Stream, ack: bool) -> Collected {
    let mut chunks: Vec<AudioChunk> = Vec::new();
    let first = s.next_blocking().expect("an event");
    assert!(
        matches!(first, Event::Started { .. }),
        "first event: {first:?}"
    );
    loop {
        let e = s.next_blocking().expect("a terminal event before the end");
        match e {
            Event::Audio(c) => {
                assert_eq!(c.seq, chunks.len() as u64, "seq contiguous");
                let next_frame = chunks.last().map_or(0, |p| p.first_frame + p.frames as u64);
                assert_eq!(c.first_frame, next_frame, "frames contiguous");
                assert!(
                    chunks.last().is_none_or(|p| !p.terminal),
                    "audio after the terminal chunk"
                );
                assert_eq!(c.request, s.request());
                if ack {
                    s.ack(c.seq);
                }
                chunks.push(c);
            }
            Event::Started { .. } => panic!("Started twice"),
            terminal => {
                assert!(
                    s.next_blocking().is_none(),
                    "events after the terminal event"
                );
                return Collected { chunks, terminal };
            }
        }
    }
}

fn assert_idle(engine: &Engine) {
    // Stage state and reservations are returned asynchronously after the
    // terminal event; wait for them.
    for _ in 0..2000 {
        let s = engine.stats();
        if s.held_states == [0, 0, 0]
            && s.reserved_bytes == 0
            && s.active_requests == 0
            && s.awaiting_first_packet == 0
        {
            return;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    panic!("engine not idle: {:?}", engine.stats());
}

fn config() -> EngineConfig {
    EngineConfig {
        chunks: ChunkSchedule::new(vec![1, 4, 8]).unwrap(),
        ..EngineConfig::default()
    }
}

#[test]
fn streamed_audio_equals_offline_on_both_fixtures() {
    within(120, || {
        for (fx, frames) in [("tiny-a", 23), ("tiny-b", 17)] {
            let m = model(fx);
            let engine = Engine::start(m.clone(), config()).unwrap();
            let session = engine.open_session();
            for (greedy, seed) in [(true, 0), (false, 7)] {
                let req = request(
                    &m,
                    "Streaming equals offline, chunk by chunk.",
                    frames,
                    greedy,
                    seed,
                );
                let want = reference(&m, &req);
                let ref_frames = want.frames;
                let mut s = session.synthesize_blocking(req).unwrap();
                let c = collect(&mut s, false);
                assert_matches(&m, &c, &want, &format!("{fx} greedy={greedy}"));
                let mx = c.done();
                assert_eq!(mx.frames, Some(ref_frames as u64));
                assert_eq!(mx.complete, Some(true));
                assert!(mx.finite);
                assert_eq!(
                    mx.samples,
                    (ref_frames * m.code2wav.samples_per_frame()) as u64
                );
                // Schedule 1, 4, 8, 8, ...: the first chunk is one frame.
                assert_eq!(c.chunks[0].frames, 1);
                assert!(c.chunks.last().unwrap().terminal);
                for f in [
                    mx.ttfp_ms,
                    mx.rtf,
                    mx.required_prebuffer_ms,
                    mx.ttft_ms,
                    mx.tpot_ms,
                    mx.talker_ms,
                    mx.handoff_ms,
                ] {
                    assert!(f.is_some_and(|v| v.is_finite() && v >= 0.0), "{mx:?}");
                }
                assert!(mx.stream_rtf.is_some());
            }
            assert_idle(&engine);
            let st = engine.stats();
            assert_eq!(st.generations, [0, 0, 0]);
            assert_eq!(st.stale_generation_dropped, 0);
            engine.shutdown();
        }
    });
}

/// An idle engine sleeps: the router's housekeeping tick runs only while a
/// request is held (or a stage is in a step), so a server with nobody
/// speaking does not wake every few milliseconds. It starts again for the
/// next request, which is served as the first was.
#[test]
fn an_idle_engine_stops_its_housekeeping_tick_and_restarts_it() {
    within(120, || {
        let m = model("tiny-a");
        let engine = Engine::start(m.clone(), config()).unwrap();
        let session = engine.open_session();
        let quiet = |engine: &Engine| {
            // Idle within a few ticks of the last request; then no tick.
            let mut last = engine.stats().router_ticks;
            for _ in 0..200 {
                std::thread::sleep(Duration::from_millis(20));
                let now = engine.stats().router_ticks;
                if now == last {
                    break;
                }
                last = now;
            }
            std::thread::sleep(Duration::from_millis(300));
            assert_eq!(
                engine.stats().router_ticks,
                last,
                "the router ticked while the engine was idle"
            );
            last
        };
        let before = quiet(&engine);
        for round in 0..2 {
            let req = request(&m, "Wake up, then sleep again.", 9, true, 0);
            let want = reference(&m, &req);
            let mut s = session.synthesize_blocking(req).unwrap();
            let c = collect(&mut s, false);
            c.done();
            assert_matches(&m, &c, &want, &format!("round {round}"));
            assert_idle(&engine);
            let after = quiet(&engine);
            assert!(after > before, "the request was served without a tick");
        }
        engine.shutdown();
    });
}

#[test]
fn concurrent_sessions_each_get_their_own_audio() {
    within(120, || {
        let m = model("tiny-a");
        let engine = Engine::start(m.clone(), config()).unwrap();
        let texts = [
            "One voice.",
            "A second, somewhat longer sentence.",
            "Third!",
        ];
        let mut handles = Vec::new();
        for (i, &t) in texts.iter().enumerate() {
            let req = request(&m, t, 9 + 4 * i, i != 1, i as u64);
            let want = reference(&m, &req);
            let (session, m) = (engine.open_session(), m.clone());
            handles.push(std::thread::spawn(move || {
                let mut s = session.synthesize_blocking(req).unwrap();
                let c = collect(&mut s, false);
                c.done();
                assert_matches(&m, &c, &want, t);
            }));
        }
        for h in handles {
            h.join().unwrap();
        }
        assert_idle(&engine);
    });
}

/// A session whose listener declares its own prebuffer gets its stream's
/// continuity counted at it (where the engine's is the default), and the
/// same audio as offline; another session keeps the engine's.
#[test]
fn a_declared_prebuffer_is_what_the_streams_continuity_is_counted_at() {
    within(120, || {
        let m = model("tiny-a");
        let engine = Engine::start(m.clone(), config()).unwrap();
        let plain = engine.open_session();
        let declared = plain.with_prebuffer(Duration::from_millis(1500));
        assert_eq!(plain.prebuffer(), Duration::from_millis(200));
        assert_eq!(declared.id(), plain.id(), "the same session");
        let huge = plain.with_prebuffer(Duration::from_secs(1 << 40));
        assert_eq!(huge.prebuffer(), Duration::from_secs(3600), "capped");
        let req = request(&m, "Buffered by the listener.", 11, true, 0);
        let want = reference(&m, &req);
        for (session, ms) in [(&declared, 1500.0), (&plain, 200.0)] {
            let mut s = session.synthesize_blocking(req.clone()).unwrap();
            let c = collect(&mut s, false);
            assert_matches(&m, &c, &want, "declared prebuffer");
            let mx = c.done();
            assert_eq!(mx.prebuffer_ms, ms);
            assert!(mx.continuity_ok_at_prebuffer.is_some(), "{mx:?}");
        }
        assert_idle(&engine);
    });
}

/// Every explicit team hold (`EngineConfig::team_hold`, the values of
/// `TTS_RT_TEAM_HOLD`) gives every session exactly its offline audio: how a
/// step takes the team moves regions between threads, never their bits.
#[test]
fn every_team_hold_gives_each_session_its_own_audio() {
    within(180, || {
        let m = model("tiny-a");
        for hold in TeamHold::ALL {
            let cfg = EngineConfig {
                team_hold: Some(hold),
                ..config()
            };
            let engine = Engine::start(m.clone(), cfg).unwrap();
            run_concurrently(&engine, &m, mixed_requests(&m, 3, &[13, 21, 9]));
            assert_idle(&engine);
        }
    });
}

/// With code2wav lending a core (`lend_core`), every session still gets
/// exactly its offline audio: lending moves regions between threads, never
/// their bits.
#[test]
fn sessions_with_a_lent_core_get_their_own_audio() {
    within(180, || {
        for fx in ["tiny-a", "tiny-b"] {
            let m = model(fx);
            let cfg = EngineConfig {
                lend_core: true,
                ..config()
            };
            let engine = Engine::start(m.clone(), cfg).unwrap();
            run_concurrently(&engine, &m, mixed_requests(&m, 3, &[13, 21, 9]));
            assert_idle(&engine);
        }
    });
}

/// Lending where measured cheaper (`lend_measured`) switches placements
/// between steps as the capacity's windows close: every session still gets
/// exactly its offline audio.
#[test]
fn sessions_with_a_core_lent_by_measurement_get_their_own_audio() {
    within(180, || {
        let m = model("tiny-a");
        let cfg = EngineConfig {
            lend_measured: true,
            ..config()
        };
        let engine = Engine::start(m.clone(), cfg).unwrap();
        run_concurrently(&engine, &m, mixed_requests(&m, 3, &[40, 48, 36]));
        assert_idle(&engine);
        let stats = engine.stats();
        assert!(stats.placement_steps.iter().sum::<u64>() > 0, "{stats:?}");
    });
}

#[test]
fn cancel_is_acknowledged_and_the_next_request_is_clean() {
    within(120, || {
        let m = model("tiny-a");
        let engine = Engine::start(m.clone(), config()).unwrap();
        let session = engine.open_session();
        let mut s = session
            .synthesize_blocking(request(&m, "This one is interrupted.", 400, true, 0))
            .unwrap();
        assert!(matches!(s.next_blocking(), Some(Event::Started { .. })));
        // Wait for real audio, then barge in.
        loop {
            if let Some(Event::Audio(_)) = s.next_blocking() {
                break;
            }
        }
        let ack = s.cancel().wait().unwrap();
        assert!(ack.was_active);
        assert_eq!(ack.late_audio_samples, 0);
        // Every stage dropped the request before the ack.
        assert_eq!(engine.stats().held_states, [0, 0, 0]);
        // The stream ends with Cancelled; anything before it was sent before the ack.
        let mut terminal = None;
        while let Some(e) = s.next_blocking() {
            assert!(terminal.is_none(), "event after the terminal event: {e:?}");
            if e.is_terminal() {
                terminal = Some(e);
            }
        }
        match terminal {
            Some(Event::Cancelled { metrics, .. }) => {
                assert_eq!(metrics.late_audio_samples, Some(0));
                assert!(metrics.cancel_ack_ms.is_some());
                assert_eq!(metrics.complete, None);
            }
            other => panic!("expected Cancelled, got {other:?}"),
        }
        // Cancelling again is a no-op.
        assert!(!s.cancel().wait().unwrap().was_active);
        // Same session, next request: complete and identical to offline.
        let req = request(&m, "And this one finishes.", 12, true, 0);
        let want = reference(&m, &req);
        let mut s2 = session.synthesize_blocking(req).unwrap();
        let c = collect(&mut s2, false);
        assert_eq!(c.done().complete, Some(true));
        assert_matches(&m, &c, &want, "after cancel");
        assert_idle(&engine);
        engine.shutdown();
    });
}

#[test]
fn a_slow_consumer_pauses_only_its_own_request() {
    within(180, || {
        let m = model("tiny-a");
        // 0.4 s of unacknowledged audio pauses a request (5 frames at 80 ms).
        let cfg = EngineConfig {
            explicit_acks: true,
            soft_unacked_audio_s: 0.4,
            hard_unacked_audio_s: 10.0,
            stream_capacity: 4,
            ..config()
        };
        let engine = Engine::start(m.clone(), cfg).unwrap();
        let slow_req = request(&m, "I am read slowly.", 40, true, 0);
        let fast_req = request(&m, "I am read at once.", 30, true, 1);
        let want_slow = reference(&m, &slow_req);
        let want_fast = reference(&m, &fast_req);
        let mut slow = engine.open_session().synthesize_blocking(slow_req).unwrap();
        let mut fast = engine.open_session().synthesize_blocking(fast_req).unwrap();
        // The fast consumer finishes while the slow one has read nothing.
        let c = collect(&mut fast, true);
        assert_eq!(c.done().complete, Some(true));
        assert_matches(&m, &c, &want_fast, "fast consumer");
        // The slow request is paused near its bound, not running ahead.
        std::thread::sleep(Duration::from_millis(100));
        let spf = m.code2wav.samples_per_frame() as u64;
        let bound = (0.4 * m.code2wav.sample_rate() as f64) as u64 + 8 * spf + 2 * spf;
        let held = slow.unacked_samples();
        assert!(
            held > 0 && held <= bound,
            "unacked {held} samples, bound {bound}"
        );
        assert!(held < 40 * spf, "the slow request was not paused");
        // Reading and acknowledging resumes it; the audio is unchanged.
        let c = collect(&mut slow, true);
        assert_eq!(c.done().complete, Some(true));
        assert_matches(&m, &c, &want_slow, "slow consumer");
        assert_idle(&engine);
        engine.shutdown();
    });
}

#[test]
fn a_consumer_that_never_acknowledges_is_failed_past_the_limit() {
    within(120, || {
        let m = model("tiny-a");
        let cfg = EngineConfig {
            explicit_acks: true,
            soft_unacked_audio_s: 0.3,
            hard_unacked_audio_s: 10.0,
            max_pause: Duration::from_millis(150),
            ..config()
        };
        let engine = Engine::start(m.clone(), cfg).unwrap();
        let mut s = engine
            .open_session()
            .synthesize_blocking(request(&m, "Nobody listens.", 200, true, 0))
            .unwrap();
        // Read events without acknowledging: the request must fail explicitly.
        let mut kind = None;
        while let Some(e) = s.next_blocking() {
            if let Event::Error { kind: k, error, .. } = &e {
                assert!(error.to_string().contains("consumer too slow"), "{error}");
                kind = Some(*k);
            }
        }
        assert_eq!(kind, Some(ErrorKind::SlowConsumer));
        assert_idle(&engine);
        engine.shutdown();
    });
}

#[test]
fn dropping_a_stream_stops_its_work() {
    within(120, || {
        let m = model("tiny-a");
        let engine = Engine::start(m.clone(), config()).unwrap();
        let session = engine.open_session();
        let mut s = session
            .synthesize_blocking(request(&m, "Abandoned midway.", 300, true, 0))
            .unwrap();
        while !matches!(s.next_blocking(), Some(Event::Audio(_))) {}
        drop(s);
        assert_idle(&engine);
        // The session is free again.
        let mut s = session
            .synthesize_blocking(request(&m, "Next.", 5, true, 0))
            .unwrap();
        collect(&mut s, false).done();
        engine.shutdown();
    });
}

fn run_fault(stage: StageKind, action: FaultAction) {
    run_fault_placed(stage, action, None)
}

fn run_fault_placed(stage: StageKind, action: FaultAction, stage_threads: Option<StageThreads>) {
    let m = model("tiny-a");
    let cfg = EngineConfig {
        stage_threads,
        // A panic's hook (backtrace printing) can take longer than a tight
        // deadline; only the stall runs need the watchdog to fire. 1 s is
        // ~1000 tiny-fixture steps: no spurious retirement on a busy machine.
        stage_deadline: Duration::from_millis(if action != FaultAction::Panic {
            1_000
        } else {
            20_000
        }),
        fault: Some(Fault {
            stage,
            after_steps: 3,
            min_inputs: 1,
            action,
        }),
        ..config()
    };
    let engine = Engine::start(m.clone(), cfg).unwrap();
    let session = engine.open_session();
    let mut s = session
        .synthesize_blocking(request(&m, "This request meets a fault.", 30, true, 0))
        .unwrap();
    let c = collect(&mut s, false);
    let want = match action {
        FaultAction::Panic => ErrorKind::StageFailed,
        FaultAction::Stall | FaultAction::StallInRegion => ErrorKind::StageStalled,
        FaultAction::Delay(_) | FaultAction::SlowEvery(_) => unreachable!("a delay is not a fault"),
    };
    assert_eq!(c.error_kind(), want, "{stage} {action:?}: {:?}", c.terminal);
    if let Event::Error { error, .. } = &c.terminal {
        assert!(error.to_string().contains(stage.name()), "{error}");
    }
    assert_eq!(c.metrics().complete, None);
    assert_idle(&engine);
    let st = engine.stats();
    assert_eq!(st.generation(stage), 1, "{stage}: {st:?}");
    assert_eq!(st.restarts[stage.index()], 1);
    for other in StageKind::ALL.into_iter().filter(|k| *k != stage) {
        assert_eq!(st.generation(other), 0);
    }
    // The next request (same session) succeeds on the new generation.
    let req = request(&m, "And the next one is fine.", 14, true, 0);
    let want_audio = reference(&m, &req);
    let t = Instant::now();
    let mut s = session.synthesize_blocking(req).unwrap();
    let c = collect(&mut s, false);
    assert_eq!(c.done().complete, Some(true));
    assert_matches(&m, &c, &want_audio, "after the fault");
    // A stage wedged inside a kernel region still holds the threads it was
    // given; the others must not queue behind it (fresh kernel team).
    assert!(
        t.elapsed() < tts_actors::config::WEDGE_AFTER_RETIRE / 2,
        "{stage} {action:?}: the next request took {:?}",
        t.elapsed()
    );
    if stage == StageKind::Code2Wav {
        assert!(c.chunks.iter().all(|ch| ch.generation == 1));
    }
    assert_idle(&engine);
    engine.shutdown();
}

#[test]
fn a_panic_in_any_stage_fails_the_request_and_restarts_the_stage() {
    within(180, || {
        for stage in StageKind::ALL {
            run_fault(stage, FaultAction::Panic);
        }
    });
}

#[test]
fn a_stalled_stage_is_retired_by_the_watchdog() {
    within(180, || {
        for stage in StageKind::ALL {
            run_fault(stage, FaultAction::Stall);
        }
    });
}

#[test]
fn a_stage_wedged_inside_a_kernel_region_is_retired_with_its_team() {
    within(180, || {
        for stage in StageKind::ALL {
            run_fault(stage, FaultAction::StallInRegion);
        }
    });
}

#[test]
fn admission_refuses_past_the_budget_and_the_ledger_returns_to_zero() {
    within(120, || {
        let m = model("tiny-a");
        let req = request(&m, "Admission control.", 20, true, 0);
        let probe = Engine::start(m.clone(), config()).unwrap();
        let cost = probe.request_cost(&req).unwrap();
        probe.shutdown();
        // Room for one request, not two.
        let engine = Engine::start(
            m.clone(),
            EngineConfig {
                memory_budget_bytes: cost + cost / 2,
                ..config()
            },
        )
        .unwrap();
        let (a, b) = (engine.open_session(), engine.open_session());
        let mut first = a.synthesize_blocking(req.clone()).unwrap();
        assert_eq!(engine.stats().reserved_bytes, cost);
        match b.synthesize_blocking(req.clone()) {
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::AtCapacity);
                assert!(e.to_string().contains("at capacity"), "{e}");
            }
            Ok(_) => panic!("admitted past the budget"),
        }
        // A busy session is refused too (one request at a time).
        assert!(a.synthesize_blocking(req.clone()).is_err());
        collect(&mut first, false).done();
        assert_idle(&engine);
        // Capacity is back.
        let mut second = b.synthesize_blocking(req.clone()).unwrap();
        collect(&mut second, false).done();
        assert_idle(&engine);
        // Shutdown with a request in flight returns its reservation too.
        let mut third = a
            .synthesize_blocking(request(&m, "Cut short by shutdown.", 500, true, 0))
            .unwrap();
        assert!(matches!(third.next_blocking(), Some(Event::Started { .. })));
        assert!(engine.stats().reserved_bytes > 0);
        let last = engine.shutdown();
        assert_eq!(
            (last.reserved_bytes, last.active_requests),
            (0, 0),
            "{last:?}"
        );
        let mut saw_terminal = false;
        while let Some(e) = third.next_blocking() {
            if let Event::Error { kind, .. } = e {
                assert_eq!(kind, ErrorKind::ShuttingDown);
                saw_terminal = true;
            }
        }
        assert!(saw_terminal);
    });
}

/// An engine on a machine that keeps one stream continuous and not two
/// (admission by real-time capacity at a 0.3 target, at most `max`
/// requests): every talker step is held 30 ms, so a frame needs about that
/// or more, a share of ~0.375 of the cores at 12.5 frames/s, above the
/// target whatever the batch. Nothing is measured until it calibrates.
fn one_stream_host(m: &Arc<Qwen3Tts>, max: usize) -> Engine {
    let engine = Engine::start(
        m.clone(),
        EngineConfig {
            max_active_requests: max,
            realtime_load: Some(0.3),
            fault: Some(Fault {
                stage: StageKind::Talker,
                after_steps: 0,
                min_inputs: 1,
                action: FaultAction::SlowEvery(Duration::from_millis(30)),
            }),
            ..config()
        },
    )
    .unwrap();
    assert_eq!(
        engine.stats().capacity_streams,
        None,
        "nothing measured yet"
    );
    engine
}

/// A stream past the measured capacity is refused at once, and admitted
/// once the stream ahead ended.
#[test]
fn a_stream_past_the_measured_real_time_capacity_is_refused_at_once() {
    within(120, || {
        let m = model("tiny-a");
        let engine = one_stream_host(&m, 2);
        assert_eq!(engine.calibrate(200).unwrap(), Some(1));
        let st = engine.stats();
        // About 0.375 or more; a window's edges cut steps, so not exactly.
        assert!(st.one_stream_load.unwrap() > 0.3, "{st:?}");
        assert_idle(&engine);
        assert_eq!(engine.stats().load, 0.0);
        let (a, b) = (engine.open_session(), engine.open_session());
        let mut first = a
            .synthesize_blocking(request(&m, "One stream fits.", 20, true, 0))
            .unwrap();
        let t = Instant::now();
        match b.synthesize_blocking(request(&m, "A second does not.", 20, true, 0)) {
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::AtCapacity);
                assert!(e.to_string().contains("real-time streams"), "{e}");
            }
            Ok(_) => panic!("admitted past the real-time capacity"),
        }
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "a refusal is an answer, not a wait"
        );
        assert_eq!(engine.stats().load, 1.0);
        collect(&mut first, false).done();
        assert_idle(&engine);
        let mut second = b
            .synthesize_blocking(request(&m, "Now it fits.", 10, true, 0))
            .unwrap();
        collect(&mut second, false).done();
        engine.shutdown();
    });
}

/// A probe that passes holds its place until its submit: when the request
/// then fails to build (an unknown speaker) the place goes back at once, so
/// at a capacity of one stream the next request is admitted, not refused
/// for a request that never started; and streams offered together past
/// the capacity are each refused.
#[test]
fn a_probe_whose_request_fails_to_build_gives_its_place_back() {
    within(120, || {
        let m = model("tiny-a");
        let engine = calibrated_one_stream_host(&m);
        let rt = runtime();
        let bad = || {
            let mut r = request(&m, "Hi", 5, true, 0);
            r.speaker = Some("nobody".into());
            r
        };
        // Both entry points probe first, and give the place back.
        let async_err = rt.block_on(engine.open_session().synthesize(bad()));
        let blocking_err = engine.open_session().synthesize_blocking(bad());
        for e in [async_err.err(), blocking_err.err()] {
            assert_eq!(e.map(|e| e.kind()), Some(ErrorKind::InvalidRequest));
        }
        let mut first = engine
            .open_session()
            .synthesize_blocking(request(&m, "One stream fits.", 20, true, 0))
            .expect("the failed requests' place is free");
        let barrier = std::sync::Barrier::new(3);
        let refusals: Vec<Option<ErrorKind>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..3)
                .map(|_| {
                    let (barrier, req) = (&barrier, request(&m, "Together.", 10, true, 0));
                    let session = engine.open_session();
                    s.spawn(move || {
                        barrier.wait();
                        session.synthesize_blocking(req).err().map(|e| e.kind())
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(refusals, [Some(ErrorKind::AtCapacity); 3]);
        collect(&mut first, false).done();
        assert_idle(&engine);
        engine.shutdown();
    });
}

/// [`one_stream_host`] calibrated (one stream) and idle.
fn calibrated_one_stream_host(m: &Arc<Qwen3Tts>) -> Engine {
    let engine = one_stream_host(m, 4);
    assert_eq!(engine.calibrate(200).unwrap(), Some(1));
    assert_idle(&engine);
    engine
}

/// A runtime for the engine's async entry points.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// The calibration takes the audio it makes as it comes: with explicit
/// acks (as the server runs the engine) a request whose audio nobody
/// acknowledged would pause at 4 s of audio, which a fast model makes
/// before its first window closes, and nothing would be timed.
#[test]
fn the_calibration_is_timed_with_explicit_acks_on_a_fast_model() {
    within(120, || {
        let m = model("tiny-a");
        let engine = Engine::start(
            m.clone(),
            EngineConfig {
                explicit_acks: true,
                realtime_load: Some(0.001),
                ..config()
            },
        )
        .unwrap();
        assert_eq!(engine.calibrate(1000).unwrap(), Some(1));
        assert_eq!(
            engine.stats().measured_streams,
            [1, 2, 4],
            "every round timed"
        );
        assert_idle(&engine);
        engine.shutdown();
    });
}

/// Offline work (a whole file) at real-time capacity waits in line
/// instead of being refused, and starts as soon as the stream ahead of it
/// ends; a realtime request in the same place is refused at once.
#[test]
fn offline_work_at_real_time_capacity_waits_for_a_stream_to_end() {
    within(120, || {
        let m = model("tiny-a");
        let engine = calibrated_one_stream_host(&m);
        let rt = runtime();
        let (a, b, c) = (
            engine.open_session(),
            engine.open_session(),
            engine.open_session(),
        );
        let mut first = a
            .synthesize_blocking(request(&m, "The stream ahead.", 15, true, 0))
            .unwrap();
        // A realtime request is refused at once...
        let refused = c.synthesize_blocking(request(&m, "No room.", 5, true, 0));
        assert_eq!(refused.err().map(|e| e.kind()), Some(ErrorKind::AtCapacity));
        // ...an offline one waits in line while the stream ahead runs, and
        // starts once it is done.
        let mut stream = std::thread::scope(|scope| {
            let waiter = scope.spawn(|| {
                rt.block_on(b.synthesize_offline(request(&m, "Waits its turn.", 5, true, 0)))
            });
            let t = Instant::now();
            while engine.stats().offline_waiting == 0 {
                assert!(!waiter.is_finished(), "not admitted past the capacity");
                assert!(t.elapsed() < Duration::from_secs(30), "never in line");
                std::thread::sleep(Duration::from_millis(2));
            }
            assert_eq!(engine.stats().computing, 1, "the stream ahead still runs");
            collect(&mut first, false).done();
            waiter.join().unwrap().expect("admitted after the wait")
        });
        assert_eq!(engine.stats().offline_waiting, 0);
        collect(&mut stream, false).done();
        assert_idle(&engine);
        engine.shutdown();
    });
}

#[test]
fn invalid_config_and_requests_are_refused_up_front() {
    let m = model("tiny-a");
    let err = Engine::start(
        m.clone(),
        EngineConfig {
            max_active_requests: 0,
            ..config()
        },
    )
    .err()
    .unwrap();
    assert_eq!(err.kind(), ErrorKind::Config);
    assert!(err.to_string().contains("max_active_requests"));
    // A team hold that never lends beside lend_core: neither wins.
    let err = Engine::start(
        m.clone(),
        EngineConfig {
            lend_core: true,
            team_hold: Some(TeamHold::C2w),
            ..config()
        },
    )
    .err()
    .unwrap();
    assert_eq!(err.kind(), ErrorKind::Config);
    let msg = err.to_string();
    assert!(
        msg.contains("team_hold") && msg.contains("lend_core"),
        "{msg}"
    );
    let err = Engine::start(
        m.clone(),
        EngineConfig {
            lend_measured: true,
            team_hold: Some(TeamHold::Off),
            ..config()
        },
    )
    .err()
    .unwrap();
    let msg = err.to_string();
    assert!(
        msg.contains("team_hold") && msg.contains("--lend-core auto"),
        "{msg}"
    );
    let engine = Engine::start(m.clone(), config()).unwrap();
    let mut bad = request(&m, "Hi", 5, true, 0);
    bad.speaker = Some("nobody".into());
    let err = engine
        .open_session()
        .synthesize_blocking(bad)
        .err()
        .unwrap();
    assert_eq!(err.kind(), ErrorKind::InvalidRequest);
    // max_frames = 0 mirrors FrameGenerator: no frames, no audio, Done.
    let mut s = engine
        .open_session()
        .synthesize_blocking(request(&m, "Nothing.", 0, true, 0))
        .unwrap();
    let c = collect(&mut s, false);
    let mx = c.done();
    assert_eq!(
        (mx.frames, mx.samples, mx.complete, mx.ttfp_ms),
        (Some(0), 0, Some(true), None)
    );
    engine.shutdown();
}

// ---- Batching across sessions -------------------------------------------
//
// The talker and the code predictor step every ready request of a round in
// one batched forward. A batched row is computed exactly as alone, so every
// request's codes (and therefore audio) must equal its offline reference
// whatever else shares its steps.

/// Requests of different texts, lengths and decoding modes.
fn mixed_requests(m: &Qwen3Tts, n: usize, frames: &[usize]) -> Vec<Request> {
    const TEXTS: [&str; 4] = [
        "First voice in the batch.",
        "A second, rather longer sentence, so its prompt has more rows.",
        "Third.",
        "The fourth one talks for a while and then stops.",
    ];
    (0..n)
        .map(|i| {
            request(
                m,
                TEXTS[i % TEXTS.len()],
                frames[i % frames.len()],
                i % 2 == 0,
                40 + i as u64,
            )
        })
        .collect()
}

/// Starts `reqs` on their own sessions and threads at once; each thread
/// checks its stream against the offline reference.
fn run_concurrently(engine: &Engine, m: &Arc<Qwen3Tts>, reqs: Vec<Request>) {
    // Every reference first: computed between the starts, they would
    // compete with the engine for the pool and spread the starts out.
    let wants: Vec<_> = reqs.iter().map(|req| reference(m, req)).collect();
    let handles: Vec<_> = reqs
        .into_iter()
        .zip(wants)
        .enumerate()
        .map(|(i, (req, want))| {
            let (session, m) = (engine.open_session(), m.clone());
            std::thread::spawn(move || {
                let mut s = session.synthesize_blocking(req).unwrap();
                let c = collect(&mut s, false);
                c.done();
                assert_matches(&m, &c, &want, &format!("request {i}"));
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}

/// The engine config with the talker's first step held `ms` so the
/// requests started meanwhile queue behind it and are prefilled in one
/// batch (then run in lockstep).
fn held_first_step(ms: u64) -> EngineConfig {
    EngineConfig {
        fault: Some(Fault {
            stage: StageKind::Talker,
            after_steps: 0,
            min_inputs: 1,
            action: FaultAction::Delay(Duration::from_millis(ms)),
        }),
        ..config()
    }
}

#[test]
fn batched_sessions_produce_what_each_produces_alone() {
    within(180, || {
        for fx in ["tiny-a", "tiny-b"] {
            let m = model(fx);
            // Greedy and sampled requests mixed, in lockstep.
            let engine = Engine::start(m.clone(), held_first_step(300)).unwrap();
            run_concurrently(&engine, &m, mixed_requests(&m, 4, &[17, 11, 23, 6]));
            assert_idle(&engine);
            let st = engine.stats();
            assert!(st.max_batch[0] >= 3, "{fx}: talker never batched: {st:?}");
            assert!(
                st.max_batch[1] >= 2,
                "{fx}: predictor never batched: {st:?}"
            );
            // The requests start together, so their chunks fall due in the
            // same steps: code2wav decodes them in one call.
            assert!(st.max_batch[2] >= 2, "{fx}: code2wav never batched: {st:?}");
            assert!(
                st.batched_inputs[2] > st.steps[2],
                "{fx}: code2wav mean batch is 1: {st:?}"
            );
            assert!(
                st.batched_inputs[1] > st.steps[1],
                "{fx}: predictor mean batch is 1: {st:?}"
            );
            assert_eq!(st.generations, [0, 0, 0]);
            engine.shutdown();
        }
    });
}

/// Requests that start together stay together: a stage counts all of a
/// step's outputs in the receiver's `inbound` before sending the first, and
/// the receiver waits for the rest of a batch on its way instead of
/// stepping the first alone. Without that, the first message of three
/// raced ahead of the other two, and the two LMs settled into split
/// steps (a mean batch of ~1.8 for three sessions on the full-size 0.6B).
#[test]
fn requests_started_together_step_together() {
    within(180, || {
        let m = model("tiny-b");
        let cfg = held_first_step(300);
        let engine = Engine::start(m.clone(), cfg).unwrap();
        let reqs = mixed_requests(&m, 3, &[24]);
        let longest = reqs.iter().map(|r| reference(&m, r).frames).max().unwrap() as u64;
        run_concurrently(&engine, &m, reqs);
        assert_idle(&engine);
        let st = engine.stats();
        eprintln!("longest {longest} frames; {st:?}");
        // One predictor step per frame of the longest request (the
        // delayed first talker step can leave one start behind: + 2).
        assert!(
            st.steps[1] <= longest + 2,
            "the predictor split its batches: {} steps for {longest} frames: {st:?}",
            st.steps[1]
        );
        assert!(
            st.steps[0] <= longest + 3,
            "the talker split its batches: {} steps for {longest} frames: {st:?}",
            st.steps[0]
        );
        engine.shutdown();
    });
}

#[test]
fn max_batch_one_steps_requests_alone_with_the_same_codes() {
    within(120, || {
        let m = model("tiny-a");
        let engine = Engine::start(
            m.clone(),
            EngineConfig {
                max_batch: 1,
                ..config()
            },
        )
        .unwrap();
        run_concurrently(&engine, &m, mixed_requests(&m, 3, &[9, 13]));
        assert_idle(&engine);
        let st = engine.stats();
        assert_eq!(st.max_batch, [1, 1, 1], "{st:?}");
        assert_eq!(st.batched_inputs, st.steps);
        engine.shutdown();
        let err = Engine::start(
            m.clone(),
            EngineConfig {
                max_batch: 0,
                ..config()
            },
        )
        .err()
        .unwrap();
        assert!(err.to_string().contains("max_batch"), "{err}");
    });
}

#[test]
fn sessions_join_and_leave_a_running_batch() {
    within(180, || {
        let m = model("tiny-a");
        let engine = Engine::start(m.clone(), config()).unwrap();
        // A long request runs throughout; others join while it streams,
        // some leave early (5 frames, 0 frames), one joins after they left.
        let long = request(&m, "I keep talking while others come and go.", 60, false, 3);
        let want_long = reference(&m, &long);
        let mut s_long = engine.open_session().synthesize_blocking(long).unwrap();
        assert!(matches!(
            s_long.next_blocking(),
            Some(Event::Started { .. })
        ));
        // Wait for the long one's first audio: the others join mid-stream.
        let mut first = match s_long.next_blocking() {
            Some(Event::Audio(c)) => vec![c],
            other => panic!("expected audio, got {other:?}"),
        };
        let joiners = vec![
            request(&m, "Short visit.", 5, true, 0),
            request(&m, "Nothing at all.", 0, true, 0),
            request(&m, "A medium-length visit, sampled.", 19, false, 11),
        ];
        run_concurrently(&engine, &m, joiners);
        // And one more after those left, while the long one still runs.
        run_concurrently(&engine, &m, vec![request(&m, "Late joiner.", 8, false, 5)]);
        let mut rest = collect_rest(&mut s_long);
        first.append(&mut rest.chunks);
        rest.chunks = first;
        rest.done();
        assert_matches(&m, &rest, &want_long, "long request");
        assert_idle(&engine);
        engine.shutdown();
    });
}

/// [`collect`] for a stream whose `Started` (and maybe some audio) was
/// already read.
fn collect_rest(s: &mut Stream) -> Collected {
    let mut chunks: Vec<AudioChunk> = Vec::new();
    loop {
        match s.next_blocking().expect("a terminal event") {
            Event::Audio(c) => chunks.push(c),
            Event::Started { .. } => panic!("Started twice"),
            terminal => {
                assert!(s.next_blocking().is_none());
                return Collected { chunks, terminal };
            }
        }
    }
}

#[test]
fn cancelling_one_request_of_a_batch_leaves_the_others_intact() {
    within(180, || {
        let m = model("tiny-a");
        let cfg = held_first_step(200);
        let engine = Engine::start(m.clone(), cfg).unwrap();
        let keep = mixed_requests(&m, 3, &[40, 33, 45]);
        let wants: Vec<Reference> = keep.iter().map(|r| reference(&m, r)).collect();
        let mut streams: Vec<Stream> = keep
            .into_iter()
            .map(|r| engine.open_session().synthesize_blocking(r).unwrap())
            .collect();
        let mut victim = engine
            .open_session()
            .synthesize_blocking(request(&m, "I am cut off mid-batch.", 300, false, 9))
            .unwrap();
        // Every request has streamed audio (so all share steps), then the
        // fourth is cancelled.
        let mut got: Vec<Vec<AudioChunk>> = vec![Vec::new(); streams.len()];
        for (s, g) in streams.iter_mut().zip(got.iter_mut()) {
            assert!(matches!(s.next_blocking(), Some(Event::Started { .. })));
            match s.next_blocking() {
                Some(Event::Audio(c)) => g.push(c),
                e => panic!("expected audio, got {e:?}"),
            }
        }
        assert!(matches!(
            victim.next_blocking(),
            Some(Event::Started { .. })
        ));
        while !matches!(victim.next_blocking(), Some(Event::Audio(_))) {}
        let ack = victim.cancel().wait().unwrap();
        assert!(ack.was_active);
        assert_eq!(ack.late_audio_samples, 0);
        let mut terminal = None;
        while let Some(e) = victim.next_blocking() {
            assert!(terminal.is_none(), "event after the terminal event: {e:?}");
            if e.is_terminal() {
                terminal = Some(e);
            }
        }
        assert!(
            matches!(terminal, Some(Event::Cancelled { .. })),
            "{terminal:?}"
        );
        for ((s, mut g), want) in streams.iter_mut().zip(got).zip(&wants) {
            let mut rest = collect_rest(s);
            g.append(&mut rest.chunks);
            rest.chunks = g;
            rest.done();
            assert_matches(&m, &rest, want, "a batch-mate of the cancelled request");
        }
        assert_idle(&engine);
        let st = engine.stats();
        assert!(st.max_batch[1] >= 2, "never batched: {st:?}");
        assert_eq!(st.generations, [0, 0, 0]);
        engine.shutdown();
    });
}

/// A panic inside a batched step: the batch shares the failure. Under the
/// engine's contract a panicking stage restarts empty, so every request in
/// flight — batch-mates included — ends with an explicit `StageFailed`
/// error (never a hang or wrong audio); requests submitted afterwards run
/// on the new generation, batched again, and equal their references.
#[test]
fn a_panic_in_a_batched_step_fails_the_batch_and_the_engine_recovers() {
    within(240, || {
        let m = model("tiny-a");
        for stage in StageKind::ALL {
            let cfg = EngineConfig {
                stage_deadline: Duration::from_secs(20),
                fault: Some(Fault {
                    stage,
                    // Past the prefill, on the first step that serves a
                    // batch (code2wav gathers one only when frames of
                    // several requests are waiting at once).
                    after_steps: 4,
                    min_inputs: 2,
                    action: FaultAction::Panic,
                }),
                ..config()
            };
            let engine = Engine::start(m.clone(), cfg).unwrap();
            let mut reqs = mixed_requests(&m, 3, &[200]);
            // No request may end by EOS before the batched step.
            for r in &mut reqs {
                r.options.ignore_eos = true;
            }
            let handles: Vec<_> = reqs
                .into_iter()
                .map(|req| {
                    let session = engine.open_session();
                    std::thread::spawn(move || {
                        let mut s = session.synthesize_blocking(req).unwrap();
                        collect(&mut s, false)
                    })
                })
                .collect();
            for h in handles {
                let c = h.join().unwrap();
                assert_eq!(c.error_kind(), ErrorKind::StageFailed, "{stage}");
                if let Event::Error { error, .. } = &c.terminal {
                    assert!(error.to_string().contains(stage.name()), "{error}");
                }
            }
            assert_idle(&engine);
            let st = engine.stats();
            assert_eq!(st.generation(stage), 1, "{stage}: {st:?}");
            // The failed step was a batch (the fault waits for one).
            assert!(st.max_batch[stage.index()] >= 2, "{stage}: {st:?}");
            // The restarted stage batches again and its output is exact.
            run_concurrently(&engine, &m, mixed_requests(&m, 3, &[12, 7, 15]));
            assert_idle(&engine);
            engine.shutdown();
        }
    });
}

#[test]
fn placed_stage_pools_give_the_same_audio_and_still_catch_panics() {
    within(240, || {
        let placed = Some(StageThreads { lm: 1, vocoder: 1 });
        let m = model("tiny-a");
        let engine = Engine::start(
            m.clone(),
            EngineConfig {
                stage_threads: placed,
                ..config()
            },
        )
        .unwrap();
        // Codes and audio equal the offline reference, batched or not.
        run_concurrently(&engine, &m, mixed_requests(&m, 3, &[9, 13]));
        assert_idle(&engine);
        engine.shutdown();
        // A panic inside a pool's `install` reaches the stage boundary.
        for stage in StageKind::ALL {
            run_fault_placed(stage, FaultAction::Panic, placed);
        }
        let err = Engine::start(
            m.clone(),
            EngineConfig {
                stage_threads: Some(StageThreads { lm: 0, vocoder: 1 }),
                ..config()
            },
        )
        .err()
        .unwrap();
        assert!(err.to_string().contains("stage_threads"), "{err}");
        assert_eq!(
            "2,1".parse::<StageThreads>(),
            Ok(StageThreads { lm: 2, vocoder: 1 })
        );
        for bad in ["", "1", "0,1", "1,x", "1,2,3"] {
            assert!(bad.parse::<StageThreads>().is_err(), "{bad}");
        }
    });
}

/// Slack scheduling (`tts_actors::slack`): a stream far ahead of its
/// listener waits while a newcomer waits for its first audio, and runs to
/// its end all the same; with `slack_order` off nothing is held.
#[test]
fn a_stream_far_ahead_is_held_while_a_newcomer_waits_for_its_first_audio() {
    within(300, || {
        let m = model("tiny-a");
        for slack_order in [true, false] {
            let engine = Engine::start(
                m.clone(),
                EngineConfig {
                    slack_order,
                    ..config()
                },
            )
            .unwrap();
            let sr = m.code2wav.sample_rate() as f64;
            let mut ahead = request(&m, "I run far ahead of anyone listening.", 1000, false, 3);
            ahead.options.ignore_eos = true;
            let want = reference(&m, &ahead);
            let mut s_ahead = engine.open_session().synthesize_blocking(ahead).unwrap();
            // Read (and so acknowledge) the first stream until its listener,
            // playing from its first chunk, has three seconds in hand.
            let mut first_at = None;
            let mut samples = 0usize;
            let mut chunks = Vec::new();
            loop {
                match s_ahead.next_blocking().expect("an event") {
                    Event::Started { .. } => {}
                    Event::Audio(c) => {
                        let t0 = *first_at.get_or_insert_with(Instant::now);
                        samples += c.samples.len();
                        chunks.push(c);
                        if samples as f64 / sr - t0.elapsed().as_secs_f64() >= 3.0 {
                            break;
                        }
                    }
                    other => panic!("the long stream ended early: {other:?}"),
                }
            }
            let mut newcomer = request(&m, "I just arrived.", 20, true, 0);
            newcomer.options.ignore_eos = true;
            let mut s_new = engine.open_session().synthesize_blocking(newcomer).unwrap();
            let got = collect(&mut s_new, false);
            assert_eq!(got.done().frames, Some(20), "the newcomer is whole");
            let mut rest = collect_rest(&mut s_ahead);
            chunks.append(&mut rest.chunks);
            rest.chunks = chunks;
            assert_eq!(
                rest.done().frames,
                Some(1000),
                "the stream held for the newcomer runs to its end"
            );
            // Its frames kept their order through the holds: the audio is
            // the offline decode's.
            for w in rest.chunks.windows(2) {
                assert_eq!(w[1].first_frame, w[0].first_frame + w[0].frames as u64);
            }
            assert_matches(&m, &rest, &want, "the held stream");
            let held: u64 = engine.stats().held_for_slack.iter().sum();
            if slack_order {
                assert!(held > 0, "nothing was held for the newcomer");
            } else {
                assert_eq!(held, 0, "slack_order off holds nothing");
            }
            assert_idle(&engine);
            engine.shutdown();
        }
    });
}
