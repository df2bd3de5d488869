//! The decoder forward over a block of new frames, given the per-stream state
//! left by earlier blocks. One-shot decoding is this with a fresh state and
//! all frames in one block, so streaming and one-shot share every line.
//!
//! (~700 lines: the whole decoder forward reads top to bottom in one file so
//! the streaming state each stage carries stays beside the code that uses it.)
//!
//! Why carrying a little state is exact: every stage is causal.
//! - Stride-1 convs need `(kernel - 1) * dilation` input columns of left
//!   context; a fresh stream's context is zeros, which is the official
//!   left zero-padding.
//! - A transposed conv with `kernel = m * stride` whose last
//!   `kernel - stride` outputs are trimmed gives output `p` from inputs
//!   `p / stride - m + 1 ..= p / stride`, so the outputs of the new columns are
//!   final once those columns arrive; `m - 1` input columns of history cover
//!   the overlap. (Official kernels: `2s` in the vocoder, `s` in `upsample`.)
//! - SnakeBeta is pointwise with `snake(0) = 0`, so histories store the raw
//!   (pre-activation) input and the activation runs over history + new columns.
//! - Attention is causal with a sliding window `w`: keys at positions
//!   `p - w + 1 ..= p`, so `w - 1` cached K/V rows suffice. RoPE positions are
//!   absolute frame indices, continuing across blocks.
//!
//! Layouts: `[channels, time]` for convolutions, `[time, features]` for the
//! transformer and the ConvNeXt pointwise MLPs (matmul rows).

use super::weights::{CausalConv, CausalTransConv, Linear, Snake, Transformer, Weights};

/// Queries per attention call over a long block: bounds the key range each
/// call scans to `QUERY_BLOCK + window` instead of the whole block, so a
/// whole-utterance decode stays linear in its length.
const QUERY_BLOCK: usize = 64;

/// Per-stage wall time of `step`, collected only in test builds when
/// [`profile::enable`] was called (the timing harness in `tests.rs`).
#[cfg(test)]
pub(crate) mod profile {
    use std::cell::RefCell;
    use std::time::Duration;

    thread_local! {
        static TIMES: RefCell<Option<Vec<(String, Duration)>>> = const { RefCell::new(None) };
    }

    pub(crate) fn enable() {
        TIMES.with(|t| *t.borrow_mut() = Some(Vec::new()));
    }

    pub(crate) fn add(label: String, d: Duration) {
        TIMES.with(|t| {
            if let Some(v) = t.borrow_mut().as_mut() {
                match v.iter_mut().find(|(l, _)| *l == label) {
                    Some(e) => e.1 += d,
                    None => v.push((label, d)),
                }
            }
        })
    }

    pub(crate) fn take() -> Vec<(String, Duration)> {
        TIMES.with(|t| t.borrow_mut().take().unwrap_or_default())
    }
}

/// `prof!(label, expr)`: `expr`, timed under `label` in test builds.
macro_rules! prof {
    ($label:expr, $e:expr) => {{
        #[cfg(test)]
        let t0 = std::time::Instant::now();
        let r = $e;
        #[cfg(test)]
        profile::add($label.to_string(), t0.elapsed());
        r
    }};
}

/// The last `h` raw input columns of one causal stage, `[channels, h]`.
#[derive(Clone, Debug)]
struct History {
    channels: usize,
    h: usize,
    data: Vec<f32>,
}

impl History {
    fn new(channels: usize, h: usize) -> Self {
        History {
            channels,
            h,
            data: vec![0.0; channels * h],
        }
    }

    fn reset(&mut self) {
        self.data.fill(0.0);
    }

    /// Writes `[history | x]` (`[channels, h + n]`) into `out` and keeps its
    /// last `h` columns as the new history.
    fn extend(&mut self, x: &[f32], n: usize, out: &mut Vec<f32>) {
        let (c, h) = (self.channels, self.h);
        let w = h + n;
        debug_assert_eq!(x.len(), c * n);
        out.clear();
        out.reserve(c * w);
        for ch in 0..c {
            out.extend_from_slice(&self.data[ch * h..(ch + 1) * h]);
            out.extend_from_slice(&x[ch * n..(ch + 1) * n]);
        }
        for ch in 0..c {
            self.data[ch * h..(ch + 1) * h].copy_from_slice(&out[ch * w + n..(ch + 1) * w]);
        }
    }

    /// [`Self::extend`] with `act` applied to what `out` receives (the
    /// history keeps the raw columns): one parallel pass
    /// ([`tts_kernels::snake_beta_concat`]), the bits of extending and
    /// then applying `act` to `out`.
    fn extend_snake(&mut self, x: &[f32], n: usize, act: &Snake, out: &mut Vec<f32>) {
        let (c, h) = (self.channels, self.h);
        debug_assert_eq!(x.len(), c * n);
        // Sized, not cleared: the kernel writes every element.
        out.resize(c * (h + n), 0.0);
        tts_kernels::snake_beta_concat(&self.data, h, x, n, &act.alpha, &act.inv_beta, out);
        if h == 0 {
            return;
        }
        // The last h raw columns of [history | x].
        for ch in 0..c {
            let hist = &mut self.data[ch * h..(ch + 1) * h];
            let xr = &x[ch * n..(ch + 1) * n];
            if n >= h {
                hist.copy_from_slice(&xr[n - h..]);
            } else {
                hist.copy_within(n.., 0);
                hist[h - n..].copy_from_slice(xr);
            }
        }
    }
}

/// The K/V rows of one layer that later queries can still see.
#[derive(Clone, Debug, Default)]
struct KvCache {
    k: Vec<f32>,
    v: Vec<f32>,
    rows: usize,
}

/// Reused buffers; sized by the largest block seen, so steady-state steps of
/// a fixed size allocate nothing here.
#[derive(Clone, Debug, Default)]
struct Work {
    cur: Vec<f32>,
    cat: Vec<f32>,
    tmp: Vec<f32>,
    tmp2: Vec<f32>,
    full: Vec<f32>,
    rows: Vec<f32>,
    rows2: Vec<f32>,
    big: Vec<f32>,
    tf: TfWork,
}

/// Transformer scratch, all `[n, features]`.
#[derive(Clone, Debug, Default)]
struct TfWork {
    h: Vec<f32>,
    xn: Vec<f32>,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    att: Vec<f32>,
    proj: Vec<f32>,
    gate: Vec<f32>,
    up: Vec<f32>,
    cos: Vec<f32>,
    sin: Vec<f32>,
}

#[derive(Clone, Debug)]
struct BlockState {
    trans: History,
    units: Vec<History>,
}

/// Everything one stream carries between steps: the next frame's position,
/// each causal stage's input history and each attention layer's window of
/// K/V rows. Independent of the weights, so many streams can share one
/// [`super::Code2Wav`]. A few hundred KB at the official size (the largest
/// part is the 71-row K/V window of 8 layers).
#[derive(Clone, Debug)]
pub struct DecoderState {
    frames: usize,
    pre_conv: History,
    kv: Vec<KvCache>,
    up_trans: Vec<History>,
    up_dwconv: Vec<History>,
    conv_in: History,
    blocks: Vec<BlockState>,
    conv_out: History,
    work: Work,
}

fn conv_history(c: &CausalConv) -> History {
    History::new(c.shape.c_in, c.history())
}

fn trans_history(t: &CausalTransConv) -> History {
    History::new(t.c_in, t.history())
}

impl DecoderState {
    pub(crate) fn new(w: &Weights) -> Self {
        DecoderState {
            frames: 0,
            pre_conv: conv_history(&w.pre_conv),
            kv: (0..w.transformer.layers.len())
                .map(|_| KvCache::default())
                .collect(),
            up_trans: w.upsample.iter().map(|u| trans_history(&u.trans)).collect(),
            up_dwconv: w
                .upsample
                .iter()
                .map(|u| conv_history(&u.convnext.dwconv))
                .collect(),
            conv_in: conv_history(&w.conv_in),
            blocks: w
                .blocks
                .iter()
                .map(|b| BlockState {
                    trans: trans_history(&b.trans),
                    units: b.units.iter().map(|u| conv_history(&u.conv1)).collect(),
                })
                .collect(),
            conv_out: conv_history(&w.conv_out),
            work: Work::default(),
        }
    }

    /// Back to the start of a stream (keeps the buffers' capacity).
    pub fn reset(&mut self) {
        self.frames = 0;
        self.pre_conv.reset();
        for c in &mut self.kv {
            c.k.clear();
            c.v.clear();
            c.rows = 0;
        }
        self.up_trans
            .iter_mut()
            .chain(&mut self.up_dwconv)
            .for_each(History::reset);
        self.conv_in.reset();
        for b in &mut self.blocks {
            b.trans.reset();
            b.units.iter_mut().for_each(History::reset);
        }
        self.conv_out.reset();
    }

    /// Frames decoded since the start (or the last reset).
    pub fn frames(&self) -> usize {
        self.frames
    }
}

/// `dst[c, r] = src[r, c]` for `src = [rows, cols]`.
fn transpose(src: &[f32], rows: usize, cols: usize, dst: &mut Vec<f32>) {
    debug_assert_eq!(src.len(), rows * cols);
    dst.clear();
    dst.resize(rows * cols, 0.0);
    // Tiles keep both sides in cache for the [4T, 1024] ConvNeXt transposes.
    const TILE: usize = 32;
    for r0 in (0..rows).step_by(TILE) {
        for c0 in (0..cols).step_by(TILE) {
            for r in r0..(r0 + TILE).min(rows) {
                for c in c0..(c0 + TILE).min(cols) {
                    dst[c * rows + r] = src[r * cols + c];
                }
            }
        }
    }
}

/// `x[i] += scale[i % d] * y[i]` over rows of `d = scale.len()` features.
fn add_scaled(x: &mut [f32], scale: &[f32], y: &[f32]) {
    for (xr, yr) in x
        .chunks_exact_mut(scale.len())
        .zip(y.chunks_exact(scale.len()))
    {
        for ((a, &s), &b) in xr.iter_mut().zip(scale).zip(yr) {
            *a += s * b;
        }
    }
}

/// One stream's part in a batched step: its state, its validated new codes
/// (`[n, Q]`, `n >= 1`) and the buffer its samples are appended to.
pub(crate) struct Seg<'a> {
    pub(crate) st: &'a mut DecoderState,
    pub(crate) codes: &'a [u32],
    pub(crate) n: usize,
    pub(crate) out: &'a mut Vec<f32>,
}

/// Scratch shared by the streams of a batched step: their rows gathered for
/// one matmul, and its output before it is scattered back.
#[derive(Clone, Debug, Default)]
pub struct BatchScratch {
    x: Vec<f32>,
    y: Vec<f32>,
}

/// Frames per forward pass when one stream decodes many frames at once
/// (a whole utterance, a window of the official chunked decode, a priming
/// clip). The result is the same for any split (every stage is causal; see
/// the module documentation), so the split is chosen for speed: an 8-frame
/// pass keeps each layer's activations in cache (the last vocoder block's
/// are 96 channels x 15360 samples, 5.9 MB a buffer, where a 40-frame pass
/// streamed 29 MB buffers through DRAM once per layer) and still reads the
/// transformer's weights only once per 8 frames. Measured 0.68x the time
/// of one pass over 100 frames (docs/performance.md, "code2wav in bf16").
/// It also bounds the decoder's scratch memory by the pass, not the
/// utterance.
pub(crate) const PASS_FRAMES: usize = 8;

/// Decodes `n` frames of validated `codes` (`[n, Q]`) and appends their
/// `n * samples_per_frame` samples to `out` (see [`run_batch`]).
pub(crate) fn step(
    w: &Weights,
    st: &mut DecoderState,
    codes: &[u32],
    n: usize,
    out: &mut Vec<f32>,
) {
    // One stream: `linear_batch` runs its matmuls in place, so the scratch
    // stays empty.
    run_batch(
        w,
        &mut [Seg { st, codes, n, out }],
        &mut BatchScratch::default(),
    );
}

/// Decodes every stream's new frames in passes of at most [`PASS_FRAMES`]
/// each (one [`step_batch`] per pass over the streams that still have
/// frames), so a stream gets the same bits whether it steps alone or in a
/// batch, whatever the step sizes.
pub(crate) fn run_batch(w: &Weights, segs: &mut [Seg<'_>], bw: &mut BatchScratch) {
    let q: Vec<usize> = segs
        .iter()
        .map(|s| s.codes.len().checked_div(s.n).unwrap_or(0))
        .collect();
    let mut done = vec![0usize; segs.len()];
    loop {
        let mut pass: Vec<Seg<'_>> = segs
            .iter_mut()
            .zip(&mut done)
            .zip(&q)
            .filter(|((s, at), _)| **at < s.n)
            .map(|((s, at), &q)| {
                let k = PASS_FRAMES.min(s.n - *at);
                let seg = Seg {
                    st: &mut *s.st,
                    codes: &s.codes[*at * q..(*at + k) * q],
                    n: k,
                    out: &mut *s.out,
                };
                *at += k;
                seg
            })
            .collect();
        if pass.is_empty() {
            return;
        }
        step_batch(w, &mut pass, bw);
    }
}

/// Which buffers of a stream's [`Work`] a linear reads and writes.
type Io = fn(&mut Work) -> (&[f32], &mut Vec<f32>);

/// `y = x W^T + b` for every stream, `rows[i]` rows of stream `i`'s input.
/// Several streams: their rows are gathered into one matmul, so the weights
/// are read once for the batch and one parallel region covers all rows. The
/// kernels compute each output row on its own (the reduction order is fixed
/// by `k`; row blocking decides only which rows run together), so every
/// stream gets the bits it gets alone.
fn linear_batch(lin: &Linear, segs: &mut [Seg<'_>], rows: &[usize], io: Io, bw: &mut BatchScratch) {
    let d_in = lin.w.cols();
    if let [s] = segs {
        let (x, y) = io(&mut s.st.work);
        return lin.run(&x[..rows[0] * d_in], rows[0], y);
    }
    bw.x.clear();
    for (s, &r) in segs.iter_mut().zip(rows) {
        let (x, _) = io(&mut s.st.work);
        bw.x.extend_from_slice(&x[..r * d_in]);
    }
    let total = rows.iter().sum();
    lin.run(&bw.x, total, &mut bw.y);
    let d_out = lin.d_out();
    let mut at = 0;
    for (s, &r) in segs.iter_mut().zip(rows) {
        let (_, y) = io(&mut s.st.work);
        y.clear();
        y.extend_from_slice(&bw.y[at * d_out..(at + r) * d_out]);
        at += r;
    }
}

/// Decodes every stream's new frames, **layer-major**: each layer runs for
/// all streams before the next layer starts. The row-wise layers
/// (transformer, ConvNeXt MLPs) are one matmul over all streams' rows, so
/// their weights are read once per batch; the others run per stream back
/// to back, reusing their weights from cache where they fit. Each stream
/// keeps its own histories, K/V window and positions, and every per-stream
/// operation is the one [`step`] runs alone, in the same order on the same
/// shapes: the samples are bit-identical to decoding each stream by itself.
/// Streams may differ in frame count and position.
fn step_batch(w: &Weights, segs: &mut [Seg<'_>], bw: &mut BatchScratch) {
    debug_assert!(segs.iter().all(|s| s.n > 0));
    if segs.is_empty() {
        return;
    }
    let frames: Vec<usize> = segs.iter().map(|s| s.n).collect();

    // 1-2. Dequantization and pre_conv, per stream: rows = [n, latent].
    prof!(
        "rvq + pre_conv",
        for s in segs.iter_mut() {
            dequant_pre_conv(w, s.st, s.codes, s.n);
        }
    );

    // 3. Sliding-window transformer on [n, latent] -> [n, latent].
    prof!(
        "transformer",
        transformer(&w.transformer, segs, &frames, bw)
    );
    let ld = w.pre_conv.shape.c_out;
    for s in segs.iter_mut() {
        let wk = &mut s.st.work;
        transpose(&wk.rows, s.n, ld, &mut wk.cur);
    }

    // 4. Upsampling: transposed conv, then ConvNeXt.
    let mut mult = 1;
    for (ui, u) in w.upsample.iter().enumerate() {
        prof!(
            "upsample trans",
            for s in segs.iter_mut() {
                let (st, m) = (&mut *s.st, s.n * mult);
                let wk = &mut st.work;
                trans_conv(
                    &u.trans,
                    &mut st.up_trans[ui],
                    m,
                    &wk.cur,
                    &mut wk.cat,
                    &mut wk.full,
                    &mut wk.tmp,
                );
                std::mem::swap(&mut wk.cur, &mut wk.tmp);
            }
        );
        mult *= u.trans.stride;

        let cx = &u.convnext;
        for s in segs.iter_mut() {
            let (st, m) = (&mut *s.st, s.n * mult);
            let (dh, wk) = (&mut st.up_dwconv[ui], &mut st.work);
            dh.extend(&wk.cur, m, &mut wk.cat);
            prof!(
                "convnext dwconv",
                cx.dwconv.run(&wk.cat, dh.h + m, &mut wk.tmp)
            );
            transpose(&wk.tmp, ld, m, &mut wk.rows);
            wk.rows2.clear();
            wk.rows2.resize(wk.rows.len(), 0.0);
            tts_kernels::layer_norm(
                &wk.rows,
                &cx.norm_w,
                &cx.norm_b,
                super::weights::CONVNEXT_LN_EPS,
                &mut wk.rows2,
            );
        }
        let rows: Vec<usize> = frames.iter().map(|&n| n * mult).collect();
        prof!(
            "convnext pw1",
            linear_batch(&cx.pw1, segs, &rows, |wk| (&wk.rows2, &mut wk.big), bw)
        );
        prof!(
            "convnext gelu",
            for s in segs.iter_mut() {
                tts_kernels::gelu(&mut s.st.work.big);
            }
        );
        prof!(
            "convnext pw2",
            linear_batch(&cx.pw2, segs, &rows, |wk| (&wk.big, &mut wk.rows), bw)
        );
        for s in segs.iter_mut() {
            let (wk, m) = (&mut s.st.work, s.n * mult);
            // cur[c, t] += gamma[c] * rows[t, c]
            for (c, row) in wk.cur.chunks_exact_mut(m).enumerate() {
                let g = cx.gamma[c];
                for (t, x) in row.iter_mut().enumerate() {
                    *x += g * wk.rows[t * ld + c];
                }
            }
        }
    }

    // 5. decoder.0: latent -> decoder_dim.
    prof!(
        "conv_in",
        for s in segs.iter_mut() {
            let (st, m) = (&mut *s.st, s.n * mult);
            let wk = &mut st.work;
            st.conv_in.extend(&wk.cur, m, &mut wk.cat);
            w.conv_in.run(&wk.cat, st.conv_in.h + m, &mut wk.tmp);
            std::mem::swap(&mut wk.cur, &mut wk.tmp);
        }
    );

    // 6. Vocoder blocks: SnakeBeta + transposed conv, then residual units.
    for (bi, b) in w.blocks.iter().enumerate() {
        let _ = bi; // stage labels of the test-build profile
        for s in segs.iter_mut() {
            let (st, m) = (&mut *s.st, s.n * mult);
            let (bs, wk) = (&mut st.blocks[bi], &mut st.work);
            prof!(
                format!("block{bi} snake"),
                bs.trans.extend_snake(&wk.cur, m, &b.act, &mut wk.cat)
            );
            let t_in = bs.trans.h + m;
            prof!(
                format!("block{bi} trans"),
                b.trans.run(&wk.cat, t_in, &mut wk.full, &mut wk.tmp)
            );
            std::mem::swap(&mut wk.cur, &mut wk.tmp);
        }
        mult *= b.trans.stride;
        for (ri, u) in b.units.iter().enumerate() {
            for s in segs.iter_mut() {
                let (st, m) = (&mut *s.st, s.n * mult);
                let (uh, wk) = (&mut st.blocks[bi].units[ri], &mut st.work);
                prof!(
                    format!("block{bi} snake"),
                    uh.extend_snake(&wk.cur, m, &u.act1, &mut wk.cat)
                );
                let t_in = uh.h + m;
                prof!(
                    format!("block{bi} conv k7"),
                    u.conv1.run(&wk.cat, t_in, &mut wk.tmp)
                );
                prof!(format!("block{bi} snake"), u.act2.apply(&mut wk.tmp, m));
                prof!(
                    format!("block{bi} conv 1x1"),
                    u.conv2.run(&wk.tmp, m, &mut wk.tmp2)
                );
                prof!(
                    format!("block{bi} residual"),
                    tts_kernels::add_assign(&mut wk.cur, &wk.tmp2)
                );
            }
        }
    }

    // 7. Final SnakeBeta, conv to one channel, clamp.
    for s in segs.iter_mut() {
        let (st, m) = (&mut *s.st, s.n * mult);
        let wk = &mut st.work;
        prof!(
            "final snake",
            st.conv_out
                .extend_snake(&wk.cur, m, &w.final_act, &mut wk.cat)
        );
        let t_in = st.conv_out.h + m;
        prof!("conv_out", w.conv_out.run(&wk.cat, t_in, &mut wk.tmp));
        s.out.extend(wk.tmp.iter().map(|x| x.clamp(-1.0, 1.0)));
        st.frames += s.n;
    }
}

/// Split RVQ dequantization and `pre_conv` of one stream's `n` new frames:
/// leaves `work.rows = [n, latent]`.
fn dequant_pre_conv(w: &Weights, st: &mut DecoderState, codes: &[u32], n: usize) {
    let DecoderState { pre_conv, work, .. } = st;
    let Work {
        cur,
        cat,
        tmp,
        rows,
        rows2,
        big,
        ..
    } = work;

    // Frame-major: rows = [n, codebook_dim].
    let qz = &w.quantizer;
    let (nq, vd) = (qz.codebooks.len(), qz.vector_dim);
    big.clear();
    big.resize(n * vd, 0.0);
    for (t, e) in big.chunks_exact_mut(vd).enumerate() {
        let c = codes[t * nq] as usize;
        e.copy_from_slice(&qz.codebooks[0][c * vd..(c + 1) * vd]);
    }
    let cd = qz.first_proj.rows();
    rows.clear();
    rows.resize(n * cd, 0.0);
    tts_kernels::matmul(big, n, &qz.first_proj.mat(), None, rows);
    big.fill(0.0);
    for (t, e) in big.chunks_exact_mut(vd).enumerate() {
        for (q, cb) in qz.codebooks.iter().enumerate().skip(1) {
            let c = codes[t * nq + q] as usize;
            for (a, &b) in e.iter_mut().zip(&cb[c * vd..(c + 1) * vd]) {
                *a += b;
            }
        }
    }
    rows2.clear();
    rows2.resize(n * cd, 0.0);
    tts_kernels::matmul(big, n, &qz.rest_proj.mat(), None, rows2);
    rows.iter_mut()
        .zip(rows2.iter())
        .for_each(|(a, &b)| *a += b);

    // pre_conv on [codebook_dim, n].
    transpose(rows, n, cd, cur);
    pre_conv.extend(cur, n, cat);
    w.pre_conv.run(cat, pre_conv.h + n, tmp);
    let ld = w.pre_conv.shape.c_out;
    transpose(tmp, ld, n, rows);
}

/// A causal transposed conv over `x = [c_in, m]` with its history.
fn trans_conv(
    t: &CausalTransConv,
    hist: &mut History,
    m: usize,
    x: &[f32],
    cat: &mut Vec<f32>,
    full: &mut Vec<f32>,
    out: &mut Vec<f32>,
) {
    if hist.h == 0 {
        t.run(x, m, full, out);
    } else {
        hist.extend(x, m, cat);
        t.run(cat, hist.h + m, full, out);
    }
}

/// The pre-transformer over each stream's `frames[i]` new frames at
/// absolute positions `st.frames ..`; each stream's `work.rows = [n,
/// latent]` is replaced by its output. Linear by linear across streams (one
/// matmul over all streams' rows); norms, RoPE and attention per stream,
/// against its own K/V window.
fn transformer(tr: &Transformer, segs: &mut [Seg<'_>], frames: &[usize], bw: &mut BatchScratch) {
    let a = tr.attn;
    let (hd, half) = (a.head_dim, a.head_dim / 2);
    let (qd, kvd) = (a.n_heads * hd, a.n_kv_heads * hd);
    let hs = tr.norm.len();
    let keep = tr.window - 1;

    for s in segs.iter_mut() {
        let (b, pos0) = (&mut s.st.work.tf, s.st.frames);
        // RoPE tables: the angle is rounded to f32 before cos/sin, as the
        // official f32 `inv_freq @ positions` product.
        b.cos.clear();
        b.sin.clear();
        for i in 0..s.n {
            let p = (pos0 + i) as f32;
            for &f in &tr.inv_freq {
                let ang = (f * p) as f64;
                b.cos.push(ang.cos() as f32);
                b.sin.push(ang.sin() as f32);
            }
        }
    }

    linear_batch(&tr.input_proj, segs, frames, |w| (&w.rows, &mut w.tf.h), bw);
    for s in segs.iter_mut() {
        s.st.work.tf.xn.resize(s.n * hs, 0.0);
    }
    for (li, layer) in tr.layers.iter().enumerate() {
        for s in segs.iter_mut() {
            let b = &mut s.st.work.tf;
            tts_kernels::rms_norm(&b.h, &layer.input_norm, tr.eps, &mut b.xn);
        }
        linear_batch(&layer.q, segs, frames, |w| (&w.tf.xn, &mut w.tf.q), bw);
        linear_batch(&layer.k, segs, frames, |w| (&w.tf.xn, &mut w.tf.k), bw);
        linear_batch(&layer.v, segs, frames, |w| (&w.tf.xn, &mut w.tf.v), bw);
        for s in segs.iter_mut() {
            let (n, pos0) = (s.n, s.st.frames);
            let (b, cache) = (&mut s.st.work.tf, &mut s.st.kv[li]);
            for i in 0..n {
                let (c, s) = (
                    &b.cos[i * half..(i + 1) * half],
                    &b.sin[i * half..(i + 1) * half],
                );
                tts_kernels::rope(&mut b.q[i * qd..(i + 1) * qd], hd, c, s);
                tts_kernels::rope(&mut b.k[i * kvd..(i + 1) * kvd], hd, c, s);
            }
            let prev = cache.rows;
            cache.k.extend_from_slice(&b.k);
            cache.v.extend_from_slice(&b.v);
            cache.rows += n;
            // Absolute position of cache row 0.
            let kv_pos0 = pos0 - prev;

            b.att.clear();
            b.att.resize(n * qd, 0.0);
            for i0 in (0..n).step_by(QUERY_BLOCK) {
                let i1 = (i0 + QUERY_BLOCK).min(n);
                // Oldest key the first query of the block can see.
                let first = (pos0 + i0).saturating_sub(keep).max(kv_pos0) - kv_pos0;
                let last = prev + i1;
                tts_kernels::attention(
                    &b.q[i0 * qd..i1 * qd],
                    i1 - i0,
                    pos0 + i0,
                    tts_kernels::KvRows {
                        k: cache.k[first * kvd..last * kvd].into(),
                        v: cache.v[first * kvd..last * kvd].into(),
                        n: last - first,
                        pos0: kv_pos0 + first,
                        layout: tts_kernels::KvLayout::Positions,
                    },
                    a,
                    &mut b.att[i0 * qd..i1 * qd],
                );
            }
            if cache.rows > keep {
                let drop = cache.rows - keep;
                cache.k.drain(..drop * kvd);
                cache.v.drain(..drop * kvd);
                cache.rows = keep;
            }
        }
        linear_batch(&layer.o, segs, frames, |w| (&w.tf.att, &mut w.tf.proj), bw);
        for s in segs.iter_mut() {
            let b = &mut s.st.work.tf;
            add_scaled(&mut b.h, &layer.attn_scale, &b.proj);
            tts_kernels::rms_norm(&b.h, &layer.post_norm, tr.eps, &mut b.xn);
        }
        linear_batch(
            &layer.gate,
            segs,
            frames,
            |w| (&w.tf.xn, &mut w.tf.gate),
            bw,
        );
        linear_batch(&layer.up, segs, frames, |w| (&w.tf.xn, &mut w.tf.up), bw);
        for s in segs.iter_mut() {
            let b = &mut s.st.work.tf;
            // silu_mul writes a separate output; `att` is free again.
            b.att.clear();
            b.att.resize(b.gate.len(), 0.0);
            tts_kernels::silu_mul(&b.gate, &b.up, &mut b.att);
        }
        linear_batch(
            &layer.down,
            segs,
            frames,
            |w| (&w.tf.att, &mut w.tf.proj),
            bw,
        );
        for s in segs.iter_mut() {
            let b = &mut s.st.work.tf;
            add_scaled(&mut b.h, &layer.mlp_scale, &b.proj);
        }
    }
    for s in segs.iter_mut() {
        let b = &mut s.st.work.tf;
        tts_kernels::rms_norm(&b.h, &tr.norm, tr.eps, &mut b.xn);
    }
    linear_batch(
        &tr.output_proj,
        segs,
        frames,
        |w| (&w.tf.xn, &mut w.rows),
        bw,
    );
}
