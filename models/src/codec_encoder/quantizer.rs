//! The split residual vector quantizer's encode path
//! (`MimiSplitResidualVectorQuantizer.encode`): both halves read the same
//! downsampled embeddings, each through its own input projection; the
//! semantic half gives the first code(s), the acoustic half's residual RVQ
//! the rest. Only as many acoustic levels run as codes are kept: level `l`
//! depends on levels `< l` alone, so stopping early changes nothing.
//!
//! Nearest entry: `argmin_j |e_j|^2 - 2 u . e_j` in f32, the first index on
//! ties. The official `torch.cdist(...).argmin()` ranks by
//! `sqrt(max(|u|^2 - 2 u . e + |e|^2, 0))`: the same order up to rounding,
//! so the two can differ only where two entries are within rounding of
//! each other.

use super::transformer::transpose;
use super::weights::{Quantizer, Rvq};

/// Level `l` of `rvq`: the index of the nearest entry for each of the `t`
/// rows of the residual `r` (`[t, dim]`), which then loses that entry.
/// `dots` is scratch.
fn level(
    rvq: &Rvq,
    l: usize,
    r: &mut [f32],
    t: usize,
    dim: usize,
    dots: &mut Vec<f32>,
) -> Vec<u32> {
    let cb = &rvq.codebooks[l];
    let norms = &rvq.norms[l];
    let cs = norms.len();
    dots.clear();
    dots.resize(t * cs, 0.0);
    tts_kernels::matmul(r, t, &cb.mat(), None, dots);
    let mut idx = Vec::with_capacity(t);
    let mut entry = vec![0f32; dim];
    for (row, d) in r.chunks_exact_mut(dim).zip(dots.chunks_exact(cs)) {
        let mut best = 0;
        let mut best_d = f32::INFINITY;
        for (j, (&n, &dot)) in norms.iter().zip(d).enumerate() {
            let dist = n - 2.0 * dot;
            if dist < best_d {
                best_d = dist;
                best = j;
            }
        }
        cb.row_into(best, &mut entry);
        for (a, b) in row.iter_mut().zip(&entry) {
            *a -= b;
        }
        idx.push(best as u32);
    }
    idx
}

/// The projected input `[t, dim]` of one half.
fn project(rvq: &Rvq, rows: &[f32], t: usize, hidden: usize, dim: usize) -> Vec<f32> {
    match &rvq.input_proj {
        Some(w) => {
            let mut u = vec![0f32; t * dim];
            tts_kernels::matmul(rows, t, &w.mat(), None, &mut u);
            u
        }
        None => {
            debug_assert_eq!(hidden, dim);
            rows.to_vec()
        }
    }
}

/// Codes `[t, groups]` (row-major) for `z = [hidden, t]`: the semantic
/// levels first, then the acoustic ones.
pub(crate) fn encode(q: &Quantizer, z: &[f32], hidden: usize, t: usize) -> Vec<u32> {
    let dim = q.dim;
    let rows = transpose(z, hidden, t);
    let groups = q.semantic.codebooks.len() + q.acoustic.codebooks.len();
    let mut codes = vec![0u32; t * groups];
    let mut dots = Vec::new();
    let mut col = 0;
    for rvq in [&q.semantic, &q.acoustic] {
        if rvq.codebooks.is_empty() {
            continue;
        }
        let mut r = project(rvq, &rows, t, hidden, dim);
        for l in 0..rvq.codebooks.len() {
            let idx = level(rvq, l, &mut r, t, dim, &mut dots);
            for (i, c) in idx.into_iter().enumerate() {
                codes[i * groups + col] = c;
            }
            col += 1;
        }
    }
    codes
}
