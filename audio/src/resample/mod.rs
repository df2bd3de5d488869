//! Streaming sample-rate conversion from the model's native rate to an output
//! rate, chunk by chunk, with the same result as converting the whole stream
//! at once.
//!
//! # How
//! A band-limited sinc interpolator (rubato's `Async` resampler at a fixed
//! ratio, 128-tap Blackman-Harris² filter, 128× oversampled table, cubic
//! interpolation between table points). Every call hands rubato exactly the
//! samples it got (rubato's chunk size is resized per call, up to
//! [`MAX_CHUNK`]), so no input waits for a block to fill: an output sample is
//! emitted as soon as the filter's look-ahead (64 input samples) has arrived.
//! Because the filter state (the last 256 input samples and the fractional read
//! position) carries across calls, output does not depend on how the input was
//! split, up to float rounding of the read position (~1e-7 relative; see the
//! tests). rubato's FFT resampler was not used: its block must be a multiple of
//! `in_rate / gcd(in_rate, out_rate)` samples, which for 24 kHz → 44.1 kHz is
//! 80 samples and for an arbitrary rate like 22 050 Hz is 160, adding that
//! much buffering delay, and arbitrary rates (8 000–48 000) must all work.
//!
//! # Timing and length contract
//! With `t = in_rate / out_rate`, output sample `j` is the input signal
//! evaluated at input time `j·t + φ` ([`StreamResampler::time_offset`],
//! `|φ| ≤ t/2`, i.e. at most half an output sample). The filter's own delay is
//! removed (leading outputs are dropped), so there is no leading silence. After
//! [`StreamResampler::flush`], exactly `ceil(n_in · out_rate / in_rate)`
//! samples have been emitted in total for `n_in` input samples: one output per
//! output-rate instant inside the input's span.
//!
//! # Offline
//! `offline.rs`: [`resample_offline`], a whole clip at once with a longer
//! filter and exact time alignment (reference audio for voice cloning).

mod offline;

pub use offline::{offline_filter, offline_len, resample_offline, MAX_EXACT_TABLE, OFFLINE_TAPS};

use rubato::audioadapter_buffers::direct::SequentialSlice;
use rubato::{
    Async, FixedAsync, Resampler as _, Resizable as _, SincInterpolationParameters,
    SincInterpolationType, WindowFunction,
};

use crate::AudioError;

/// Lowest output rate accepted (telephony).
pub const MIN_OUTPUT_RATE: u32 = 8_000;
/// Highest output rate accepted.
pub const MAX_OUTPUT_RATE: u32 = 48_000;
/// Input (native) rates accepted: the models use 12 kHz (tiny fixtures) and
/// 24 kHz; anything from 4 kHz to 192 kHz is plausible for a codec.
pub const MIN_INPUT_RATE: u32 = 4_000;
pub const MAX_INPUT_RATE: u32 = 192_000;

/// Filter length in input samples. 128 taps keep the delay at 64 input
/// samples (2.7 ms at 24 kHz). Measured with sines (tests/it/resample.rs):
/// error ≤ 1e-5 of full scale (−100 dB) up to 0.75 × the lower Nyquist when
/// upsampling and 0.6 × when downsampling (rubato narrows the cutoff by the
/// ratio), so at 8 kHz out the band is flat to 2.4 kHz and −0.8 dB at 3.2
/// kHz; 256 taps would widen that at twice the delay. Cost: 4 dot products
/// of 128 per output sample (cubic interpolation), ~25 M multiply-adds per
/// second at 48 kHz, ~1% of a core.
pub const SINC_LEN: usize = 128;
/// Points per input sample in the sinc table (rubato's recommended start).
const OVERSAMPLING: usize = 128;
/// Accepted filter lengths for [`SincFilter`] (rubato needs a multiple of 8).
const SINC_LEN_RANGE: std::ops::RangeInclusive<usize> = 16..=1024;
/// Accepted table resolutions for [`SincFilter`] (the table holds
/// `taps × oversampling` floats; 4096 × 1024 is 16 MB).
const OVERSAMPLING_RANGE: std::ops::RangeInclusive<usize> = 1..=4096;

/// The sinc filter of a [`StreamResampler`]: [`SincFilter::STREAMING`] for
/// playback, or another for offline work ([`offline_filter`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SincFilter {
    /// Filter length in input samples (a multiple of 8, 16..=1024); the
    /// look-ahead is half of it, and rubato's cutoff rises with it (0.895
    /// of the lower Nyquist at 128 taps, 0.947 at 256).
    pub taps: usize,
    /// Table points per input sample (1..=4096).
    pub oversampling: usize,
    /// Take the nearest table point instead of interpolating between four.
    /// Exact (a polyphase filter) when every output instant falls on a table
    /// point, i.e. when `oversampling` is a multiple of
    /// `out_rate / gcd(in_rate, out_rate)`; otherwise it adds error.
    pub nearest: bool,
    /// Cutoff relative to the lower Nyquist; `None` is rubato's choice for
    /// the filter length (the 0.895 / 0.947 above).
    pub cutoff: Option<f32>,
}

impl SincFilter {
    /// The streaming default: [`SINC_LEN`] taps, 128 points, cubic.
    pub const STREAMING: SincFilter = SincFilter {
        taps: SINC_LEN,
        oversampling: OVERSAMPLING,
        nearest: false,
        cutoff: None,
    };
}
/// Largest number of input samples handed to rubato per call; bounds the
/// scratch buffer (longer inputs are processed in pieces, which does not
/// change the output).
pub const MAX_CHUNK: usize = 2048;

/// Look-ahead of the interpolator in input samples: the output at input time
/// `τ` is emitted at the latest by the step that delivers input sample
/// `τ + lookahead` (so 0 would be a pass-through). Half the filter plus
/// rubato's margin of one sample past the window (observed worst case 65.99
/// for 128 taps over the tested rate pairs; pinned by
/// `latency_is_as_documented`).
const fn lookahead(sinc_len: usize) -> usize {
    sinc_len / 2 + 2
}

/// Where rubato's `k`-th output sits, in input samples: `(k + 1)·t − C`.
/// From rubato 4's sinc table layout: initial read index `−(len − 1)`, table
/// centred at `len/2` points, sub-sample index offset by one table step;
/// so `C = len/2 − 1/oversampling`. Checked against a best-fit sine phase by
/// `outputs_are_time_aligned` (a wrong C shows up as an error ~0.1 there).
fn rubato_offset(sinc_len: usize, oversampling: usize) -> f64 {
    (sinc_len / 2) as f64 - 1.0 / oversampling as f64
}

/// Streaming resampler for one mono stream. See the module docs for timing.
///
/// The contract is the runtime's streaming one: [`step`](Self::step) consumes
/// what it is given and appends what is ready, [`flush`](Self::flush) ends the
/// stream and emits the tail, [`reset`](Self::reset) starts a new stream.
pub struct StreamResampler {
    in_rate: u32,
    out_rate: u32,
    n_in: u64,
    n_out: u64,
    sinc_len: usize,
    sinc: Option<Box<Sinc>>,
}

struct Sinc {
    rs: Async<f32>,
    /// rubato writes here; sized for the largest output of one call.
    scratch: Vec<f32>,
    /// zeros fed by `flush`.
    zeros: Vec<f32>,
    /// Leading rubato outputs that precede input time 0 (the filter delay).
    lead: usize,
    /// Of those, how many are still to be dropped.
    skip: usize,
    phi: f64,
}

impl StreamResampler {
    /// A resampler from `in_rate` (the model's native rate, from its config)
    /// to `out_rate`. Equal rates give an exact pass-through.
    pub fn new(in_rate: u32, out_rate: u32) -> Result<Self, AudioError> {
        Self::with_filter(in_rate, out_rate, SincFilter::STREAMING)
    }

    /// The same resampler with another filter: the timing and length
    /// contract is unchanged, the look-ahead is `taps / 2 + 2` input samples.
    pub fn with_filter(
        in_rate: u32,
        out_rate: u32,
        filter: SincFilter,
    ) -> Result<Self, AudioError> {
        check_rate("input (native)", in_rate, MIN_INPUT_RATE, MAX_INPUT_RATE)?;
        check_rate("output", out_rate, MIN_OUTPUT_RATE, MAX_OUTPUT_RATE)?;
        let sinc_len = filter.taps;
        if !SINC_LEN_RANGE.contains(&sinc_len) || !sinc_len.is_multiple_of(8) {
            return Err(AudioError::Resampler(format!(
                "filter length {sinc_len} is not a multiple of 8 in {}..={}",
                SINC_LEN_RANGE.start(),
                SINC_LEN_RANGE.end()
            )));
        }
        if !OVERSAMPLING_RANGE.contains(&filter.oversampling) {
            return Err(AudioError::Resampler(format!(
                "filter table resolution {} is outside {}..={}",
                filter.oversampling,
                OVERSAMPLING_RANGE.start(),
                OVERSAMPLING_RANGE.end()
            )));
        }
        let sinc = if in_rate == out_rate {
            None
        } else {
            let ratio = out_rate as f64 / in_rate as f64;
            let params = SincInterpolationParameters {
                sinc_len,
                f_cutoff: filter.cutoff,
                oversampling_factor: filter.oversampling,
                interpolation: if filter.nearest {
                    SincInterpolationType::Nearest
                } else {
                    SincInterpolationType::Cubic
                },
                window: WindowFunction::BlackmanHarris2,
            };
            let rs = Async::<f32>::new_sinc(ratio, 1.0, &params, MAX_CHUNK, 1, FixedAsync::Input)
                .map_err(|e| AudioError::Resampler(e.to_string()))?;
            let scratch = vec![0.0; rs.output_frames_max()];
            // rubato output k is at input time (k+1)·t − C. Dropping `lead`
            // outputs makes output j sit at j·t + φ with φ = (lead+1)·t − C;
            // `lead` is chosen to make |φ| ≤ t/2.
            let t = in_rate as f64 / out_rate as f64;
            let offset = rubato_offset(sinc_len, filter.oversampling);
            let lead = ((offset / t).round() as i64 - 1).max(0) as usize;
            let phi = (lead as f64 + 1.0) * t - offset;
            Some(Box::new(Sinc {
                rs,
                scratch,
                zeros: vec![0.0; MAX_CHUNK],
                lead,
                skip: lead,
                phi,
            }))
        };
        Ok(StreamResampler {
            in_rate,
            out_rate,
            n_in: 0,
            n_out: 0,
            sinc_len,
            sinc,
        })
    }

    pub fn input_rate(&self) -> u32 {
        self.in_rate
    }

    pub fn output_rate(&self) -> u32 {
        self.out_rate
    }

    /// True when input and output rates are equal (samples pass unchanged).
    pub fn is_identity(&self) -> bool {
        self.sinc.is_none()
    }

    /// φ in input samples: output `j` represents input time `j·in/out + φ`.
    /// Zero for the identity.
    pub fn time_offset(&self) -> f64 {
        self.sinc.as_ref().map_or(0.0, |s| s.phi)
    }

    /// Worst-case algorithmic latency in input samples: how long after an
    /// input sample arrives the output sample at the same instant can be
    /// emitted (the filter look-ahead; no block buffering). 66 samples, 2.75 ms
    /// at 24 kHz, with the default filter; 0 for the identity.
    pub fn latency_input_samples(&self) -> usize {
        if self.sinc.is_some() {
            lookahead(self.sinc_len)
        } else {
            0
        }
    }

    /// The same latency in seconds.
    pub fn latency_secs(&self) -> f64 {
        self.latency_input_samples() as f64 / self.in_rate as f64
    }

    /// Total output samples for `n_in` input samples once flushed:
    /// `ceil(n_in · out_rate / in_rate)`.
    pub fn output_len_for(&self, n_in: u64) -> u64 {
        let num = n_in as u128 * self.out_rate as u128;
        num.div_ceil(self.in_rate as u128) as u64
    }

    /// Consumes `input` (any length, including 0) and appends every output
    /// sample that is ready to `out`. Returns how many were appended.
    pub fn step(&mut self, input: &[f32], out: &mut Vec<f32>) -> usize {
        self.n_in += input.len() as u64;
        let before = out.len();
        match self.sinc.as_deref_mut() {
            None => out.extend_from_slice(input),
            Some(s) => {
                for piece in input.chunks(MAX_CHUNK) {
                    s.process(piece, out);
                }
            }
        }
        let n = out.len() - before;
        self.n_out += n as u64;
        n
    }

    /// Ends the stream: feeds the filter silence until every output instant
    /// inside the input span has been emitted, appends those samples, and
    /// resets for a new stream. Returns how many were appended.
    pub fn flush(&mut self, out: &mut Vec<f32>) -> usize {
        let target = self.output_len_for(self.n_in);
        let before = out.len();
        if let Some(s) = self.sinc.as_deref_mut() {
            let mut emitted = self.n_out;
            while emitted < target {
                let start = out.len();
                let zeros = std::mem::take(&mut s.zeros);
                s.process(&zeros, out);
                s.zeros = zeros;
                emitted += (out.len() - start) as u64;
            }
            let excess = (emitted - target) as usize;
            out.truncate(out.len() - excess);
        }
        let n = out.len() - before;
        self.reset();
        n
    }

    /// Forgets the current stream (filter history, counters).
    pub fn reset(&mut self) {
        self.n_in = 0;
        self.n_out = 0;
        if let Some(s) = self.sinc.as_deref_mut() {
            s.rs.reset();
            s.skip = s.lead;
        }
    }

    /// Convenience: resamples a whole signal in one call (step + flush).
    pub fn process_all(&mut self, input: &[f32]) -> Vec<f32> {
        self.reset();
        let mut out = Vec::with_capacity(self.output_len_for(input.len() as u64) as usize + 1);
        self.step(input, &mut out);
        self.flush(&mut out);
        out
    }
}

impl Sinc {
    /// One rubato call on at most MAX_CHUNK samples.
    fn process(&mut self, piece: &[f32], out: &mut Vec<f32>) {
        if piece.is_empty() {
            return;
        }
        debug_assert!(piece.len() <= MAX_CHUNK);
        // Cannot fail: 0 < len <= the construction chunk size.
        self.rs
            .set_chunk_size(piece.len())
            .expect("chunk within the constructed maximum");
        let input = SequentialSlice::new(piece, 1, piece.len()).expect("mono view of a slice");
        let frames = self.scratch.len();
        let mut output =
            SequentialSlice::new_mut(&mut self.scratch, 1, frames).expect("mono view of a slice");
        // Cannot fail: buffer sizes come from the resampler's own maxima.
        let (_, produced) = self
            .rs
            .process_into_buffer(&input, &mut output, None)
            .expect("rubato buffers sized from its own maxima");
        let drop = self.skip.min(produced);
        self.skip -= drop;
        out.extend_from_slice(&self.scratch[drop..produced]);
    }
}

fn check_rate(which: &'static str, rate: u32, min: u32, max: u32) -> Result<(), AudioError> {
    if (min..=max).contains(&rate) {
        Ok(())
    } else {
        Err(AudioError::InvalidSampleRate {
            which,
            rate,
            min,
            max,
        })
    }
}
