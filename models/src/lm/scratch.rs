//! The working buffers of one forward call ([`Scratch`]): a sequence's own
//! in its [`super::KvCache`], a batch's in [`super::BatchScratch`].

/// Activations of one forward call; every buffer is fully overwritten
/// before it is read, so only the lengths matter between calls.
#[derive(Clone, Debug, Default)]
pub(super) struct Scratch {
    pub(super) x: Vec<f32>,
    pub(super) hn: Vec<f32>,
    pub(super) q: Vec<f32>,
    pub(super) k: Vec<f32>,
    pub(super) v: Vec<f32>,
    pub(super) att: Vec<f32>,
    pub(super) proj: Vec<f32>,
    pub(super) gate: Vec<f32>,
    pub(super) up: Vec<f32>,
    pub(super) act: Vec<f32>,
    /// `[n, head_dim / 2]` RoPE tables of the call's positions, computed once
    /// per call instead of once per layer.
    pub(super) cos: Vec<f32>,
    pub(super) sin: Vec<f32>,
    pub(super) tmp: Vec<f32>,
}

impl Scratch {
    pub(super) fn bytes(&self) -> usize {
        [
            &self.x, &self.hn, &self.q, &self.k, &self.v, &self.att, &self.proj, &self.gate,
            &self.up, &self.act, &self.cos, &self.sin, &self.tmp,
        ]
        .iter()
        .map(|b| b.capacity() * 4)
        .sum()
    }
}
