//! Anonymous resident memory (RssAnon) of the whole process, read from
//! `/proc/self/status`, and a background sampler that keeps its peak.
//!
//! RssAnon, not VmRSS: the checkpoint's weights are memory-mapped, so VmRSS
//! counts page-cache pages of the file that the kernel may drop at any time;
//! RssAnon counts what the process itself allocated (quantized weights, KV
//! caches, activations, allocator slack). Where `/proc` cannot be read
//! (non-Linux, a sandbox), every figure is `None` — reported as missing,
//! never as 0.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

const STATUS: &str = "/proc/self/status";

/// `/proc/self/status` is ≈ 1.5 kB on Linux 6.x; 8 kB leaves room for
/// kernels that add fields, on the stack, so a read never allocates.
const BUF: usize = 8192;

/// The `RssAnon:` value (kB) of a `/proc/<pid>/status` text.
pub fn parse_rss_anon(status: &[u8]) -> Option<u64> {
    let key = b"RssAnon:";
    let line = status.split(|&b| b == b'\n').find(|l| l.starts_with(key))?;
    let rest = std::str::from_utf8(&line[key.len()..]).ok()?;
    let mut it = rest.split_whitespace();
    let v = it.next()?.parse().ok()?;
    // The kernel prints "kB"; anything else is a format we do not know.
    (it.next() == Some("kB")).then_some(v)
}

/// Reads `f` (an open `/proc/self/status`) from the start into `buf`.
fn read_from(f: &mut File, buf: &mut [u8; BUF]) -> Option<u64> {
    // procfs regenerates the text on a read at offset 0, so one open file
    // serves every sample.
    f.seek(SeekFrom::Start(0)).ok()?;
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    parse_rss_anon(&buf[..n])
}

/// One read of RssAnon (kB) from a status file, without heap allocation
/// (a short path is turned into a C string on the stack).
fn rss_anon_kb_at(path: &Path) -> Option<u64> {
    let mut f = File::open(path).ok()?;
    read_from(&mut f, &mut [0; BUF])
}

/// Peaks shared between the sampler thread and the bench. 0 = no value yet
/// (a running process never has 0 kB of anonymous memory).
#[derive(Default)]
struct Peaks {
    /// Since the last [`RssSampler::take_window_peak`].
    window: AtomicU64,
    /// Since the start.
    total: AtomicU64,
    samples: AtomicU64,
}

impl Peaks {
    fn observe(&self, kb: u64) {
        self.window.fetch_max(kb, Ordering::Relaxed);
        self.total.fetch_max(kb, Ordering::Relaxed);
    }
}

/// A background thread that reads RssAnon every `interval` and keeps the
/// peak, overall and per window (load phase, each bench cell). Every direct
/// read through [`RssSampler::now`] also counts towards the peaks, so a peak
/// is never below a reported value.
pub struct RssSampler {
    path: &'static Path,
    peaks: Arc<Peaks>,
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
    available: bool,
}

/// What the sampler saw over its whole life.
pub struct RssTotals {
    pub peak_kb: Option<u64>,
    pub samples: u64,
}

impl RssSampler {
    /// Starts sampling; without a readable `/proc/self/status` no thread is
    /// started and every figure is `None`.
    pub fn start(interval: Duration) -> RssSampler {
        RssSampler::start_at(Path::new(STATUS), interval)
    }

    /// [`RssSampler::start`] on another status file (tests: a missing or
    /// foreign file must give missing figures, never 0).
    fn start_at(path: &'static Path, interval: Duration) -> RssSampler {
        let peaks = Arc::new(Peaks::default());
        let mut s = RssSampler {
            path,
            peaks: peaks.clone(),
            stop: None,
            thread: None,
            available: false,
        };
        let Ok(mut f) = File::open(path) else {
            return s;
        };
        let mut buf = [0u8; BUF];
        let Some(first) = read_from(&mut f, &mut buf) else {
            return s;
        };
        peaks.observe(first);
        peaks.samples.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::channel::<()>();
        let spawned = std::thread::Builder::new()
            .name("rss-sampler".into())
            .spawn(move || {
                // The buffer and the open file live for the thread's life:
                // a sample is a seek, a read and a parse, no allocation
                // (≈ 7 µs measured, 0.4% of a core at 2 ms).
                let mut buf = [0u8; BUF];
                // Ends when the bench sends a stop or drops the sender.
                while let Err(mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(interval) {
                    match read_from(&mut f, &mut buf) {
                        Some(kb) => {
                            peaks.observe(kb);
                            peaks.samples.fetch_add(1, Ordering::Relaxed);
                        }
                        None => break,
                    }
                }
            });
        if let Ok(h) = spawned {
            s.stop = Some(tx);
            s.thread = Some(h);
        }
        s.available = true;
        s
    }

    /// RssAnon now (a fresh read, also counted towards the peaks).
    pub fn now(&self) -> Option<u64> {
        if !self.available {
            return None;
        }
        let kb = rss_anon_kb_at(self.path)?;
        self.peaks.observe(kb);
        Some(kb)
    }

    /// The peak since the previous call (or the start), including a read
    /// now; the next window starts from the current value.
    pub fn take_window_peak(&self) -> Option<u64> {
        let now = self.now()?;
        let peak = self.peaks.window.swap(now, Ordering::Relaxed);
        Some(peak.max(now))
    }

    /// Stops and joins the thread (it wakes at once on the stop message).
    pub fn stop(mut self) -> RssTotals {
        self.shutdown();
        let total = self.peaks.total.load(Ordering::Relaxed);
        RssTotals {
            peak_kb: (self.available && total > 0).then_some(total),
            samples: self.peaks.samples.load(Ordering::Relaxed),
        }
    }

    fn shutdown(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(h) = self.thread.take() {
            let _ = h.join();
        }
    }
}

impl Drop for RssSampler {
    /// An early error return still stops the thread.
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Memory growth over a run of requests: RssAnon after each request
/// (completion order, warm-ups included), from request `from` (1-based,
/// after the allocator and caches have reached their working size) to the
/// last. `None` when there are fewer than two requests from `from` on.
pub struct Growth {
    pub from: usize,
    pub to: usize,
    /// RssAnon after the last request minus after request `from` (kB).
    pub delta_kb: i64,
    /// Least-squares slope of RssAnon over requests `from..=to` (kB/request).
    pub slope_kb_per_request: f64,
    /// Smallest and largest RssAnon over requests `from..=to`.
    pub min_kb: u64,
    pub max_kb: u64,
}

pub fn growth(after_each: &[u64], from: usize) -> Option<Growth> {
    let from = from.max(1);
    let to = after_each.len();
    if to < from + 1 {
        return None;
    }
    let ys = &after_each[from - 1..];
    let n = ys.len() as f64;
    let xm = (n - 1.0) / 2.0;
    let ym = ys.iter().map(|&y| y as f64).sum::<f64>() / n;
    let (mut sxy, mut sxx) = (0.0, 0.0);
    for (i, &y) in ys.iter().enumerate() {
        let dx = i as f64 - xm;
        sxy += dx * (y as f64 - ym);
        sxx += dx * dx;
    }
    Some(Growth {
        from,
        to,
        delta_kb: ys[ys.len() - 1] as i64 - ys[0] as i64,
        slope_kb_per_request: sxy / sxx,
        min_kb: *ys.iter().min()?,
        max_kb: *ys.iter().max()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_kernel_format_and_refuses_others() {
        let s = b"Name:\ttts-rt\nVmRSS:\t  200000 kB\nRssAnon:\t   12345 kB\nRssFile:\t 1 kB\n";
        assert_eq!(parse_rss_anon(s), Some(12345));
        assert_eq!(parse_rss_anon(b"VmRSS:\t1 kB\n"), None);
        assert_eq!(parse_rss_anon(b"RssAnon:\t12 MB\n"), None);
        assert_eq!(parse_rss_anon(b"RssAnon:\n"), None);
    }

    #[test]
    fn growth_is_the_delta_and_the_least_squares_slope() {
        // Requests 1..=4 are warm-up; from request 5 on: 100, 102, 104, 106.
        let v = [10, 50, 90, 99, 100, 102, 104, 106];
        let g = growth(&v, 5).unwrap();
        assert_eq!((g.from, g.to, g.delta_kb), (5, 8, 6));
        assert!((g.slope_kb_per_request - 2.0).abs() < 1e-12);
        assert_eq!((g.min_kb, g.max_kb), (100, 106));
        // Flat with noise: slope 0, delta 0.
        let g = growth(&[7, 5, 6, 5, 6, 5], 2).unwrap();
        assert_eq!(g.delta_kb, 0);
        assert!(g.slope_kb_per_request.abs() < 0.2);
        assert!(growth(&v, 8).is_none(), "one point is no trend");
        assert!(growth(&[], 1).is_none());
    }

    #[test]
    fn without_a_readable_status_every_figure_is_missing() {
        for path in ["/nonexistent/proc/self/status", "/dev/null"] {
            let s = RssSampler::start_at(Path::new(path), Duration::from_millis(1));
            assert_eq!(s.now(), None, "{path}");
            assert_eq!(s.take_window_peak(), None, "{path}");
            let t = s.stop();
            assert_eq!((t.peak_kb, t.samples), (None, 0), "{path}");
        }
    }

    #[test]
    fn the_sampler_sees_an_allocation_and_stops() {
        let s = RssSampler::start(Duration::from_millis(1));
        let Some(before) = s.now() else {
            // No /proc (non-Linux): everything is missing, nothing is 0.
            assert!(s.take_window_peak().is_none());
            assert!(s.stop().peak_kb.is_none());
            return;
        };
        // 64 MB touched, then freed (large blocks go back to the OS).
        let v = vec![1u8; 64 << 20];
        std::hint::black_box(&v);
        let during = s.now().unwrap();
        drop(v);
        let window = s.take_window_peak().unwrap();
        assert!(during >= before + 60_000, "{before} -> {during}");
        assert!(window >= during);
        let t = s.stop();
        assert!(t.peak_kb.unwrap() >= during);
        assert!(t.samples >= 1);
    }
}
