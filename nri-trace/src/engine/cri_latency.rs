//! CRI call latency: per-method counts and duration histograms
//! (hdrhistogram), over the whole run and the last minute of capture time,
//! with how many calls were identified how (known, inferred, unknown).

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use serde::Serialize;

use super::{
    histogram::{record, BucketCounts, Buckets},
    window::{WindowStats, Windowed},
};
use crate::model::cri_call::{CriCall, CriOutcome, Identified};

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

/// One method's exported histogram.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MethodBuckets {
    /// Method name, or "(unknown)".
    pub method: String,
    /// Durations of the calls whose duration is known.
    pub durations: Buckets,
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
    /// The durations again, exactly, in the exported buckets.
    exported: BucketCounts,
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
            exported: BucketCounts::default(),
            window: Windowed::default(),
        }
    }
}

/// Per-method counts and latency of CRI calls (hdrhistogram), over the
/// whole run and the last minute of capture time.
#[derive(Default)]
pub(crate) struct CriMethodStats {
    methods: BTreeMap<String, MethodStats>,
    /// Latest call end seen (capture time): where the window ends.
    last_ns: u64,
}

impl CriMethodStats {
    /// Account one finished call.
    pub(crate) fn on_call(&mut self, c: &CriCall) {
        let name = c.method_name().unwrap_or("(unknown)").to_owned();
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
            m.exported.observe(d);
            m.window.record(at, d);
        }
    }

    /// Duration buckets per method.
    pub(crate) fn buckets(&self) -> Vec<MethodBuckets> {
        self.methods
            .iter()
            .map(|(m, s)| MethodBuckets {
                method: m.clone(),
                durations: s.exported.buckets(),
            })
            .collect()
    }

    /// Per-method totals so far, by method name.
    pub(crate) fn summary(&self) -> Vec<MethodSummary> {
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
