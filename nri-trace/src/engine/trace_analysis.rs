//! The whole runtime at once: the CRI socket and the NRI socket of one
//! runtime traced together, CRI calls with the NRI deliveries they caused
//! ([`super::correlate`]), the rest of both analyses alongside.
//!
//! [`TraceEngine`] takes the model's [`Observation`]s (live from a
//! [`TraceDecoder`], or read back from `nri-trace record`'s file) and
//! gives [`Record`]s; [`TraceAnalysis`] is both stages on capture
//! events. The same observations give the same records.

use std::{collections::BTreeMap, path::PathBuf};

use super::{
    contract::{ContractChecker, ContractConfig},
    correlate::{Correlated, Correlator},
    cri_analysis::{CriMethodStats, MethodSummary},
    findings::{Certainty, Severity, Violation},
    hook_latency::{Buckets, HookSummary, HookTimer},
    record::{Record, Uncaused},
};
use crate::{
    capture::{CaptureEvent, Loss},
    model::{observation::Observation, trace_decoder::TraceDecoder},
};

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
    pub fn on_observation(&mut self, o: Observation, out: &mut Vec<Record>) {
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
            // Passed on as they came.
            other => Some(Record::Observed(other)),
        };
        self.emit(fresh, out);
    }

    /// The observations ended.
    pub fn finish(&mut self, out: &mut Vec<Record>) {
        self.correlator.finish(&mut self.settled);
        self.emit(None, out);
        self.contract.finish(&mut self.violations);
        self.emit_violations(out);
    }

    /// Move the settled records, then `fresh`, to `out`, each checked
    /// against the contract; its findings follow.
    fn emit(&mut self, fresh: Option<Record>, out: &mut Vec<Record>) {
        let settled = self.settled.drain(..).map(|c| match c {
            Correlated::Cri(span) => Record::CriSpan(span),
            Correlated::Uncaused { span, why } => Record::NriUncaused(Uncaused {
                span,
                no_cri_cause: why,
            }),
        });
        for r in settled.chain(fresh) {
            if let Record::Observed(Observation::CaptureLoss(l)) = &r {
                self.loss = *l;
            }
            self.contract.on_record(&r, &mut self.violations);
            out.push(r);
        }
        self.emit_violations(out);
    }

    fn emit_violations(&mut self, out: &mut Vec<Record>) {
        for v in self.violations.drain(..) {
            let certain = v.certainty == Certainty::Certain;
            *self
                .finding_counts
                .entry((v.rule, v.severity, certain))
                .or_default() += 1;
            out.push(Record::Violation(v));
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

    fn run_engine(&mut self, out: &mut Vec<Record>) {
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
    pub fn on_capture(&mut self, ev: &CaptureEvent, out: &mut Vec<Record>) {
        self.decoder.on_capture(ev, &mut self.obs);
        self.run_engine(out);
    }

    /// The capture ended.
    pub fn finish(&mut self, out: &mut Vec<Record>) {
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
) -> (Vec<Record>, Vec<HookSummary>, Vec<MethodSummary>) {
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
) -> (Vec<Record>, TraceEngine) {
    let mut e = TraceEngine::new(cfg);
    let mut out = Vec::new();
    for o in observations {
        e.on_observation(o, &mut out);
    }
    e.finish(&mut out);
    (out, e)
}
