//! Prometheus metrics for `/metrics`, in the text exposition format.
//!
//! Hand-rolled (a few atomics and two fixed-bucket histograms) rather than a
//! metrics crate: the set is small and fixed, and nothing here runs on a
//! realtime path — observations happen once per finished context.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use tts_actors::{EngineStats, StageKind};

/// TTFP buckets in seconds, around the 80 ms codec frame: one frame, two,
/// three, four, six, eight, then the slow tail.
const TTFP_BUCKETS: [f64; 12] = [
    0.04, 0.08, 0.12, 0.16, 0.24, 0.32, 0.48, 0.64, 1.0, 2.0, 4.0, 8.0,
];
/// RTF buckets: below 1.0 keeps up with playback; the fine steps around 1
/// are where a deployment decides.
const RTF_BUCKETS: [f64; 11] = [0.1, 0.2, 0.3, 0.5, 0.7, 0.85, 1.0, 1.25, 1.5, 2.0, 4.0];

/// Longest request id kept as an exemplar (OpenMetrics caps an exemplar's
/// labels at 128 characters, `request_id=""` included).
const MAX_EXEMPLAR_ID: usize = 100;

#[derive(Debug)]
struct Histogram {
    bounds: &'static [f64],
    data: Mutex<HistogramData>,
}

#[derive(Debug)]
struct HistogramData {
    /// Cumulative counts per bound.
    counts: Vec<u64>,
    /// The +Inf count and the sum.
    total: u64,
    sum: f64,
    /// Per bucket (the bounds, then +Inf): the last observation that fell
    /// in it with its request id (an OpenMetrics exemplar).
    exemplars: Vec<Option<(String, f64)>>,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Self {
        Histogram {
            bounds,
            data: Mutex::new(HistogramData {
                counts: vec![0; bounds.len()],
                total: 0,
                sum: 0.0,
                exemplars: vec![None; bounds.len() + 1],
            }),
        }
    }

    fn observe(&self, v: f64, request_id: Option<&str>) {
        if !v.is_finite() {
            return;
        }
        let mut d = self.data.lock().unwrap_or_else(|e| e.into_inner());
        for (i, b) in self.bounds.iter().enumerate() {
            if v <= *b {
                d.counts[i] += 1;
            }
        }
        d.total += 1;
        d.sum += v;
        if let Some(id) = request_id.filter(|id| !id.is_empty() && id.len() <= MAX_EXEMPLAR_ID) {
            let slot = self
                .bounds
                .iter()
                .position(|b| v <= *b)
                .unwrap_or(self.bounds.len());
            d.exemplars[slot] = Some((id.to_string(), v));
        }
    }

    /// `exemplars`: OpenMetrics only (the 0.0.4 text format has none).
    fn render(&self, name: &str, help: &str, out: &mut String, exemplars: bool) {
        let d = self.data.lock().unwrap_or_else(|e| e.into_inner());
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let ex = |i: usize| match (&d.exemplars[i], exemplars) {
            (Some((id, v)), true) => format!(" # {{request_id=\"{}\"}} {v}", escape_label(id)),
            _ => String::new(),
        };
        for (i, (b, c)) in self.bounds.iter().zip(&d.counts).enumerate() {
            let _ = writeln!(out, "{name}_bucket{{le=\"{b}\"}} {c}{}", ex(i));
        }
        let _ = writeln!(
            out,
            "{name}_bucket{{le=\"+Inf\"}} {}{}",
            d.total,
            ex(self.bounds.len())
        );
        let _ = writeln!(out, "{name}_sum {}\n{name}_count {}", d.sum, d.total);
    }
}

/// Labelled counter over a fixed label set.
#[derive(Debug)]
struct Counters<const N: usize> {
    labels: [&'static str; N],
    values: [AtomicU64; N],
}

impl<const N: usize> Counters<N> {
    fn new(labels: [&'static str; N]) -> Self {
        Counters {
            labels,
            values: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    fn inc(&self, label: &str) {
        if let Some(i) = self.labels.iter().position(|l| *l == label) {
            self.values[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    fn get(&self, label: &str) -> u64 {
        self.labels
            .iter()
            .position(|l| *l == label)
            .map_or(0, |i| self.values[i].load(Ordering::Relaxed))
    }

    fn render(&self, name: &str, label: &str, help: &str, out: &mut String) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
        for (l, v) in self.labels.iter().zip(&self.values) {
            let _ = writeln!(
                out,
                "{name}{{{label}=\"{l}\"}} {}",
                v.load(Ordering::Relaxed)
            );
        }
    }
}

/// Refusal reasons counted by `tts_refusals_total`.
pub const REFUSALS: [&str; 6] = [
    "unauthorized",
    "not_ready",
    "too_many_sessions",
    "shutting_down",
    "at_capacity",
    "invalid_request",
];
/// Outcomes counted by `tts_contexts_total`.
pub const OUTCOMES: [&str; 4] = ["done", "cancelled", "failed", "abandoned"];

#[derive(Debug)]
pub struct ServerMetrics {
    ttfp: Histogram,
    rtf: Histogram,
    underruns: AtomicU64,
    contexts: Counters<4>,
    http_requests: Counters<4>,
    refusals: Counters<6>,
    protocol_errors: AtomicU64,
    barge_ins: AtomicU64,
    sessions_total: AtomicU64,
    pub sessions_active: AtomicI64,
    pub http_streams_active: AtomicI64,
    /// Segments cut and waiting for the engine, over all sessions.
    pub pending_segments: AtomicI64,
    /// Items held by sessions across turns (open contexts, remembered ids,
    /// pending acks, VAD clock entries): flat over a long session.
    pub session_retained_items: AtomicI64,
    /// Live contexts (`chunking.mode: live`): first text byte → first
    /// audio; waits for text (count, total µs); long-context cuts.
    live_ttfp: Histogram,
    live_pauses: AtomicU64,
    live_pause_us: AtomicU64,
    live_cuts: AtomicU64,
    /// `tts_build_info`'s labels, rendered once at startup.
    build_info: OnceLock<String>,
    /// The precision the server runs (its `--precision` spelling, from
    /// the build info), named in the slow-request warning.
    precision: OnceLock<String>,
    /// The first request slower than real time is logged at WARN, once.
    slow: tts_actors::SlowRequestWarning,
}

/// A label value in the text format: backslash, quote and newline escaped.
fn escape_label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

impl Default for ServerMetrics {
    fn default() -> Self {
        ServerMetrics {
            ttfp: Histogram::new(&TTFP_BUCKETS),
            rtf: Histogram::new(&RTF_BUCKETS),
            underruns: AtomicU64::new(0),
            contexts: Counters::new(OUTCOMES),
            http_requests: Counters::new(OUTCOMES),
            refusals: Counters::new(REFUSALS),
            protocol_errors: AtomicU64::new(0),
            barge_ins: AtomicU64::new(0),
            sessions_total: AtomicU64::new(0),
            sessions_active: AtomicI64::new(0),
            http_streams_active: AtomicI64::new(0),
            pending_segments: AtomicI64::new(0),
            session_retained_items: AtomicI64::new(0),
            build_info: OnceLock::new(),
            precision: OnceLock::new(),
            slow: tts_actors::SlowRequestWarning::default(),
            live_ttfp: Histogram::new(&TTFP_BUCKETS),
            live_pauses: AtomicU64::new(0),
            live_pause_us: AtomicU64::new(0),
            live_cuts: AtomicU64::new(0),
        }
    }
}

impl ServerMetrics {
    /// A finished WebSocket context (`http: false`) or HTTP speech request.
    pub fn finished(
        &self,
        http: bool,
        outcome: &str,
        ttfp_ms: Option<f64>,
        rtf: Option<f64>,
        underruns: Option<u32>,
    ) {
        self.finished_request(http, outcome, ttfp_ms, rtf, underruns, None);
    }

    /// [`Self::finished`] with the request's id, kept as the exemplar of
    /// the ttfp and rtf buckets it fell in (OpenMetrics `/metrics`), so a
    /// slow bucket links to a request's log line.
    pub fn finished_request(
        &self,
        http: bool,
        outcome: &str,
        ttfp_ms: Option<f64>,
        rtf: Option<f64>,
        underruns: Option<u32>,
        request_id: Option<&str>,
    ) {
        if http {
            self.http_requests.inc(outcome);
        } else {
            self.contexts.inc(outcome);
        }
        if let Some(t) = ttfp_ms {
            self.ttfp.observe(t / 1e3, request_id);
        }
        if let Some(r) = rtf {
            self.rtf.observe(r, request_id);
        }
        let precision = self.precision.get().map_or("unknown", String::as_str);
        self.slow.observe(rtf, precision);
        if let Some(u) = underruns {
            self.underruns.fetch_add(u as u64, Ordering::Relaxed);
        }
    }

    /// Sets `tts_build_info{...} 1`'s labels (version, git revision,
    /// precision, model): the first call wins.
    pub fn set_build_info(&self, labels: &[(&str, &str)]) {
        if let Some((_, p)) = labels.iter().find(|(k, _)| *k == "precision") {
            let _ = self.precision.set(p.to_string());
        }
        let l: Vec<String> = labels
            .iter()
            .map(|(k, v)| format!("{k}=\"{}\"", escape_label(v)))
            .collect();
        let _ = self.build_info.set(l.join(","));
    }

    pub fn refused(&self, reason: &str) {
        self.refusals.inc(reason);
    }

    pub fn refusals(&self, reason: &str) -> u64 {
        self.refusals.get(reason)
    }

    pub fn protocol_error(&self) {
        self.protocol_errors.fetch_add(1, Ordering::Relaxed);
    }

    pub fn barge_in(&self) {
        self.barge_ins.fetch_add(1, Ordering::Relaxed);
    }

    /// A live context finished: its first-text-to-first-audio time and
    /// where generation waited for text.
    pub fn live_finished(&self, ttfp_from_text_ms: Option<f64>, pauses_ms: &[f64]) {
        if let Some(t) = ttfp_from_text_ms {
            self.live_ttfp.observe(t / 1e3, None);
        }
        self.live_pauses
            .fetch_add(pauses_ms.len() as u64, Ordering::Relaxed);
        let us: f64 = pauses_ms.iter().map(|ms| ms * 1e3).sum();
        self.live_pause_us.fetch_add(us as u64, Ordering::Relaxed);
    }

    /// A live context was cut at a sentence end past its length bound.
    pub fn live_cut(&self) {
        self.live_cuts.fetch_add(1, Ordering::Relaxed);
    }

    pub fn session_opened(&self) {
        self.sessions_total.fetch_add(1, Ordering::Relaxed);
        self.sessions_active.fetch_add(1, Ordering::Relaxed);
    }

    pub fn session_closed(&self) {
        self.sessions_active.fetch_sub(1, Ordering::Relaxed);
    }

    /// The exposition text (Prometheus text format 0.0.4); `engine` is
    /// `None` until the model is loaded.
    pub fn render(&self, ready: bool, engine: Option<&EngineStats>) -> String {
        self.render_with(ready, engine, false)
    }

    /// The same in OpenMetrics 1.0 (what a Prometheus scrape asks for
    /// first): counter families named without `_total`, the histogram
    /// buckets' request-id exemplars, and `# EOF`.
    pub fn render_openmetrics(&self, ready: bool, engine: Option<&EngineStats>) -> String {
        openmetrics(&self.render_with(ready, engine, true))
    }

    fn render_with(&self, ready: bool, engine: Option<&EngineStats>, exemplars: bool) -> String {
        let mut o = String::with_capacity(4096);
        let g = |o: &mut String, name: &str, help: &str, v: f64| {
            let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}");
        };
        let c = |o: &mut String, name: &str, help: &str, v: u64| {
            let _ = writeln!(o, "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}");
        };
        g(
            &mut o,
            "tts_ready",
            "1 once the model is loaded and the engine runs",
            ready as u8 as f64,
        );
        if let Some(labels) = self.build_info.get() {
            let _ = writeln!(
                o,
                "# HELP tts_build_info The server's build: version, git revision, weight precision, model\n# TYPE tts_build_info gauge\ntts_build_info{{{labels}}} 1"
            );
        }
        self.ttfp.render(
            "tts_ttfp_seconds",
            "Time to first packet per context / HTTP request (server side)",
            &mut o,
            exemplars,
        );
        self.rtf.render(
            "tts_rtf",
            "Real-time factor per context / HTTP request (synthesis time over audio time)",
            &mut o,
            exemplars,
        );
        c(
            &mut o,
            "tts_underruns_total",
            "Playback underruns at prebuffer 0 (METRICS.md simulation), summed",
            self.underruns.load(Ordering::Relaxed),
        );
        self.contexts.render(
            "tts_contexts_total",
            "outcome",
            "WebSocket contexts by outcome",
            &mut o,
        );
        self.http_requests.render(
            "tts_http_speech_total",
            "outcome",
            "POST /v1/audio/speech requests by outcome",
            &mut o,
        );
        self.refusals.render(
            "tts_refusals_total",
            "reason",
            "Refused connections and requests by reason",
            &mut o,
        );
        c(
            &mut o,
            "tts_protocol_errors_total",
            "Client messages answered with an error event",
            self.protocol_errors.load(Ordering::Relaxed),
        );
        c(
            &mut o,
            "tts_barge_ins_total",
            "Speech starts that cancelled speaking contexts",
            self.barge_ins.load(Ordering::Relaxed),
        );
        self.live_ttfp.render(
            "tts_live_ttfp_from_text_seconds",
            "Live contexts: first text byte received to first audio frame sent",
            &mut o,
            false,
        );
        c(
            &mut o,
            "tts_live_text_pauses_total",
            "Live contexts: times generation waited for text while the context was open",
            self.live_pauses.load(Ordering::Relaxed),
        );
        let _ = writeln!(
            o,
            "# HELP tts_live_text_pause_seconds_total Live contexts: time generation waited for text\n\
             # TYPE tts_live_text_pause_seconds_total counter\n\
             tts_live_text_pause_seconds_total {}",
            self.live_pause_us.load(Ordering::Relaxed) as f64 / 1e6
        );
        c(
            &mut o,
            "tts_live_text_cuts_total",
            "Live contexts cut at a sentence end past their length bound",
            self.live_cuts.load(Ordering::Relaxed),
        );
        c(
            &mut o,
            "tts_sessions_total",
            "WebSocket sessions opened",
            self.sessions_total.load(Ordering::Relaxed),
        );
        g(
            &mut o,
            "tts_sessions_active",
            "Open WebSocket sessions",
            self.sessions_active.load(Ordering::Relaxed) as f64,
        );
        g(
            &mut o,
            "tts_http_streams_active",
            "HTTP speech responses in flight",
            self.http_streams_active.load(Ordering::Relaxed) as f64,
        );
        g(
            &mut o,
            "tts_pending_segments",
            "Text segments waiting for the engine (all sessions)",
            self.pending_segments.load(Ordering::Relaxed) as f64,
        );
        g(
            &mut o,
            "tts_session_retained_items",
            "Items sessions hold across turns (contexts, remembered ids, pending acks, VAD clock)",
            self.session_retained_items.load(Ordering::Relaxed) as f64,
        );
        if let Some(e) = engine {
            g(
                &mut o,
                "tts_engine_active_requests",
                "Requests admitted and running in the engine",
                e.active_requests as f64,
            );
            g(
                &mut o,
                "tts_load",
                "Requests computing against the most admission lets compute now (0..1; 1: the next is refused): scale on this",
                e.load,
            );
            g(
                &mut o,
                "tts_admission_limit",
                "Requests admission lets compute at once now: the measured real-time capacity, or --max-requests until it is measured",
                e.admission_limit as f64,
            );
            g(
                &mut o,
                "tts_offline_waiting",
                "Whole-file requests waiting in line for real-time capacity (they wait rather than being refused)",
                e.offline_waiting as f64,
            );
            if let Some(c) = e.capacity_streams {
                g(
                    &mut o,
                    "tts_capacity_streams",
                    "Real-time streams this process keeps continuous, as it measured them (absent until measured)",
                    c as f64,
                );
            }
            if let Some(u) = e.one_stream_load {
                g(
                    &mut o,
                    "tts_one_stream_load",
                    "Share of the cores' time one real-time stream needs, as measured (above 1: slower than real time)",
                    u,
                );
            }
            g(
                &mut o,
                "tts_engine_reserved_bytes",
                "Bytes reserved by the engine's admission ledger",
                e.reserved_bytes as f64,
            );
            c(
                &mut o,
                "tts_prefix_cache_hits_total",
                "Talker prefills that reused a cached prompt prefix (a voice's shared leading rows)",
                e.prefix_cache_hits,
            );
            c(
                &mut o,
                "tts_prefix_cache_misses_total",
                "Talker prefills with a shareable prefix not in the cache (computed, then kept)",
                e.prefix_cache_misses,
            );
            g(
                &mut o,
                "tts_prefix_cache_entries",
                "Prompt prefixes held by the talker's prefix cache",
                e.prefix_cache_entries as f64,
            );
            g(
                &mut o,
                "tts_prefix_cache_bytes",
                "Bytes held by the talker's prefix cache (keys, values and their rows)",
                e.prefix_cache_bytes as f64,
            );
            let _ = writeln!(o, "# HELP tts_engine_held_states Requests holding state per stage (queue depth)\n# TYPE tts_engine_held_states gauge");
            for k in StageKind::ALL {
                let _ = writeln!(
                    o,
                    "tts_engine_held_states{{stage=\"{k}\"}} {}",
                    e.held_states[k.index()]
                );
            }
            let _ = writeln!(o, "# HELP tts_engine_restarts_total Stage worker restarts\n# TYPE tts_engine_restarts_total counter");
            for k in StageKind::ALL {
                let _ = writeln!(
                    o,
                    "tts_engine_restarts_total{{stage=\"{k}\"}} {}",
                    e.restarts[k.index()]
                );
            }
        }
        o
    }
}

/// 0.0.4 text → OpenMetrics: a counter's family (its HELP and TYPE lines)
/// is its name without `_total`, the samples keep it; `# EOF` ends it.
fn openmetrics(text: &str) -> String {
    let counters: std::collections::HashSet<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(text.len() + 8);
    for l in text.lines() {
        let family = ["# HELP ", "# TYPE "].iter().find_map(|p| {
            let (name, rest) = l.strip_prefix(p)?.split_once(' ')?;
            let base = name
                .strip_suffix("_total")
                .filter(|_| counters.contains(name))?;
            Some(format!("{p}{base} {rest}"))
        });
        out.push_str(family.as_deref().unwrap_or(l));
        out.push('\n');
    }
    out.push_str("# EOF\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_are_cumulative() {
        let m = ServerMetrics::default();
        m.finished(false, "done", Some(100.0), Some(0.5), Some(2));
        m.finished(true, "done", Some(30.0), None, None);
        m.refused("not_ready");
        let t = m.render(false, None);
        assert!(t.contains("tts_ttfp_seconds_bucket{le=\"0.04\"} 1"), "{t}");
        assert!(t.contains("tts_ttfp_seconds_bucket{le=\"0.12\"} 2"));
        assert!(t.contains("tts_ttfp_seconds_count 2"));
        assert!(t.contains("tts_rtf_bucket{le=\"0.5\"} 1"));
        assert!(t.contains("tts_underruns_total 2"));
        assert!(t.contains("tts_contexts_total{outcome=\"done\"} 1"));
        assert!(t.contains("tts_http_speech_total{outcome=\"done\"} 1"));
        assert!(t.contains("tts_refusals_total{reason=\"not_ready\"} 1"));
        assert!(t.contains("tts_ready 0"));
        assert!(!t.contains("tts_build_info"), "not set yet");
    }

    #[test]
    fn openmetrics_names_counter_families_and_carries_request_id_exemplars() {
        let m = ServerMetrics::default();
        m.finished_request(true, "done", Some(70.0), Some(0.4), None, Some("req_1"));
        m.finished(false, "done", Some(75.0), None, None);
        let om = m.render_openmetrics(true, None);
        assert!(om.ends_with("# EOF\n"), "{om}");
        assert!(om.contains("# TYPE tts_contexts counter\n"), "{om}");
        assert!(om.contains("# HELP tts_contexts WebSocket"), "{om}");
        assert!(
            om.contains("tts_contexts_total{outcome=\"done\"} 1"),
            "{om}"
        );
        assert!(!om.contains("# TYPE tts_contexts_total"), "{om}");
        assert!(
            om.contains("tts_ttfp_seconds_bucket{le=\"0.08\"} 2 # {request_id=\"req_1\"} 0.07"),
            "{om}"
        );
        assert!(om.contains("tts_rtf_bucket{le=\"0.5\"} 1 # {request_id=\"req_1\"} 0.4"));
        // The classic text has no exemplars.
        let text = m.render(true, None);
        assert!(
            !text.contains("request_id") && !text.contains("# EOF"),
            "{text}"
        );
    }

    #[test]
    fn build_info_is_one_gauge_with_escaped_labels() {
        let m = ServerMetrics::default();
        m.set_build_info(&[("version", "0.1.0"), ("model", "a\"b\\c")]);
        let t = m.render(true, None);
        assert!(
            t.contains("tts_build_info{version=\"0.1.0\",model=\"a\\\"b\\\\c\"} 1"),
            "{t}"
        );
    }
    /// Issue 31, item 1: the server warns about the first request slower
    /// than real time, with its rtf and the precision, and not about the
    /// next ones (each still has its own info line). The rtfs are given,
    /// not timed.
    #[test]
    fn real_time_by_default_the_server_warns_once_about_a_slow_request() {
        use std::sync::{Arc, Mutex};
        #[derive(Clone, Default)]
        struct Lines(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Lines {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let out = Lines::default();
        let w = out.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || w.clone())
            .with_ansi(false)
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            let m = ServerMetrics::default();
            m.set_build_info(&[("precision", "f32,f32,f32")]);
            m.finished(false, "done", Some(90.0), Some(0.7), None);
            m.finished_request(true, "done", Some(90.0), Some(1.43), None, Some("req_a"));
            m.finished(false, "done", Some(90.0), Some(2.5), None);
            m.finished(true, "done", Some(90.0), Some(1.2), None);
        });
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        let warns: Vec<&str> = text.lines().filter(|l| l.contains("WARN")).collect();
        assert_eq!(warns.len(), 1, "{text}");
        assert!(warns[0].contains("slower than real time"), "{text}");
        assert!(warns[0].contains("rtf=1.43"), "{text}");
        assert!(warns[0].contains("precision=\"f32,f32,f32\""), "{text}");
        assert!(warns[0].contains("--precision fast"), "{text}");
    }
}
