//! The whole runtime at once: the CRI socket and the NRI socket of one
//! runtime traced together, CRI calls with the NRI deliveries they caused
//! ([`super::correlate`]), the rest of both analyses alongside.
//!
//! Capture events are routed by connection: those of the CRI socket to the
//! CRI analysis, all others (NRI socket, pre-launched plugins' socketpairs,
//! followed plugin ends) to the NRI analysis. The same events give the same
//! records, live or replayed.

use std::{
    collections::{BTreeMap, HashMap},
    path::PathBuf,
};

use serde::Serialize;

use super::{
    contract::{Certainty, ContractChecker, ContractConfig, Severity, Violation},
    correlate::{Correlated, Correlator, CriSpan, NoCause},
    cri_analysis::{CriAnalysis, CriRecord, MethodSummary},
    hook_latency::{Buckets, HookSpan, HookSummary},
    nri_analysis::{NriAnalysis, NriRecord},
};
use crate::capture::{CaptureEvent, ConnId, Loss};

/// One line of `nri-trace trace` output.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum TraceRecord {
    /// `{"type":"cri_span", ...}`: a CRI call and its NRI hooks.
    CriSpan(Tagged<CriSpan>),
    /// `{"type":"nri_uncaused", ...}`: an NRI call with no CRI cause.
    NriUncaused(Tagged<Uncaused>),
    /// Other NRI records (plugins, resyncs, capture loss).
    Nri(NriRecord),
    /// Other CRI records (connections, resyncs).
    Cri(CriRecord),
    /// `{"type":"violation", ...}`: a contract rule broken
    /// (docs/contract.md).
    Violation(Tagged<Violation>),
}

/// A record with its `type` tag.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Tagged<T> {
    #[serde(rename = "type")]
    pub kind: &'static str,
    #[serde(flatten)]
    pub record: T,
}

/// An NRI call and why it has no CRI call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Uncaused {
    #[serde(flatten)]
    pub span: HookSpan,
    pub no_cri_cause: NoCause,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Route {
    Cri,
    Nri,
    /// The client's end of a CRI connection (not analysed).
    Ignore,
}

/// Capture events of one runtime's CRI and NRI sockets to trace records.
pub struct TraceAnalysis {
    cri_paths: Vec<PathBuf>,
    routes: HashMap<ConnId, Route>,
    cri: CriAnalysis,
    nri: NriAnalysis,
    correlator: Correlator,
    cri_buf: Vec<CriRecord>,
    nri_buf: Vec<NriRecord>,
    settled: Vec<Correlated>,
    contract: ContractChecker,
    violations: Vec<Violation>,
    /// Findings so far by (rule, severity, certain).
    finding_counts: BTreeMap<(&'static str, Severity, bool), u64>,
    /// The last capture loss counters.
    loss: Loss,
}

impl TraceAnalysis {
    pub fn new(cri_paths: Vec<PathBuf>, nri_paths: Vec<PathBuf>) -> Self {
        TraceAnalysis {
            cri_paths,
            routes: HashMap::new(),
            cri: CriAnalysis::new(),
            nri: NriAnalysis::new(nri_paths),
            correlator: Correlator::new(),
            cri_buf: Vec::new(),
            nri_buf: Vec::new(),
            settled: Vec::new(),
            contract: ContractChecker::new(ContractConfig::default()),
            violations: Vec::new(),
            finding_counts: BTreeMap::new(),
            loss: Loss::default(),
        }
    }

    /// With contract settings other than the defaults.
    pub fn with_contract(mut self, cfg: ContractConfig) -> Self {
        self.contract = ContractChecker::new(cfg);
        self
    }

    /// Feed one capture event; append what settles to `out`.
    pub fn on_capture(&mut self, ev: &CaptureEvent, out: &mut Vec<TraceRecord>) {
        let (conn, now) = match ev {
            CaptureEvent::Open(o) => {
                let cri = o
                    .socket_path
                    .as_ref()
                    .is_some_and(|p| self.cri_paths.iter().any(|c| c == p));
                let peer_of_cri = o
                    .other_end
                    .is_some_and(|e| self.routes.get(&e) == Some(&Route::Cri));
                let route = if peer_of_cri {
                    Route::Ignore
                } else if cri {
                    Route::Cri
                } else {
                    Route::Nri
                };
                self.routes.insert(o.conn, route);
                (Some(o.conn), Some(o.ts.mono_ns))
            }
            CaptureEvent::Chunk(c) => (Some(c.conn), Some(c.ts.mono_ns)),
            CaptureEvent::Close(c) => (Some(c.conn), Some(c.ts.mono_ns)),
            CaptureEvent::Process(_) | CaptureEvent::Loss(_) => (None, None),
        };
        let route = conn.map_or(Route::Nri, |c| {
            self.routes.get(&c).copied().unwrap_or(Route::Nri)
        });
        match route {
            Route::Cri => self.cri.on_capture(ev, &mut self.cri_buf),
            Route::Nri => self.nri.on_capture(ev, &mut self.nri_buf),
            Route::Ignore => {}
        }
        if let CaptureEvent::Close(c) = ev {
            self.routes.remove(&c.conn);
        }
        self.drain(now, out);
    }

    /// The capture ended.
    pub fn finish(&mut self, out: &mut Vec<TraceRecord>) {
        self.cri.finish(&mut self.cri_buf);
        self.nri.finish(&mut self.nri_buf);
        self.drain(None, out);
        self.correlator.finish(&mut self.settled);
        self.emit(Vec::new(), out);
        self.contract.finish(&mut self.violations);
        self.emit_violations(out);
    }

    fn drain(&mut self, now: Option<u64>, out: &mut Vec<TraceRecord>) {
        let mut fresh = Vec::new();
        for r in self.nri_buf.drain(..) {
            match r {
                NriRecord::NriCall(span) => self.correlator.on_nri(span, &mut self.settled),
                other => fresh.push(TraceRecord::Nri(other)),
            }
        }
        for r in self.cri_buf.drain(..) {
            match r {
                CriRecord::CriCall(call) => self.correlator.on_cri(call),
                other => fresh.push(TraceRecord::Cri(other)),
            }
        }
        if let Some(now) = now {
            let oldest = self.cri.oldest_unreported_start();
            self.correlator.advance(now, oldest, &mut self.settled);
        }
        self.emit(fresh, out);
    }

    /// Move `fresh` and the settled records to `out`, each checked against
    /// the contract; its findings follow.
    fn emit(&mut self, mut fresh: Vec<TraceRecord>, out: &mut Vec<TraceRecord>) {
        for c in self.settled.drain(..) {
            fresh.push(match c {
                Correlated::Cri(span) => TraceRecord::CriSpan(Tagged {
                    kind: "cri_span",
                    record: span,
                }),
                Correlated::Uncaused { span, why } => TraceRecord::NriUncaused(Tagged {
                    kind: "nri_uncaused",
                    record: Uncaused {
                        span,
                        no_cri_cause: why,
                    },
                }),
            });
        }
        for r in fresh {
            if let TraceRecord::Nri(NriRecord::CaptureLoss(l)) = &r {
                self.loss = *l;
            }
            self.contract.on_record(&r, &mut self.violations);
            out.push(r);
        }
        self.emit_violations(out);
    }

    fn emit_violations(&mut self, out: &mut Vec<TraceRecord>) {
        for v in self.violations.drain(..) {
            let certain = v.certainty == Certainty::Certain;
            *self
                .finding_counts
                .entry((v.rule, v.severity, certain))
                .or_default() += 1;
            out.push(TraceRecord::Violation(Tagged {
                kind: "violation",
                record: v,
            }));
        }
    }

    /// Per (plugin, hook) latency so far.
    pub fn hook_summary(&self) -> Vec<HookSummary> {
        self.nri.summary()
    }

    /// Histograms for metrics: own time per (plugin, hook), duration per
    /// CRI method, at `bounds_ns`.
    #[allow(clippy::type_complexity)]
    pub fn buckets(
        &self,
        bounds_ns: &[u64],
    ) -> (Vec<(String, String, Buckets)>, Vec<(String, Buckets)>) {
        (self.nri.buckets(bounds_ns), self.cri.buckets(bounds_ns))
    }

    /// Findings so far by (rule, severity, certain).
    pub fn finding_counts(&self) -> &BTreeMap<(&'static str, Severity, bool), u64> {
        &self.finding_counts
    }

    /// The last capture loss counters.
    pub fn loss(&self) -> Loss {
        self.loss
    }

    /// Per CRI method totals so far.
    pub fn method_summary(&self) -> Vec<MethodSummary> {
        self.cri.summary()
    }
}

/// Analyse a whole recorded capture.
pub fn analyze(
    events: impl IntoIterator<Item = CaptureEvent>,
    cri_paths: Vec<PathBuf>,
    nri_paths: Vec<PathBuf>,
) -> (Vec<TraceRecord>, Vec<HookSummary>, Vec<MethodSummary>) {
    let mut a = TraceAnalysis::new(cri_paths, nri_paths);
    let mut out = Vec::new();
    for ev in events {
        a.on_capture(&ev, &mut out);
    }
    a.finish(&mut out);
    (out, a.hook_summary(), a.method_summary())
}
