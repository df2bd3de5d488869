//! Batching across sessions: one batched decoder pass over several
//! sequences must give every sequence exactly what it gets alone. The
//! kernels compute each row of a matmul independently, so the comparisons
//! below are bit-exact (`to_bits`), not within a tolerance.
//!
//! Covered on both fixtures (tiny-a: 0.6B-style; tiny-b: 1.7B-style with
//! `small_to_mtp_projection`, 4 code groups), at stored precision and int8:
//! - the LM stack: prefill segments of different lengths mixed with
//!   one-row decode steps, against one `forward` per sequence;
//! - the talker head and the code predictor's frame (teacher-forced, so the
//!   raw logits of every step are compared);
//! - whole requests through `TalkerState::step_batch` /
//!   `PredictorState::predict_batch` with sessions joining and leaving
//!   between steps, greedy and seeded sampling, against `FrameGenerator`.

use std::path::Path;
use std::sync::Arc;

use tts_models::code_predictor::PredictScratch;
use tts_models::lm::BatchScratch;
use tts_models::{GenOptions, LoadOptions, Precision, Qwen3Tts, Request};
use tts_models::{PredictorState, TalkerOutput, TalkerState, TalkerWork};

fn load(name: &str, precision: Precision) -> Arc<Qwen3Tts> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures")
        .join(name);
    Arc::new(Qwen3Tts::load_with(&dir, LoadOptions::uniform(precision)).expect("load fixture"))
}

const TEXTS: [&str; 4] = [
    "Hi.",
    "A somewhat longer sentence, so the prompt has more rows.",
    "Batching across sessions.",
    "The fourth voice speaks a little, then leaves the batch early.",
];

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
        text_streaming: seed % 2 == 1,
        options,
    }
}

fn assert_bits(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    if let Some(i) = (0..got.len()).find(|&i| got[i].to_bits() != want[i].to_bits()) {
        panic!(
            "{what}: element {i} differs: batched {} vs alone {}",
            got[i], want[i]
        );
    }
}

fn fixtures() -> Vec<(&'static str, Precision)> {
    let mut v = Vec::new();
    for name in ["tiny-a", "tiny-b"] {
        for p in Precision::ALL {
            v.push((name, p));
        }
    }
    v
}

/// Talker: three prompts of different lengths prefilled alone, then a
/// batched pass mixing one new prefill with decode rows of the others.
#[test]
fn talker_batch_equals_alone() {
    for (name, precision) in fixtures() {
        let m = load(name, precision);
        let what = format!("{name} {}", precision.name());
        let prompts: Vec<_> = TEXTS
            .iter()
            .enumerate()
            .map(|(i, t)| m.build_prompt(&request(&m, t, 8, true, i as u64)).unwrap())
            .collect();
        let rows: Vec<usize> = prompts.iter().map(|p| p.prefill_rows()).collect();
        assert!(
            rows.windows(2).any(|w| w[0] != w[1]),
            "prompt lengths should differ: {rows:?}"
        );
        let h = m.talker.hidden_size();
        // Alone: prefill each of the first three, then one decode row each;
        // the fourth is only prefilled.
        let mut alone = Vec::new();
        let mut step_rows = Vec::new();
        let mut caches = Vec::new();
        for (i, p) in prompts.iter().enumerate() {
            let mut c = m.talker.new_cache();
            let (hd, lg) = m.talker.forward(&p.prefill, p.prefill_rows(), &mut c);
            if i < 3 {
                let row: Vec<f32> = (0..h).map(|j| ((i * h + j) as f32 * 0.37).sin()).collect();
                let before = c.clone();
                let (hd2, lg2) = m.talker.forward(&row, 1, &mut c);
                alone.push((hd2, lg2));
                step_rows.push(row);
                caches.push(before);
            } else {
                alone.push((hd, lg));
                caches.push(m.talker.new_cache());
            }
        }
        // Batched: sequences 0..3 step one row, sequence 3 prefills.
        let mut x = Vec::new();
        for r in &step_rows {
            x.extend_from_slice(r);
        }
        x.extend_from_slice(&prompts[3].prefill);
        let lens = [1, 1, 1, rows[3]];
        let mut refs: Vec<_> = caches.iter_mut().collect();
        let mut scratch = BatchScratch::default();
        let (hd, lg) = m.talker.forward_batch(&x, &lens, &mut refs, &mut scratch);
        let v = m.talker.vocab_size();
        for (i, (ah, al)) in alone.iter().enumerate() {
            assert_bits(&hd[i * h..(i + 1) * h], ah, &format!("{what}: hidden {i}"));
            assert_bits(&lg[i * v..(i + 1) * v], al, &format!("{what}: logits {i}"));
        }
        // The caches advanced exactly like the unbatched ones.
        for (i, c) in caches.iter().enumerate() {
            let want = if i < 3 { rows[i] + 1 } else { rows[i] };
            assert_eq!(c.len(), want, "{what}: cache {i} positions");
        }
        // The LM stack alone (every row, not just the last): prefills of
        // different lengths in one pass.
        let mut x = Vec::new();
        for p in &prompts {
            x.extend_from_slice(&p.prefill);
        }
        let mut fresh: Vec<_> = prompts.iter().map(|_| m.talker.new_cache()).collect();
        let mut refs: Vec<_> = fresh.iter_mut().collect();
        let all = m
            .talker
            .lm()
            .forward_batch(&x, &rows, &mut refs, &mut scratch)
            .to_vec();
        let mut at = 0;
        for (i, p) in prompts.iter().enumerate() {
            let mut c = m.talker.new_cache();
            let want = m.talker.lm().forward(&p.prefill, rows[i], &mut c);
            assert_bits(
                &all[at * h..(at + rows[i]) * h],
                &want,
                &format!("{what}: lm prefill {i}"),
            );
            at += rows[i];
        }
    }
}

/// Code predictor: one batched frame (teacher-forced codes) against each
/// sequence's frame alone — every step's raw logits.
#[test]
fn code_predictor_batch_equals_alone() {
    for (name, precision) in fixtures() {
        let m = load(name, precision);
        let what = format!("{name} {}", precision.name());
        let (cp, h) = (&m.code_predictor, m.talker.hidden_size());
        let steps = cp.num_predicted();
        let b = 3;
        let hidden: Vec<f32> = (0..b * h).map(|j| (j as f32 * 0.11).cos()).collect();
        let c0 = [3u32, 17, 3];
        let mut c0_emb = vec![0f32; b * h];
        for (i, e) in c0_emb.chunks_exact_mut(h).enumerate() {
            m.talker.add_codec_embedding(c0[i], e);
        }
        let forced = |i: usize, s: usize| ((i * 31 + s * 7) % cp.vocab_size()) as u32;
        let mut alone = Vec::new();
        for i in 0..b {
            let mut logits = Vec::new();
            let mut codes = vec![0u32; steps];
            let mut cache = cp.new_cache();
            cp.predict(
                &hidden[i * h..(i + 1) * h],
                &c0_emb[i * h..(i + 1) * h],
                &mut cache,
                &mut codes,
                |s, l| {
                    logits.extend_from_slice(l);
                    forced(i, s)
                },
            );
            alone.push(logits);
        }
        let mut batched = vec![Vec::new(); b];
        let mut caches: Vec<_> = (0..b).map(|_| cp.new_cache()).collect();
        let mut refs: Vec<_> = caches.iter_mut().collect();
        let mut codes = vec![0u32; b * steps];
        let mut scratch = PredictScratch::default();
        // Twice with the same scratch and caches: reuse must not leak state.
        for round in 0..2 {
            batched.iter_mut().for_each(Vec::clear);
            cp.predict_batch(
                &hidden,
                &c0_emb,
                &mut refs,
                &mut scratch,
                &mut codes,
                |i, s, l| {
                    batched[i].extend_from_slice(l);
                    forced(i, s)
                },
            );
            for i in 0..b {
                assert_bits(
                    &batched[i],
                    &alone[i],
                    &format!("{what}: round {round} sequence {i}"),
                );
                for s in 0..steps {
                    assert_eq!(codes[i * steps + s], forced(i, s));
                }
            }
        }
    }
}

/// One request's progress in the emulated batching scheduler.
struct Live {
    idx: usize,
    talker: TalkerState,
    predictor: PredictorState,
    max_frames: usize,
    pending: Option<TalkerOutput>,
    last_frame: Option<Vec<u32>>,
    codes: Vec<u32>,
    frames: usize,
    started: bool,
}

/// Runs `reqs` the way the runtime's stages batch them: request `i` joins
/// at round `join[i]`; every round runs one batched talker step over every
/// live request that needs one (prefill or feedback), then one batched
/// code-predictor frame over every request holding a codebook-0 token.
/// Requests leave as soon as they end (EOS or `max_frames`), mirroring
/// `FrameGenerator::next_frame`.
fn run_batched(m: &Qwen3Tts, reqs: &[Request], join: &[usize]) -> Vec<Vec<u32>> {
    let eos = m.config.talker.codec.eos;
    let mut out = vec![Vec::new(); reqs.len()];
    let mut live: Vec<Live> = Vec::new();
    let mut tscratch = BatchScratch::default();
    let mut pscratch = PredictScratch::default();
    let mut round = 0;
    let mut max_batch = 0;
    while round <= *join.iter().max().unwrap() || !live.is_empty() {
        for (i, r) in reqs.iter().enumerate() {
            if join[i] == round {
                let (talker, predictor) = m.sessions(r).unwrap();
                live.push(Live {
                    idx: i,
                    talker,
                    predictor,
                    max_frames: r.options.max_frames,
                    pending: None,
                    last_frame: None,
                    codes: Vec::new(),
                    frames: 0,
                    started: false,
                });
            }
        }
        // Talker: prefill joiners, feed back last frames.
        {
            let mut batch: Vec<(&mut TalkerState, TalkerWork<'_>)> = Vec::new();
            let mut who = Vec::new();
            for (k, l) in live.iter_mut().enumerate() {
                if l.max_frames == 0 {
                    continue;
                }
                if !l.started {
                    l.started = true;
                    batch.push((&mut l.talker, TalkerWork::Prefill));
                    who.push(k);
                } else if let Some(f) = l.last_frame.as_deref() {
                    batch.push((&mut l.talker, TalkerWork::Feedback(f)));
                    who.push(k);
                }
            }
            max_batch = max_batch.max(batch.len());
            let outs = TalkerState::step_batch(m, &mut batch, &mut tscratch);
            drop(batch);
            for (k, o) in who.into_iter().zip(outs) {
                live[k].pending = Some(o);
                live[k].last_frame = None;
            }
        }
        // Requests that ended leave here: EOS, or no frames at all.
        live.retain_mut(|l| {
            let ended = l.max_frames == 0 || l.pending.as_ref().is_some_and(|p| p.c0 == eos);
            if ended {
                out[l.idx] = std::mem::take(&mut l.codes);
            }
            !ended
        });
        // Code predictor over every pending token.
        {
            let mut batch: Vec<(&mut PredictorState, &TalkerOutput)> = Vec::new();
            let mut who = Vec::new();
            for (k, l) in live.iter_mut().enumerate() {
                if let Some(p) = l.pending.as_ref() {
                    batch.push((&mut l.predictor, p));
                    who.push(k);
                }
            }
            max_batch = max_batch.max(batch.len());
            let frames = PredictorState::predict_batch(m, &mut batch, &mut pscratch);
            drop(batch);
            for (k, f) in who.into_iter().zip(frames) {
                let l = &mut live[k];
                l.pending = None;
                l.codes.extend_from_slice(&f);
                l.frames += 1;
                l.last_frame = Some(f);
            }
        }
        live.retain_mut(|l| {
            let ended = l.frames >= l.max_frames;
            if ended {
                out[l.idx] = std::mem::take(&mut l.codes);
            }
            !ended
        });
        round += 1;
    }
    assert!(max_batch >= 2, "the scenario never batched");
    out
}

/// Whole requests: joining mid-stream, leaving at different frames (one at
/// 0 frames), greedy and seeded sampling — codes identical to each request
/// generated alone.
#[test]
fn batched_sessions_generate_what_they_generate_alone() {
    for (name, precision) in fixtures() {
        let m = load(name, precision);
        for greedy in [true, false] {
            let frames = [9, 14, 5, 0, 11];
            let join = [0, 0, 2, 3, 6];
            let reqs: Vec<Request> = (0..frames.len())
                .map(|i| {
                    request(
                        &m,
                        TEXTS[i % TEXTS.len()],
                        frames[i],
                        greedy,
                        100 + i as u64,
                    )
                })
                .collect();
            let want: Vec<Vec<u32>> = reqs
                .iter()
                .map(|r| m.start(r).unwrap().run_to_end())
                .collect();
            let got = run_batched(&m, &reqs, &join);
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert_eq!(
                    g,
                    w,
                    "{name} {} greedy={greedy}: request {i} codes",
                    precision.name()
                );
            }
        }
    }
}
