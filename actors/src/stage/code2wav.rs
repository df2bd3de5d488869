//! The code2wav stage: every request's streaming decoder state, the chunk
//! schedule, and one batched decode per step. The actor around it is
//! [`super::actor`].

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tts_models::codec::{self, DecoderState, StepJob};
use tts_models::Qwen3Tts;
use tts_models::StopReason;

use super::actor::{StageLogic, StepCx};
use super::pace::Pace;
use super::wiring::Handoff;
use crate::config::ChunkSchedule;
use crate::contract::*;

/// One request's decoder state and pending chunk.
pub struct DecodeReq {
    state: DecoderState,
    pending: Vec<u32>,
    pending_frames: usize,
    /// Index of the first pending frame.
    pending_from: u64,
    next_seq: u64,
    frames: u64,
    times: StageTimes,
    first_frame_at: Option<Instant>,
    last_frame_at: Option<Instant>,
    /// Its listener's deadline against the schedule.
    pace: Pace,
    /// The prebuffer its chunks are paced for (`None`: not paced).
    prebuffer: Option<Duration>,
}

/// The code2wav stage: owns every request's streaming decoder state and
/// cuts the audio into chunks by the [`ChunkSchedule`], a chunk leaving
/// short of its size when waiting for one more frame would bring it to the
/// listener late ([`super::pace`]). A step takes up to
/// `max_batch` frames (distinct requests) and decodes every chunk they make
/// due in **one** [`tts_models::codec::Code2Wav::decode_step_batch`] call
/// (layer-major across the requests; the transformer's and ConvNeXt's
/// weights are read once per step instead of once per request); each
/// request's samples are the bits it would get decoded alone.
pub struct Code2WavStage {
    model: Arc<Qwen3Tts>,
    schedule: ChunkSchedule,
    /// The listener's prebuffer a chunk may leave early for, unless the
    /// request's listener declared its own (`None`: the schedule alone).
    paced: Option<Duration>,
    /// The audio of one frame.
    frame: Duration,
    reqs: HashMap<RequestKey, DecodeReq>,
    max_batch: usize,
    scratch: codec::BatchScratch,
}

/// Most frames the chunks of one code2wav step may add up to, which caps
/// the stage's batch at `BATCH_FRAMES / largest chunk` (4 with the default
/// schedule, whose largest chunk is 8). Without it a step of `max_batch`
/// (16) requests' 8-frame chunks would be 128 frames — several seconds of CPU at f32, all of it
/// one step for the watchdog (`stage_deadline`, 10 s) and one wait for the
/// first request's audio — where one chunk per step was at most 8 frames.
/// Batching saves nothing beyond a few frames per request (the vocoder's
/// convolutions are compute-bound there; docs/benchmarks.md, "code2wav
/// batching"), so the cap costs nothing where batching pays: short chunks.
pub const CODE2WAV_BATCH_FRAMES: usize = 32;

impl Code2WavStage {
    /// `max_batch` is the engine's; the stage takes at most
    /// [`CODE2WAV_BATCH_FRAMES`] / the schedule's largest chunk (at least 1).
    /// `paced`: the listener's prebuffer a chunk may leave early for
    /// ([`super::pace`]); `None` cuts by the schedule alone, and so does a
    /// vocoder whose samples depend on where a chunk ends (f32:
    /// [`tts_models::codec::Code2Wav::chunking_exact`]), so a run's audio
    /// never depends on its timing.
    pub fn new(
        model: Arc<Qwen3Tts>,
        schedule: ChunkSchedule,
        paced: Option<Duration>,
        max_batch: usize,
    ) -> Self {
        let largest = schedule.frames.iter().copied().max().unwrap_or(1).max(1);
        let cap = (CODE2WAV_BATCH_FRAMES / largest).max(1);
        let c2w = &model.code2wav;
        let paced = paced.filter(|_| c2w.chunking_exact());
        let frame =
            Duration::from_secs_f64(c2w.samples_per_frame() as f64 / c2w.sample_rate() as f64);
        Code2WavStage {
            model,
            schedule,
            paced,
            frame,
            reqs: HashMap::new(),
            max_batch: max_batch.clamp(1, cap),
            scratch: codec::BatchScratch::default(),
        }
    }
}

/// One input's part in a code2wav step.
struct DecodeJob {
    key: RequestKey,
    stop: Option<StopReason>,
    /// The times the frame carried from the LM stages.
    times: StageTimes,
    /// The request's pending frames make a chunk this step.
    due: bool,
    /// Its chunk could not be decoded (bad codes): the request fails.
    failed: Option<String>,
    samples: Vec<f32>,
}

impl StageLogic for Code2WavStage {
    const KIND: StageKind = StageKind::Code2Wav;
    const HOLDS_TEAM: bool = true;
    type Input = FrameForDecode;
    type State = DecodeReq;

    fn stamp(i: &FrameForDecode) -> &Stamp {
        &i.stamp
    }

    fn sender(_: &FrameForDecode) -> Option<StageKind> {
        Some(StageKind::CodePredictor)
    }

    fn max_batch(&self) -> usize {
        self.max_batch
    }

    fn process(&mut self, inputs: Vec<FrameForDecode>, cx: &mut StepCx<'_>) -> Vec<FrameForDecode> {
        let mut jobs: Vec<DecodeJob> = inputs
            .into_iter()
            .filter_map(|f| self.admit(f, cx))
            .collect();
        self.decode_due(&mut jobs, cx);
        for job in jobs {
            self.emit(job, cx);
        }
        Vec::new()
    }

    fn states(&self) -> &HashMap<RequestKey, DecodeReq> {
        &self.reqs
    }

    fn states_mut(&mut self) -> &mut HashMap<RequestKey, DecodeReq> {
        &mut self.reqs
    }
}

impl Code2WavStage {
    /// Takes one frame (or end marker) of one request into its pending
    /// chunk; the job says whether the chunk schedule makes it due now.
    fn admit(&mut self, mut f: FrameForDecode, cx: &mut StepCx<'_>) -> Option<DecodeJob> {
        let key = f.stamp.key;
        if f.first {
            let state = match f.decoder_start.take() {
                Some(primed) => *primed,
                None => self.model.code2wav.new_state(),
            };
            self.reqs.insert(
                key,
                DecodeReq {
                    state,
                    pending: Vec::new(),
                    pending_frames: 0,
                    pending_from: 0,
                    next_seq: 0,
                    frames: 0,
                    times: StageTimes::default(),
                    first_frame_at: None,
                    last_frame_at: None,
                    pace: Pace::default(),
                    prebuffer: self
                        .paced
                        .map(|p| cx.shared.slack.prebuffer(key).unwrap_or(p)),
                },
            );
        }
        let Some(r) = self.reqs.get_mut(&key) else {
            cx.shared.stale_request();
            return None;
        };
        r.times.handoff += f.stamp.sent_at.elapsed();
        if let Some(codes) = &f.codes {
            if r.pending_frames == 0 {
                r.pending_from = f.frame_index;
            }
            r.pending.extend_from_slice(codes);
            r.pending_frames += 1;
            r.frames += 1;
            r.first_frame_at.get_or_insert(f.produced_at);
            r.last_frame_at = Some(f.produced_at);
            r.pace.frame(f.produced_at);
        }
        let due = r.pending_frames > 0
            && (f.stop.is_some()
                || r.pending_frames >= self.schedule.size(r.next_seq)
                || r.prebuffer
                    .is_some_and(|p| r.pace.cut(Instant::now(), r.pending_frames, p, self.frame)));
        // A bad chunk fails its own request only: it is checked here, before
        // the batch, so the batched call never sees it.
        let failed = due
            .then(|| {
                self.model
                    .code2wav
                    .check_step(&r.pending, r.pending_frames)
                    .err()
            })
            .flatten()
            .map(|e| e.to_string());
        Some(DecodeJob {
            key,
            stop: f.stop,
            times: f.times,
            due: due && failed.is_none(),
            failed,
            samples: Vec::new(),
        })
    }

    /// Decodes every due chunk of the step in one batched call. Its wall
    /// time is added to each of those requests' `code2wav` time (shared,
    /// like the LM stages' batched steps).
    fn decode_due(&mut self, jobs: &mut [DecodeJob], cx: &mut StepCx<'_>) {
        let at: HashMap<RequestKey, usize> = jobs
            .iter()
            .enumerate()
            .filter(|(_, j)| j.due)
            .map(|(i, j)| (j.key, i))
            .collect();
        if at.is_empty() {
            return;
        }
        // The due requests' states, in job order (a step holds distinct
        // requests, so each key appears once).
        let mut slots: Vec<Option<&mut DecodeReq>> = jobs.iter().map(|_| None).collect();
        for (key, r) in self.reqs.iter_mut() {
            if let Some(&i) = at.get(key) {
                slots[i] = Some(r);
            }
        }
        let mut reqs: Vec<&mut DecodeReq> = Vec::with_capacity(at.len());
        let mut batch: Vec<StepJob<'_>> = Vec::with_capacity(at.len());
        let mut owners: Vec<usize> = Vec::with_capacity(at.len());
        let mut samples: Vec<&mut Vec<f32>> = Vec::with_capacity(at.len());
        for (i, (slot, job)) in slots.into_iter().zip(jobs.iter_mut()).enumerate() {
            if let Some(r) = slot {
                owners.push(i);
                reqs.push(r);
                samples.push(&mut job.samples);
            }
        }
        for (r, out) in reqs.iter_mut().zip(samples) {
            let r = &mut **r;
            batch.push(StepJob {
                state: &mut r.state,
                codes: &r.pending,
                n_frames: r.pending_frames,
                out,
            });
        }
        let (model, scratch) = (&self.model, &mut self.scratch);
        let (res, d) = cx.batch_call(StageKind::Code2Wav, batch.len(), || {
            model.code2wav.decode_step_batch(&mut batch, scratch)
        });
        drop(batch);
        let done = Instant::now();
        for r in reqs {
            r.times.code2wav += d;
            r.pace.chunk(done, r.pending_frames, d);
        }
        if let Err(e) = res {
            // Inputs were checked in `admit`, so this is unexpected; the
            // batch left every state untouched, but fail its requests
            // rather than guess which one was at fault.
            let message = e.to_string();
            for i in owners {
                jobs[i].due = false;
                jobs[i].failed = Some(message.clone());
            }
        }
    }

    /// Hands on one job's outcome: its chunk (or failure), then, at the
    /// request's end, the terminal marker and `Finished`.
    fn emit(&mut self, job: DecodeJob, cx: &mut StepCx<'_>) {
        let key = job.key;
        if let Some(message) = job.failed {
            self.reqs.remove(&key);
            cx.out.push(Handoff::Audio(AudioOut::Failed {
                stamp: Stamp::new(key, cx.generation),
                message,
            }));
            return;
        }
        let last = job.stop.is_some();
        let mut emitted_terminal = false;
        let sample_rate = self.model.code2wav.sample_rate();
        if job.due {
            let r = self.reqs.get_mut(&key).expect("a due request is held");
            // A broken codec (NaN/inf in its weights) must fail the request,
            // not play as noise or (in pcm16) as silence: one pass over the
            // chunk, nothing next to a decode.
            if let Some((index, &value)) =
                job.samples.iter().enumerate().find(|(_, v)| !v.is_finite())
            {
                let seq = r.next_seq;
                self.reqs.remove(&key);
                cx.out.push(Handoff::Audio(AudioOut::NonFinite {
                    stamp: Stamp::new(key, cx.generation),
                    seq,
                    index,
                    value,
                }));
                return;
            }
            cx.out.push(Handoff::Audio(AudioOut::Chunk(AudioChunk {
                request: key,
                seq: r.next_seq,
                first_frame: r.pending_from,
                frames: r.pending_frames,
                codes: std::mem::take(&mut r.pending),
                samples: job.samples,
                sample_rate,
                terminal: last,
                generation: cx.generation,
            })));
            r.next_seq += 1;
            emitted_terminal = last;
            r.pending_frames = 0;
        }
        if let Some(stop) = job.stop {
            let r = self.reqs.remove(&key).expect("state checked in admit");
            if r.pending_frames == 0 && !emitted_terminal {
                // The end came after the last chunk went out (EOS, or no
                // frames at all): an empty chunk carries the terminal flag,
                // so every stream's last chunk is marked.
                cx.out.push(Handoff::Audio(AudioOut::Chunk(AudioChunk {
                    request: key,
                    seq: r.next_seq,
                    first_frame: r.frames,
                    frames: 0,
                    codes: Vec::new(),
                    samples: Vec::new(),
                    sample_rate,
                    terminal: true,
                    generation: cx.generation,
                })));
            }
            let mut times = job.times;
            times.code2wav = r.times.code2wav;
            times.handoff += r.times.handoff;
            cx.out.push(Handoff::Audio(AudioOut::Finished {
                stamp: Stamp::new(key, cx.generation),
                frames: r.frames,
                stop,
                times,
                first_frame_at: r.first_frame_at,
                last_frame_at: r.last_frame_at,
            }));
        }
    }
}

#[cfg(test)]
mod tests {
    //! The code2wav stage's step bookkeeping, driven directly (no actors):
    //! one batched decode per step, per-request failures, terminal chunks.

    use std::path::Path;
    use std::sync::atomic::Ordering;

    use super::*;
    use crate::shared::Shared;

    fn frame(key: RequestKey, index: u64, codes: Option<Vec<u32>>, stop: bool) -> FrameForDecode {
        FrameForDecode {
            decoder_start: None,
            stamp: Stamp::new(key, 0),
            frame_index: index,
            codes,
            first: index == 0,
            stop: stop.then_some(StopReason::MaxFrames),
            produced_at: Instant::now(),
            times: StageTimes::default(),
        }
    }

    fn key(session: u64) -> RequestKey {
        RequestKey { session, epoch: 0 }
    }

    /// A short description of outputs for failure messages.
    fn describe(out: &[AudioOut]) -> String {
        let one = |o: &AudioOut| match o {
            AudioOut::Chunk(AudioChunk {
                request,
                seq,
                frames,
                terminal,
                ..
            }) => format!("Chunk({request} seq {seq}, {frames} frames, terminal {terminal})"),
            AudioOut::Finished { stamp, frames, .. } => {
                format!("Finished({}, {frames} frames)", stamp.key)
            }
            AudioOut::Failed { stamp, message } => format!("Failed({}: {message})", stamp.key),
            AudioOut::NonFinite {
                stamp,
                index,
                value,
                ..
            } => format!("NonFinite({}: {value} at {index})", stamp.key),
        };
        out.iter().map(one).collect::<Vec<_>>().join(", ")
    }

    /// Runs one step; returns what it handed on.
    fn step(
        stage: &mut Code2WavStage,
        shared: &Shared,
        inputs: Vec<FrameForDecode>,
    ) -> Vec<AudioOut> {
        let mut out = Vec::new();
        let mut cx = StepCx {
            out: &mut out,
            generation: 0,
            shared,
            waker: None,
        };
        assert!(stage.process(inputs, &mut cx).is_empty());
        out.into_iter()
            .map(|o| match o {
                Handoff::Audio(a) => a,
                _ => panic!("code2wav only hands audio to the router"),
            })
            .collect()
    }

    #[test]
    fn a_step_decodes_its_due_chunks_in_one_call_and_fails_only_the_bad_request() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/tiny-a");
        let model = Arc::new(Qwen3Tts::load(&dir).expect("load fixture"));
        let c2w = &model.code2wav;
        let q = c2w.num_quantizers();
        let code = |f: u64, g: usize| ((f as usize * 31 + g * 7) % c2w.codebook_size()) as u32;
        let codes = |f: u64| (0..q).map(|g| code(f, g)).collect::<Vec<u32>>();
        let shared = Shared::new(
            #[cfg(feature = "fault-injection")]
            None,
        );
        let schedule = ChunkSchedule::new(vec![1, 2]).unwrap();
        let mut stage = Code2WavStage::new(model.clone(), schedule, None, 4);
        assert_eq!(stage.max_batch(), 4);
        // The frame budget caps the batch: 32 / the largest chunk.
        let cap = |frames: Vec<usize>, engine: usize| {
            let s = ChunkSchedule::new(frames).unwrap();
            Code2WavStage::new(model.clone(), s, None, engine).max_batch()
        };
        assert_eq!(cap(vec![1, 4, 8], 16), 4);
        assert_eq!(cap(vec![1, 4, 8], 3), 3);
        assert_eq!(cap(vec![1, 2], 16), 16);
        assert_eq!(cap(vec![1, 40], 16), 1);
        assert_eq!(cap(vec![8], 1), 1);

        // Step 1: three first frames; the second request's is out of the
        // codebook, the third is also its last.
        let mut bad = codes(0);
        bad[1] = c2w.codebook_size() as u32;
        let out = step(
            &mut stage,
            &shared,
            vec![
                frame(key(1), 0, Some(codes(0)), false),
                frame(key(2), 0, Some(bad), false),
                frame(key(3), 0, Some(codes(0)), true),
            ],
        );
        let h = shared.health(StageKind::Code2Wav);
        assert_eq!(h.steps.load(Ordering::Relaxed), 1, "one decode call");
        assert_eq!(h.batched_inputs.load(Ordering::Relaxed), 2, "two chunks");
        assert_eq!(h.max_batch.load(Ordering::Relaxed), 2);
        let mut alone = c2w.new_state();
        let mut want = Vec::new();
        c2w.decode_step(&mut alone, &codes(0), 1, &mut want)
            .unwrap();
        match &out[..] {
            [AudioOut::Chunk(AudioChunk {
                request: k1,
                seq: 0,
                frames: 1,
                samples: a1,
                terminal: false,
                ..
            }), AudioOut::Failed { stamp: s2, message }, AudioOut::Chunk(AudioChunk {
                request: k3,
                samples: a3,
                terminal: true,
                ..
            }), AudioOut::Finished {
                stamp: s4,
                frames: 1,
                ..
            }] => {
                assert_eq!((*k1, s2.key, *k3, s4.key), (key(1), key(2), key(3), key(3)));
                assert!(
                    message.contains("frame 0, codebook 1"),
                    "the error names the code: {message}"
                );
                assert!(a1 == &want && a3 == &want, "batched == alone");
            }
            other => panic!("unexpected outputs {}", describe(other)),
        }
        let mut held = stage.held();
        held.sort();
        assert_eq!(held, vec![key(1)], "the failed and the finished are gone");

        // Step 2: frame 1 of request 1 (chunk of 2 not due yet); a frame
        // for the failed request is stale.
        let out = step(
            &mut stage,
            &shared,
            vec![
                frame(key(1), 1, Some(codes(1)), false),
                frame(key(2), 1, Some(codes(1)), false),
            ],
        );
        assert!(out.is_empty(), "{}", describe(&out));
        assert_eq!(shared.stale_epoch.load(Ordering::Relaxed), 1);
        // Step 3: frame 2 completes the 2-frame chunk, then an end marker
        // gives an empty terminal chunk and Finished.
        let out = step(
            &mut stage,
            &shared,
            vec![frame(key(1), 2, Some(codes(2)), false)],
        );
        let mut want = Vec::new();
        c2w.decode_step(&mut alone, &[codes(1), codes(2)].concat(), 2, &mut want)
            .unwrap();
        let chunk_ok = matches!(
            &out[..],
            [AudioOut::Chunk(AudioChunk {
                seq: 1,
                first_frame: 1,
                frames: 2,
                samples,
                ..
            })] if samples == &want
        );
        assert!(chunk_ok, "{}", describe(&out));
        let out = step(&mut stage, &shared, vec![frame(key(1), 3, None, true)]);
        assert!(
            matches!(
                &out[..],
                [
                    AudioOut::Chunk(AudioChunk {
                        seq: 2,
                        frames: 0,
                        terminal: true,
                        ..
                    }),
                    AudioOut::Finished { frames: 3, .. }
                ]
            ),
            "{}",
            describe(&out)
        );
        assert!(stage.held().is_empty());
        assert_eq!(h.steps.load(Ordering::Relaxed), 2);
    }

    /// Frames made 79 ms apart (faster than the 80 ms they play) but
    /// reaching the decoder 90 ms apart, so a listener without a prebuffer
    /// is always due: with pacing, every frame leaves as it comes (waiting
    /// for another would reach the listener late), where the schedule
    /// alone waits for an 8-frame chunk; the audio is the same bits either
    /// way. An f32 vocoder, whose last bits depend on where a chunk ends, is
    /// never paced. A listener's declared prebuffer replaces the engine's.
    #[test]
    fn a_paced_chunk_leaves_short_of_the_schedule_with_the_same_audio() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/tiny-a");
        let options = tts_models::LoadOptions {
            code2wav: tts_models::Code2WavPrecision::INT8,
            ..Default::default()
        };
        let fast = Arc::new(Qwen3Tts::load_with(&dir, options).expect("load fixture"));
        let f32 = Arc::new(Qwen3Tts::load(&dir).expect("load fixture"));
        let q = f32.code2wav.num_quantizers();
        let book = f32.code2wav.codebook_size();
        let codes = |f: u64| {
            (0..q)
                .map(|g| ((f as usize * 17 + g * 5) % book) as u32)
                .collect::<Vec<u32>>()
        };
        let shared = Shared::new(
            #[cfg(feature = "fault-injection")]
            None,
        );
        let run_on = |shared: &Shared, model: &Arc<Qwen3Tts>, paced: Option<Duration>| {
            let schedule = ChunkSchedule::new(vec![1, 8]).unwrap();
            let mut stage = Code2WavStage::new(model.clone(), schedule, paced, 1);
            // Stamped 79 ms apart (the intervals are what the pace reads),
            // handed over 90 ms apart (the deadline runs on the clock).
            let base = Instant::now();
            let (mut sizes, mut audio) = (Vec::new(), Vec::new());
            for i in 0..10u64 {
                if i > 0 {
                    std::thread::sleep(Duration::from_millis(90));
                }
                let mut f = frame(key(1), i, Some(codes(i)), i == 9);
                f.produced_at = base + Duration::from_millis(79 * i);
                for o in step(&mut stage, shared, vec![f]) {
                    if let AudioOut::Chunk(c) = o {
                        if c.frames > 0 {
                            sizes.push(c.frames);
                        }
                        audio.extend(c.samples);
                    }
                }
            }
            (sizes, audio)
        };
        let run = |model: &Arc<Qwen3Tts>, paced| run_on(&shared, model, paced);
        let (paced_sizes, paced_audio) = run(&fast, Some(Duration::ZERO));
        let (sizes, audio) = run(&fast, None);
        assert_eq!(sizes, vec![1, 8, 1]);
        assert_eq!(paced_sizes, vec![1; 10]);
        assert_eq!(paced_audio.len(), audio.len());
        assert!(
            paced_audio
                .iter()
                .zip(&audio)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "where a chunk ends never changes the audio"
        );
        assert!(!f32.code2wav.chunking_exact() && fast.code2wav.chunking_exact());
        assert_eq!(
            run(&f32, Some(Duration::ZERO)).0,
            vec![1, 8, 1],
            "f32: never paced"
        );
        // A listener that declared a minute of prebuffer has time to wait:
        // its chunks keep the schedule's sizes, where the engine's zero
        // would send every frame alone.
        let declared = Shared::new(
            #[cfg(feature = "fault-injection")]
            None,
        );
        declared.slack.register(
            key(1),
            crate::slack::Listener {
                gate: Arc::new(crate::flow::FlowGate::new(u64::MAX, 24_000)),
                live: None,
                offline: false,
                prebuffer: Some(Duration::from_secs(60)),
            },
        );
        let (sizes, audio) = run_on(&declared, &fast, Some(Duration::ZERO));
        assert_eq!(sizes, vec![1, 8, 1]);
        assert!(audio
            .iter()
            .map(|a| a.to_bits())
            .eq(paced_audio.iter().map(|a| a.to_bits())));
        // Its own prebuffer never turns pacing on: the engine's switch
        // (`pace_chunks`) and the vocoder's exactness decide that.
        assert_eq!(
            run_on(&declared, &f32, Some(Duration::ZERO)).0,
            vec![1, 8, 1]
        );
    }
}
