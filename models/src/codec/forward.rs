//! The decoder forward over a block of new frames, given the per-stream state
//! left by earlier blocks. One-shot decoding is this with a fresh state and
//! all frames in one block, so streaming and one-shot share every line.
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

use super::weights::{CausalConv, CausalTransConv, Transformer, Weights};

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

/// Decodes `n` frames of validated `codes` (`[n, Q]`) and appends their
/// `n * samples_per_frame` samples to `out`.
pub(crate) fn step(
    w: &Weights,
    st: &mut DecoderState,
    codes: &[u32],
    n: usize,
    out: &mut Vec<f32>,
) {
    if n == 0 {
        return;
    }
    let DecoderState {
        frames,
        pre_conv,
        kv,
        up_trans,
        up_dwconv,
        conv_in,
        blocks,
        conv_out,
        work,
    } = st;
    let Work {
        cur,
        cat,
        tmp,
        tmp2,
        full,
        rows,
        rows2,
        big,
        tf,
    } = work;

    // 1. Split RVQ dequantization, frame-major: rows = [n, codebook_dim].
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

    // 2. pre_conv on [codebook_dim, n].
    transpose(rows, n, cd, cur);
    pre_conv.extend(cur, n, cat);
    w.pre_conv.run(cat, pre_conv.h + n, tmp);
    let ld = w.pre_conv.shape.c_out;
    transpose(tmp, ld, n, rows);

    // 3. Sliding-window transformer on [n, latent] -> [n, latent].
    prof!(
        "transformer",
        transformer(&w.transformer, kv, *frames, n, rows, tf)
    );
    transpose(rows, n, ld, cur);

    // 4. Upsampling: transposed conv, then ConvNeXt.
    let mut m = n;
    for ((u, th), dh) in w
        .upsample
        .iter()
        .zip(up_trans.iter_mut())
        .zip(up_dwconv.iter_mut())
    {
        prof!(
            "upsample trans",
            trans_conv(&u.trans, th, m, cur, cat, full, tmp)
        );
        std::mem::swap(cur, tmp);
        m *= u.trans.stride;

        let cx = &u.convnext;
        dh.extend(cur, m, cat);
        prof!("convnext dwconv", cx.dwconv.run(cat, dh.h + m, tmp));
        transpose(tmp, ld, m, rows);
        rows2.clear();
        rows2.resize(rows.len(), 0.0);
        tts_kernels::layer_norm(
            rows,
            &cx.norm_w,
            &cx.norm_b,
            super::weights::CONVNEXT_LN_EPS,
            rows2,
        );
        prof!("convnext pw1", cx.pw1.run(rows2, m, big));
        prof!("convnext gelu", tts_kernels::gelu(big));
        prof!("convnext pw2", cx.pw2.run(big, m, rows));
        // cur[c, t] += gamma[c] * rows[t, c]
        for (c, row) in cur.chunks_exact_mut(m).enumerate() {
            let g = cx.gamma[c];
            for (t, x) in row.iter_mut().enumerate() {
                *x += g * rows[t * ld + c];
            }
        }
    }

    // 5. decoder.0: latent -> decoder_dim.
    conv_in.extend(cur, m, cat);
    prof!("conv_in", w.conv_in.run(cat, conv_in.h + m, tmp));
    std::mem::swap(cur, tmp);

    // 6. Vocoder blocks: SnakeBeta + transposed conv, then residual units.
    for (bi, (b, bs)) in w.blocks.iter().zip(blocks.iter_mut()).enumerate() {
        let _ = bi; // stage labels of the test-build profile
        bs.trans.extend(cur, m, cat);
        let t_in = bs.trans.h + m;
        prof!(format!("block{bi} snake"), b.act.apply(cat, t_in));
        prof!(
            format!("block{bi} trans"),
            b.trans.run(cat, t_in, full, tmp)
        );
        std::mem::swap(cur, tmp);
        m *= b.trans.stride;
        for (u, uh) in b.units.iter().zip(bs.units.iter_mut()) {
            uh.extend(cur, m, cat);
            let t_in = uh.h + m;
            prof!(format!("block{bi} snake"), u.act1.apply(cat, t_in));
            prof!(format!("block{bi} conv k7"), u.conv1.run(cat, t_in, tmp));
            prof!(format!("block{bi} snake"), u.act2.apply(tmp, m));
            prof!(format!("block{bi} conv 1x1"), u.conv2.run(tmp, m, tmp2));
            cur.iter_mut().zip(tmp2.iter()).for_each(|(a, &b)| *a += b);
        }
    }

    // 7. Final SnakeBeta, conv to one channel, clamp.
    conv_out.extend(cur, m, cat);
    let t_in = conv_out.h + m;
    prof!("final snake", w.final_act.apply(cat, t_in));
    prof!("conv_out", w.conv_out.run(cat, t_in, tmp));
    out.extend(tmp.iter().map(|x| x.clamp(-1.0, 1.0)));
    *frames += n;
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

/// The pre-transformer over `n` new frames at absolute positions
/// `pos0 .. pos0 + n`; `x = [n, latent]` is replaced by its output.
fn transformer(
    tr: &Transformer,
    kv: &mut [KvCache],
    pos0: usize,
    n: usize,
    x: &mut Vec<f32>,
    b: &mut TfWork,
) {
    let a = tr.attn;
    let (hd, half) = (a.head_dim, a.head_dim / 2);
    let (qd, kvd) = (a.n_heads * hd, a.n_kv_heads * hd);
    let hs = tr.norm.len();
    let keep = tr.window - 1;

    // RoPE tables: the angle is rounded to f32 before cos/sin, as the official
    // f32 `inv_freq @ positions` product.
    b.cos.clear();
    b.sin.clear();
    for i in 0..n {
        let p = (pos0 + i) as f32;
        for &f in &tr.inv_freq {
            let ang = (f * p) as f64;
            b.cos.push(ang.cos() as f32);
            b.sin.push(ang.sin() as f32);
        }
    }

    tr.input_proj.run(x, n, &mut b.h);
    b.xn.resize(n * hs, 0.0);
    for (layer, cache) in tr.layers.iter().zip(kv.iter_mut()) {
        tts_kernels::rms_norm(&b.h, &layer.input_norm, tr.eps, &mut b.xn);
        layer.q.run(&b.xn, n, &mut b.q);
        layer.k.run(&b.xn, n, &mut b.k);
        layer.v.run(&b.xn, n, &mut b.v);
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
                &cache.k[first * kvd..last * kvd],
                &cache.v[first * kvd..last * kvd],
                last - first,
                kv_pos0 + first,
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
        layer.o.run(&b.att, n, &mut b.proj);
        add_scaled(&mut b.h, &layer.attn_scale, &b.proj);

        tts_kernels::rms_norm(&b.h, &layer.post_norm, tr.eps, &mut b.xn);
        layer.gate.run(&b.xn, n, &mut b.gate);
        layer.up.run(&b.xn, n, &mut b.up);
        // silu_mul writes a separate output; `att` is free again.
        b.att.clear();
        b.att.resize(b.gate.len(), 0.0);
        tts_kernels::silu_mul(&b.gate, &b.up, &mut b.att);
        layer.down.run(&b.att, n, &mut b.proj);
        add_scaled(&mut b.h, &layer.mlp_scale, &b.proj);
    }
    tts_kernels::rms_norm(&b.h, &tr.norm, tr.eps, &mut b.xn);
    tr.output_proj.run(&b.xn, n, x);
}
