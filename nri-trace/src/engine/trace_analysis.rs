//! The whole runtime at once: the CRI socket and the NRI socket of one
//! runtime traced together, CRI calls with the NRI deliveries they caused
//! ([`super::correlate`]), the rest of both analyses alongside.
//!
//! [`TraceEngine`] takes the model's [`Observation`]s (live from a
//! [`TraceDecoder`], or read back from `nri-trace record`'s file) and
//! gives [`TraceRecord`]s; [`TraceAnalysis`] is both stages on capture
//! events. The same observations give the same records.

use std::{collections::BTreeMap, path::PathBuf};

use serde::Serialize;

use super::{
    contract::{Certainty, ContractChecker, ContractConfig, Severity, Violation},
    correlate::{Correlated, Correlator, CriSpan, NoCause},
    cri_analysis::{CriMethodStats, CriRecord, MethodSummary},
    hook_latency::{Buckets, HookSpan, HookSummary, HookTimer},
    nri_analysis::NriRecord,
};
use crate::{
    capture::{sandbox::SandboxEvent, CaptureEvent, Loss, Timestamp},
    model::{observation::Observation, trace_decoder::TraceDecoder},
};

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
    /// `{"type":"runtime_exited"|"runtime_started", ...}`: the runtime
    /// process went, or a new one took over its sockets (a restart).
    Runtime(Tagged<RuntimeChange>),
    /// `{"type":"sandbox","op":...}`: a signal, exit, unmount, ... of the
    /// runtime's process tree.
    Sandbox(Tagged<SandboxEvent>),
}

/// The runtime process that exited, or that serves the sockets now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RuntimeChange {
    pub ts: Timestamp,
    pub pid: u32,
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

/// The engine proper: observations in, trace records out (CRI spans with
/// their NRI hooks, uncaused NRI calls, the contract's findings), plus
/// hook and CRI latency histograms. Pure: it reads only the observations.
pub struct TraceEngine {
    timer: HookTimer,
    cri_stats: CriMethodStats,
    correlator: Correlator,
    settled: Vec<Correlated>,
    contract: ContractChecker,
    violations: Vec<Violation>,
    /// Findings so far by (rule, severity, certain).
    finding_counts: BTreeMap<(&'static str, Severity, bool), u64>,
    /// The last capture loss counters.
    loss: Loss,
}

impl Default for TraceEngine {
    fn default() -> Self {
        Self::new(ContractConfig::default())
    }
}

impl TraceEngine {
    pub fn new(cfg: ContractConfig) -> Self {
        TraceEngine {
            timer: HookTimer::new(),
            cri_stats: CriMethodStats::default(),
            correlator: Correlator::new(),
            settled: Vec::new(),
            contract: ContractChecker::new(cfg),
            violations: Vec::new(),
            finding_counts: BTreeMap::new(),
            loss: Loss::default(),
        }
    }

    /// Feed one observation; append what settles to `out`.
    pub fn on_observation(&mut self, o: Observation, out: &mut Vec<TraceRecord>) {
        let fresh = match o {
            Observation::CriCall(c) => {
                self.cri_stats.on_call(&c);
                self.correlator.on_cri(c);
                None
            }
            Observation::NriCall(c) => {
                let span = self.timer.on_call(c);
                self.correlator.on_nri(span, &mut self.settled);
                None
            }
            Observation::Clock {
                now_ns,
                cri_oldest_ns,
                nri_open_ns,
            } => {
                self.correlator
                    .advance(now_ns, cri_oldest_ns, nri_open_ns, &mut self.settled);
                self.contract.advance(now_ns, &mut self.violations);
                None
            }
            Observation::CriConnection { conn, ts, client } => {
                Some(TraceRecord::Cri(CriRecord::CriConnection {
                    conn,
                    ts,
                    client,
                }))
            }
            Observation::CriResync { conn, ts, skipped } => {
                Some(TraceRecord::Cri(CriRecord::CriResync { conn, ts, skipped }))
            }
            Observation::NriPlugin {
                conn,
                ts,
                plugin,
                events,
            } => Some(TraceRecord::Nri(NriRecord::NriPlugin {
                conn,
                ts,
                plugin,
                events,
            })),
            Observation::NriPluginGone { conn, ts, plugin } => {
                Some(TraceRecord::Nri(NriRecord::NriPluginGone {
                    conn,
                    ts,
                    plugin,
                }))
            }
            Observation::NriResync {
                conn,
                ts,
                mux_conn,
                skipped,
            } => Some(TraceRecord::Nri(NriRecord::NriResync {
                conn,
                ts,
                mux_conn,
                skipped,
            })),
            Observation::CaptureLoss(l) => Some(TraceRecord::Nri(NriRecord::CaptureLoss(l))),
            Observation::NriPending(c) => Some(TraceRecord::Nri(NriRecord::NriPending(c))),
            Observation::RuntimeExited { ts, pid } => Some(TraceRecord::Runtime(Tagged {
                kind: "runtime_exited",
                record: RuntimeChange { ts, pid },
            })),
            Observation::RuntimeStarted { ts, pid } => Some(TraceRecord::Runtime(Tagged {
                kind: "runtime_started",
                record: RuntimeChange { ts, pid },
            })),
            Observation::Sandbox(s) => Some(TraceRecord::Sandbox(Tagged {
                kind: "sandbox",
                record: s,
            })),
        };
        self.emit(fresh, out);
    }

    /// The observations ended.
    pub fn finish(&mut self, out: &mut Vec<TraceRecord>) {
        self.correlator.finish(&mut self.settled);
        self.emit(None, out);
        self.contract.finish(&mut self.violations);
        self.emit_violations(out);
    }

    /// Move the settled records, then `fresh`, to `out`, each checked
    /// against the contract; its findings follow.
    fn emit(&mut self, fresh: Option<TraceRecord>, out: &mut Vec<TraceRecord>) {
        let settled = self.settled.drain(..).map(|c| match c {
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
        for r in settled.chain(fresh) {
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
        self.timer.summary()
    }

    /// Per CRI method totals so far.
    pub fn method_summary(&self) -> Vec<MethodSummary> {
        self.cri_stats.summary()
    }

    /// Histograms for metrics: own time per (plugin, hook), duration per
    /// CRI method, at `bounds_ns`.
    #[allow(clippy::type_complexity)]
    pub fn buckets(
        &self,
        bounds_ns: &[u64],
    ) -> (Vec<(String, String, Buckets)>, Vec<(String, Buckets)>) {
        (
            self.timer.buckets(bounds_ns),
            self.cri_stats.buckets(bounds_ns),
        )
    }

    /// Findings so far by (rule, severity, certain).
    pub fn finding_counts(&self) -> &BTreeMap<(&'static str, Severity, bool), u64> {
        &self.finding_counts
    }

    /// The last capture loss counters.
    pub fn loss(&self) -> Loss {
        self.loss
    }
}

/// Capture events of one runtime's CRI and NRI sockets to trace records:
/// the [`TraceDecoder`] and the [`TraceEngine`] in one.
pub struct TraceAnalysis {
    decoder: TraceDecoder,
    engine: TraceEngine,
    obs: Vec<Observation>,
    /// Copies of the observations, kept for the caller when tapped.
    tapped: Option<Vec<Observation>>,
}

impl TraceAnalysis {
    pub fn new(cri_paths: Vec<PathBuf>, nri_paths: Vec<PathBuf>) -> Self {
        TraceAnalysis {
            decoder: TraceDecoder::new(cri_paths, nri_paths),
            engine: TraceEngine::default(),
            obs: Vec::new(),
            tapped: None,
        }
    }

    /// Keep a copy of every observation for [`Self::take_tapped`] (to
    /// record them while tracing).
    pub fn tap(&mut self) {
        self.tapped = Some(Vec::new());
    }

    /// The observations kept since the last call (none unless tapped).
    pub fn take_tapped(&mut self) -> Vec<Observation> {
        self.tapped.as_mut().map(std::mem::take).unwrap_or_default()
    }

    fn run_engine(&mut self, out: &mut Vec<TraceRecord>) {
        if let Some(t) = self.tapped.as_mut() {
            t.extend(self.obs.iter().cloned());
        }
        for o in self.obs.drain(..) {
            self.engine.on_observation(o, out);
        }
    }

    /// With contract settings other than the defaults.
    pub fn with_contract(mut self, cfg: ContractConfig) -> Self {
        self.engine = TraceEngine::new(cfg);
        self
    }

    /// Feed one capture event; append what settles to `out`.
    pub fn on_capture(&mut self, ev: &CaptureEvent, out: &mut Vec<TraceRecord>) {
        self.decoder.on_capture(ev, &mut self.obs);
        self.run_engine(out);
    }

    /// The capture ended.
    pub fn finish(&mut self, out: &mut Vec<TraceRecord>) {
        self.decoder.finish(&mut self.obs);
        self.run_engine(out);
        self.engine.finish(out);
    }

    /// The engine (summaries, histograms, finding counts).
    pub fn engine(&self) -> &TraceEngine {
        &self.engine
    }

    /// Per (plugin, hook) latency so far.
    pub fn hook_summary(&self) -> Vec<HookSummary> {
        self.engine.hook_summary()
    }

    /// Per CRI method totals so far.
    pub fn method_summary(&self) -> Vec<MethodSummary> {
        self.engine.method_summary()
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

/// Run the engine over recorded observations.
pub fn analyze_observations(
    observations: impl IntoIterator<Item = Observation>,
    cfg: ContractConfig,
) -> (Vec<TraceRecord>, TraceEngine) {
    let mut e = TraceEngine::new(cfg);
    let mut out = Vec::new();
    for o in observations {
        e.on_observation(o, &mut out);
    }
    e.finish(&mut out);
    (out, e)
}
