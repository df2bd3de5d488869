//! Batched code2wav (`Code2Wav::decode_step_batch`): several streams stepped
//! in one layer-major call must each get exactly (`to_bits`) what
//! `decode_step` gives them alone, whatever their step sizes and positions,
//! and a bad input must leave every stream untouched.
//!
//! Covered on both fixtures' speech tokenizers (tiny-a, tiny-b), with f32 and
//! bf16 convolutions: streams with different step sizes and frame offsets,
//! one joining mid-way, one leaving early, steps long enough to span
//! several attention query blocks and the whole K/V window; a batch of one;
//! a zero-frame job; a bad code in one job.

use std::path::Path;

use tts_models::codec::{BatchScratch, Code2Wav, DecoderState, StepJob};
use tts_models::Code2WavPrecision;

fn load(fixture: &str, precision: Code2WavPrecision) -> Code2Wav {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/fixtures")
        .join(fixture)
        .join("speech_tokenizer");
    Code2Wav::load_with(&dir, precision).expect("load fixture speech tokenizer")
}

/// Uniform random codes, `[n_frames, Q]` (splitmix64).
fn codes(m: &Code2Wav, n_frames: usize, seed: u64) -> Vec<u32> {
    let mut x = seed;
    (0..n_frames * m.num_quantizers())
        .map(|_| {
            x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            ((z ^ (z >> 31)) % m.codebook_size() as u64) as u32
        })
        .collect()
}

fn assert_bits(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    if let Some(i) = (0..got.len()).find(|&i| got[i].to_bits() != want[i].to_bits()) {
        panic!(
            "{what}: sample {i} differs: batched {} vs alone {}",
            got[i], want[i]
        );
    }
}

/// One stream of the scenario: its codes and, per round, how many frames it
/// steps (0: not in that round's batch; rounds past the end: done).
struct Stream {
    codes: Vec<u32>,
    steps: Vec<usize>,
}

/// Decodes every stream alone, step by step with `decode_step`.
fn alone(m: &Code2Wav, s: &Stream) -> Vec<Vec<f32>> {
    let q = m.num_quantizers();
    let mut st = m.new_state();
    let mut at = 0;
    s.steps
        .iter()
        .map(|&n| {
            let mut out = Vec::new();
            m.decode_step(&mut st, &s.codes[at * q..(at + n) * q], n, &mut out)
                .unwrap();
            at += n;
            out
        })
        .collect()
}

/// Runs the scenario round by round, each round one `decode_step_batch` over
/// the streams that step in it; returns each stream's per-round outputs.
fn batched(m: &Code2Wav, streams: &[Stream]) -> Vec<Vec<Vec<f32>>> {
    let q = m.num_quantizers();
    let mut states: Vec<DecoderState> = streams.iter().map(|_| m.new_state()).collect();
    let mut at = vec![0usize; streams.len()];
    let mut outs: Vec<Vec<Vec<f32>>> = streams.iter().map(|_| Vec::new()).collect();
    let rounds = streams.iter().map(|s| s.steps.len()).max().unwrap_or(0);
    let mut scratch = BatchScratch::default();
    for r in 0..rounds {
        let mut bufs: Vec<Vec<f32>> = streams.iter().map(|_| Vec::new()).collect();
        {
            let mut jobs: Vec<StepJob<'_>> = Vec::new();
            for (((s, st), buf), &a) in streams
                .iter()
                .zip(states.iter_mut())
                .zip(bufs.iter_mut())
                .zip(&at)
            {
                let Some(&n) = s.steps.get(r) else { continue };
                jobs.push(StepJob {
                    state: st,
                    codes: &s.codes[a * q..(a + n) * q],
                    n_frames: n,
                    out: buf,
                });
            }
            m.decode_step_batch(&mut jobs, &mut scratch).unwrap();
        }
        for (i, s) in streams.iter().enumerate() {
            if let Some(&n) = s.steps.get(r) {
                at[i] += n;
                outs[i].push(std::mem::take(&mut bufs[i]));
            }
        }
    }
    for (i, st) in states.iter().enumerate() {
        assert_eq!(st.frames(), at[i], "stream {i}: frames decoded");
    }
    outs
}

fn scenario(m: &Code2Wav) -> Vec<Stream> {
    let stream = |steps: Vec<usize>, seed| Stream {
        codes: codes(m, steps.iter().sum(), seed),
        steps,
    };
    vec![
        // The actor's default schedule: 1, 4, then 8 frames.
        stream(vec![1, 4, 8, 8, 8, 8, 8, 8, 8, 8, 8, 3], 1),
        // The same schedule one round later (a zero-frame step first: in
        // the batch call, left untouched).
        stream(vec![0, 1, 4, 8, 8, 8, 8, 8, 8, 8, 8], 2),
        // Joins mid-way with a long first step (two query blocks), then
        // odd sizes; by the end past the 72-frame attention window.
        stream(vec![0, 0, 0, 70, 1, 5, 2, 13, 1], 3),
        // Leaves early.
        stream(vec![2, 2, 3], 4),
        // Single frames throughout: every step at the shortest shapes.
        stream(vec![1; 12], 5),
    ]
}

fn check_fixture(fixture: &str, precision: Code2WavPrecision) {
    let m = load(fixture, precision);
    let streams = scenario(&m);
    let got = batched(&m, &streams);
    for (i, s) in streams.iter().enumerate() {
        let want = alone(&m, s);
        assert_eq!(got[i].len(), want.len(), "stream {i}: steps");
        for (r, (g, w)) in got[i].iter().zip(&want).enumerate() {
            assert_eq!(
                g.len(),
                s.steps[r] * m.samples_per_frame(),
                "stream {i} round {r}: samples per step"
            );
            assert_bits(g, w, &format!("{fixture} {precision} stream {i} round {r}"));
        }
    }
}

#[test]
fn codec_batch_equals_alone_tiny_a_f32() {
    check_fixture("tiny-a", Code2WavPrecision::F32);
}

#[test]
fn codec_batch_equals_alone_tiny_a_bf16() {
    check_fixture("tiny-a", Code2WavPrecision::Bf16);
}

#[test]
fn codec_batch_equals_alone_tiny_b_f32() {
    check_fixture("tiny-b", Code2WavPrecision::F32);
}

#[test]
fn codec_batch_equals_alone_tiny_b_bf16() {
    check_fixture("tiny-b", Code2WavPrecision::Bf16);
}

#[test]
fn codec_batch_equals_alone_tiny_a_int8() {
    check_fixture("tiny-a", Code2WavPrecision::INT8);
}

#[test]
fn codec_batch_of_one_equals_decode_step() {
    for precision in Code2WavPrecision::ALL {
        let m = load("tiny-a", precision);
        let s = Stream {
            codes: codes(&m, 30, 9),
            steps: vec![1, 4, 8, 17],
        };
        let got = batched(&m, std::slice::from_ref(&s));
        for (r, (g, w)) in got[0].iter().zip(alone(&m, &s)).enumerate() {
            assert_bits(g, &w, &format!("{precision} batch of one, step {r}"));
        }
    }
}

/// A bad code in one job: the error names the job, the frame and the
/// codebook, and no state or output moved, so the other streams continue
/// exactly as if the call had not happened.
#[test]
fn codec_batch_bad_input_names_the_job_and_touches_no_state() {
    let m = load("tiny-b", Code2WavPrecision::F32);
    let q = m.num_quantizers();
    let good_a = codes(&m, 6, 11);
    let good_b = codes(&m, 6, 12);
    let mut bad = codes(&m, 3, 13);
    bad[q + 2] = m.codebook_size() as u32; // frame 1, codebook 2

    let mut scratch = BatchScratch::default();
    let (mut sa, mut sb, mut sc) = (m.new_state(), m.new_state(), m.new_state());
    let (mut oa, mut ob, mut oc) = (Vec::new(), Vec::new(), Vec::new());
    // A first good round so the states hold history.
    m.decode_step_batch(
        &mut [
            StepJob {
                state: &mut sa,
                codes: &good_a[..2 * q],
                n_frames: 2,
                out: &mut oa,
            },
            StepJob {
                state: &mut sb,
                codes: &good_b[..2 * q],
                n_frames: 2,
                out: &mut ob,
            },
        ],
        &mut scratch,
    )
    .unwrap();
    let err = m
        .decode_step_batch(
            &mut [
                StepJob {
                    state: &mut sa,
                    codes: &good_a[2 * q..4 * q],
                    n_frames: 2,
                    out: &mut oa,
                },
                StepJob {
                    state: &mut sc,
                    codes: &bad,
                    n_frames: 3,
                    out: &mut oc,
                },
                StepJob {
                    state: &mut sb,
                    codes: &good_b[2 * q..4 * q],
                    n_frames: 2,
                    out: &mut ob,
                },
            ],
            &mut scratch,
        )
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("job 1") && err.contains("frame 1") && err.contains("codebook 2"),
        "{err}"
    );
    assert_eq!(
        (sa.frames(), sb.frames(), sc.frames()),
        (2, 2, 0),
        "no state advanced"
    );
    let spf = m.samples_per_frame();
    assert_eq!((oa.len(), ob.len(), oc.len()), (2 * spf, 2 * spf, 0));

    // A wrong code count is caught the same way, naming the job.
    let err = m
        .decode_step_batch(
            &mut [StepJob {
                state: &mut sa,
                codes: &good_a[2 * q..4 * q - 1],
                n_frames: 2,
                out: &mut oa,
            }],
            &mut scratch,
        )
        .unwrap_err()
        .to_string();
    assert!(err.contains("job 0") && err.contains("frames"), "{err}");

    // The rest of both good streams, batched, equals each alone.
    m.decode_step_batch(
        &mut [
            StepJob {
                state: &mut sa,
                codes: &good_a[2 * q..],
                n_frames: 4,
                out: &mut oa,
            },
            StepJob {
                state: &mut sb,
                codes: &good_b[2 * q..],
                n_frames: 4,
                out: &mut ob,
            },
        ],
        &mut scratch,
    )
    .unwrap();
    for (good, out, what) in [(&good_a, &oa, "stream a"), (&good_b, &ob, "stream b")] {
        let mut st = m.new_state();
        let mut want = Vec::new();
        m.decode_step(&mut st, &good[..2 * q], 2, &mut want)
            .unwrap();
        m.decode_step(&mut st, &good[2 * q..], 4, &mut want)
            .unwrap();
        assert_bits(out, &want, what);
    }
    // `check_step` reports the same problem for a single input.
    let e = m.check_step(&bad, 3).unwrap_err().to_string();
    assert!(e.contains("frame 1") && e.contains("codebook 2"), "{e}");
}
