//! A live request held open with no text costs no CPU: the talker parks it
//! and is woken by the next text, with no polling in between, and the
//! router looks at it only every `idle_tick`. Shown over a minute of
//! waiting by the engine's own counters (no stage wakes or steps; the
//! router's ticks stay at the slow rate) and by the process's CPU time
//! (`/proc/self/stat` utime + stime) against the idle engine's. Then the
//! text comes and the rest of the audio is the whole text's.
//!
//! Alone in a process of its own (`alone!`) so that no other test's work
//! lands in the measured windows.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tts_actors::{ChunkSchedule, Engine, EngineConfig, Event, Stream};
use tts_models::{GenOptions, Qwen3Tts, Request};

use crate::alone::alone;

/// This process's CPU time so far (user + system), from `/proc/self/stat`;
/// `None` where there is no procfs.
fn cpu_time() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which may hold spaces) in parentheses.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line (11, 12 here).
    let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    // The kernel's USER_HZ is 100 on every Linux the project targets.
    Some(Duration::from_millis(ticks * 10))
}

fn codes(s: &mut Stream) -> (Vec<u32>, Event) {
    let mut out = Vec::new();
    loop {
        match s.next_blocking().expect("a terminal event") {
            Event::Started { .. } => {}
            Event::Audio(c) => out.extend(c.codes.iter().copied()),
            t => return (out, t),
        }
    }
}

#[test]
fn a_live_request_held_open_a_minute_without_text_costs_no_cpu_and_resumes() {
    if !alone!(a_live_request_held_open_a_minute_without_text_costs_no_cpu_and_resumes) {
        return;
    }
    let Some(_) = cpu_time() else {
        eprintln!("skipped: no /proc/self/stat on this system");
        return;
    };
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/tiny-a");
    let m = Arc::new(Qwen3Tts::load(&dir).expect("load fixture"));
    let engine = Engine::start(
        m.clone(),
        EngineConfig {
            chunks: ChunkSchedule::new(vec![1, 4, 8]).unwrap(),
            ..EngineConfig::default()
        },
    )
    .unwrap();
    let mut options: GenOptions = m.default_options().greedy();
    options.max_frames = 60;
    let req = Request {
        text: String::new(),
        speaker: Some(m.speakers()[0].clone()),
        language: "english".into(),
        instruct: None,
        voice_clone: None,
        text_streaming: true,
        options,
    };
    let session = engine.open_session();

    // The idle engine: what its own housekeeping costs.
    let window = Duration::from_secs(20);
    std::thread::sleep(Duration::from_secs(1));
    let (c0, t0) = (cpu_time().unwrap(), Instant::now());
    std::thread::sleep(window);
    let idle_rate = (cpu_time().unwrap() - c0).as_secs_f64() / t0.elapsed().as_secs_f64();

    // A live request that has spoken its first words and waits for more.
    let mut live = session.live(req.clone()).unwrap();
    let mut stream = live
        .push_blocking("Hold on")
        .unwrap()
        .expect("the first word starts it");
    // Let it speak what it has and park.
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(engine.stats().active_requests, 1, "held, not finished");
    let before = engine.stats();
    let held = Duration::from_secs(60);
    let (c1, t1) = (cpu_time().unwrap(), Instant::now());
    std::thread::sleep(held);
    let held_cpu = cpu_time().unwrap() - c1;
    let held_rate = held_cpu.as_secs_f64() / t1.elapsed().as_secs_f64();
    let after = engine.stats();
    eprintln!(
        "cpu: idle {:.3} ms/s, held {:.3} ms/s ({:?} over {:?}); wakeups {:?} -> {:?}; router ticks {}",
        idle_rate * 1e3,
        held_rate * 1e3,
        held_cpu,
        held,
        before.wakeups,
        after.wakeups,
        after.router_ticks - before.router_ticks
    );
    // Nothing polls the parked request: no stage woke, none stepped.
    assert_eq!(
        after.wakeups, before.wakeups,
        "a stage woke while the request waited for text"
    );
    assert_eq!(
        after.steps, before.steps,
        "a stage stepped while the request waited"
    );
    // The router looks at the waiting request every `idle_tick` (100 ms),
    // not every `tick` (5 ms): ~600 ticks in the minute, not ~12000.
    let idle_tick = EngineConfig::default().idle_tick();
    let ticks = after.router_ticks - before.router_ticks;
    let most = (held.as_secs_f64() / idle_tick.as_secs_f64() * 1.2) as u64 + 10;
    assert!(
        ticks <= most,
        "the router ticked {ticks} times in {held:?} while the request waited (at most {most})"
    );
    // And the process as a whole. In a debug build, held: 1.7 ms/s with
    // the idle engine at 0 (no tick at all); 12.8 ms/s while the router
    // still ticked every 5 ms for the held request, and +7.3 ms/s more when
    // the talker rechecked it every 5 ms before it was parked. The exact
    // checks are the ones above; this one catches a busy loop anywhere.
    assert!(
        held_rate <= idle_rate + 8e-3,
        "holding the request costs CPU: idle {:.3} ms/s, held {:.3} ms/s",
        idle_rate * 1e3,
        held_rate * 1e3
    );

    // The text comes: the rest of the audio, as the whole text's.
    live.push_blocking(", then go on to the end.").unwrap();
    live.close_blocking().unwrap();
    let (got, end) = codes(&mut stream);
    assert!(matches!(end, Event::Done { .. }), "{end:?}");
    let mut whole = req;
    whole.text = "Hold on, then go on to the end.".into();
    assert_eq!(got, m.start(&whole).unwrap().run_to_end());
    let pauses = live.pauses();
    assert!(
        pauses.iter().any(|p| p.ms >= held.as_secs_f64() * 1e3),
        "the minute's wait is reported: {pauses:?}"
    );
}
