//! What every decoder of a reference clip hands on — the channel mean at
//! the clip's own rate — and how that mean is taken. Shared by the
//! symphonia path (`decode`) and the Ogg Opus one (`ogg_opus`), which
//! `decode` dispatches to, so neither imports the other for it.

/// What the decoder produced: the channel mean at the source rate.
pub(super) struct Decoded {
    pub mono: Vec<f32>,
    pub rate: u32,
    pub channels: u16,
    pub format: &'static str,
}

/// The mean over channels, as numpy's `mean(axis=...)` computes it for the
/// small channel counts of audio: the sum divided by the count.
pub(super) fn mean(frame: &[f32]) -> f32 {
    if frame.len() == 1 {
        frame[0]
    } else {
        frame.iter().sum::<f32>() / frame.len() as f32
    }
}
