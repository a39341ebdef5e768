//! The CRI analysis of one capture: capture events in, [`CriRecord`]s out
//! (calls, connections, resyncs, capture loss), plus per-method counts and
//! latency at the end, including how many calls were identified how
//! (known, inferred, unknown).
//!
//! The same function serves a live capture and a replayed recording.

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use serde::Serialize;

use super::{
    hook_latency::{buckets, record, Buckets},
    window::{WindowStats, Windowed},
};
use crate::{
    capture::{CaptureEvent, ConnId, Loss, Timestamp},
    model::cri_call::{
        CriCall, CriCallAssembler, CriObservation, CriOutcome, CriStats, Identified,
    },
};

/// One line of `nri-trace cri` output.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum CriRecord {
    CriCall(CriCall),
    CriConnection {
        conn: ConnId,
        ts: Timestamp,
        client: Option<String>,
    },
    CriResync {
        conn: ConnId,
        ts: Timestamp,
        skipped: usize,
    },
    /// The capture lost data (cumulative counters): calls may be missing.
    CaptureLoss(Loss),
}

/// Per-method totals.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MethodSummary {
    /// Method name, or "(unknown)".
    pub method: String,
    pub calls: u64,
    pub known: u64,
    pub inferred: u64,
    /// Calls whose method stayed unknown (only under "(unknown)").
    pub unknown: u64,
    pub errors: u64,
    /// Client deadline expiries and cancellations.
    pub cancelled: u64,
    pub p50_ns: u64,
    pub p90_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
    /// Durations over the last minute of capture time.
    pub last_minute: WindowStats,
}

struct MethodStats {
    calls: u64,
    known: u64,
    inferred: u64,
    unknown: u64,
    errors: u64,
    cancelled: u64,
    /// Durations in microseconds (2 significant digits, auto-resizing).
    hist: Histogram<u32>,
    window: Windowed,
}

impl MethodStats {
    fn new() -> Self {
        MethodStats {
            calls: 0,
            known: 0,
            inferred: 0,
            unknown: 0,
            errors: 0,
            cancelled: 0,
            hist: Histogram::new(2).expect("2 significant digits is valid"),
            window: Windowed::default(),
        }
    }
}

/// Per-method counts and latency of CRI calls (hdrhistogram), over the
/// whole run and the last minute of capture time.
#[derive(Default)]
pub struct CriMethodStats {
    methods: BTreeMap<String, MethodStats>,
    /// Latest call end seen (capture time): where the window ends.
    last_ns: u64,
}

/// Capture events to CRI records.
pub struct CriAnalysis {
    assembler: CriCallAssembler,
    obs: Vec<CriObservation>,
    stats: CriMethodStats,
}

impl CriMethodStats {
    /// Account one finished call.
    pub fn on_call(&mut self, c: &CriCall) {
        let name = c.method.clone().unwrap_or_else(|| "(unknown)".into());
        let m = self.methods.entry(name).or_insert_with(MethodStats::new);
        m.calls += 1;
        match c.identified {
            Identified::Known => m.known += 1,
            Identified::Inferred { .. } => m.inferred += 1,
            Identified::Unknown { .. } => m.unknown += 1,
        }
        match c.outcome {
            CriOutcome::Error { .. } | CriOutcome::Reset { .. } => m.errors += 1,
            CriOutcome::Cancelled | CriOutcome::DeadlineExceeded => m.cancelled += 1,
            _ => {}
        }
        let at = c.end.or(c.start).map_or(0, |t| t.mono_ns);
        self.last_ns = self.last_ns.max(at);
        if let Some(d) = c.duration_ns {
            record(&mut m.hist, d);
            m.window.record(at, d);
        }
    }

    /// Duration histograms per method at `bounds_ns`.
    pub fn buckets(&self, bounds_ns: &[u64]) -> Vec<(String, Buckets)> {
        self.methods
            .iter()
            .map(|(m, s)| (m.clone(), buckets(&s.hist, bounds_ns)))
            .collect()
    }

    /// Per-method totals so far, by method name.
    pub fn summary(&self) -> Vec<MethodSummary> {
        self.methods
            .iter()
            .map(|(name, m)| {
                let q = |p: f64| {
                    if m.hist.is_empty() {
                        0
                    } else {
                        m.hist.value_at_quantile(p) * 1000
                    }
                };
                MethodSummary {
                    method: name.clone(),
                    calls: m.calls,
                    known: m.known,
                    inferred: m.inferred,
                    unknown: m.unknown,
                    errors: m.errors,
                    cancelled: m.cancelled,
                    p50_ns: q(0.5),
                    p90_ns: q(0.9),
                    p99_ns: q(0.99),
                    max_ns: if m.hist.is_empty() {
                        0
                    } else {
                        m.hist.max() * 1000
                    },
                    last_minute: m.window.stats(self.last_ns),
                }
            })
            .collect()
    }
}

impl Default for CriAnalysis {
    fn default() -> Self {
        Self::new()
    }
}

impl CriAnalysis {
    pub fn new() -> Self {
        CriAnalysis {
            assembler: CriCallAssembler::new(),
            obs: Vec::new(),
            stats: CriMethodStats::default(),
        }
    }

    /// Feed one capture event; append what it completes to `out`.
    pub fn on_capture(&mut self, ev: &CaptureEvent, out: &mut Vec<CriRecord>) {
        if let CaptureEvent::Loss(l) = ev {
            out.push(CriRecord::CaptureLoss(*l));
        }
        self.assembler.on_capture(ev, &mut self.obs);
        self.convert(out);
    }

    /// The capture ended: calls in flight and held calls come out.
    pub fn finish(&mut self, out: &mut Vec<CriRecord>) {
        self.assembler.finish(&mut self.obs);
        self.convert(out);
    }

    fn convert(&mut self, out: &mut Vec<CriRecord>) {
        for o in self.obs.drain(..) {
            out.push(match o {
                CriObservation::Call(c) => {
                    self.stats.on_call(&c);
                    CriRecord::CriCall(c)
                }
                CriObservation::Connection { conn, ts, client } => {
                    CriRecord::CriConnection { conn, ts, client }
                }
                CriObservation::Resync { conn, ts, skipped } => {
                    CriRecord::CriResync { conn, ts, skipped }
                }
            });
        }
    }

    /// Duration histograms per method at `bounds_ns`.
    pub fn buckets(&self, bounds_ns: &[u64]) -> Vec<(String, Buckets)> {
        self.stats.buckets(bounds_ns)
    }

    /// Per-method totals so far, by method name.
    pub fn summary(&self) -> Vec<MethodSummary> {
        self.stats.summary()
    }

    pub fn stats(&self) -> CriStats {
        self.assembler.stats()
    }

    /// See [`CriCallAssembler::oldest_unreported_start`].
    pub fn oldest_unreported_start(&self) -> Option<u64> {
        self.assembler.oldest_unreported_start()
    }
}

/// Analyse a whole recorded capture: every record, then the summary.
pub fn analyze(
    events: impl IntoIterator<Item = CaptureEvent>,
) -> (Vec<CriRecord>, Vec<MethodSummary>) {
    let mut a = CriAnalysis::new();
    let mut out = Vec::new();
    for ev in events {
        a.on_capture(&ev, &mut out);
    }
    a.finish(&mut out);
    (out, a.summary())
}
