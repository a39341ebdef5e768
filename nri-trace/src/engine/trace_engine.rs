//! The engine: the model's [`Observation`]s (live from the decoders, or
//! read back from a record file) in, [`Record`]s out: CRI calls with the
//! NRI deliveries they caused ([`super::correlate`]), the contract's
//! findings, and the latency tables. The same observations give the same
//! records.

use std::collections::BTreeMap;

use super::{
    conformance::{ClauseTally, Conformance},
    contract::{ContractChecker, ContractConfig},
    correlate::{ContainerExit, Correlated, Correlator},
    cri_latency::{CriMethodStats, MethodBuckets, MethodSummary},
    findings::{Certainty, Severity, Violation},
    hook_latency::{HookBuckets, HookSummary, HookTimer},
    pod_index::PodIndex,
    record::{Record, Uncaused},
};
use crate::{
    capture::{sandbox::SandboxOp, Loss},
    model::observation::Observation,
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
    /// The last clock: (now, oldest CRI call in decoding, oldest open NRI
    /// delivery).
    clock: (u64, Option<u64>, Option<u64>),
    /// The runtime's own lists of its pods and containers (`cri_state`):
    /// names for calls that give only ids of pods made before the trace.
    listed: PodIndex,
    /// The contract's by-design clauses, tallied per runtime.
    conformance: Conformance,
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
            clock: (0, None, None),
            listed: PodIndex::new(),
            conformance: Conformance::new(),
        }
    }

    /// Feed one observation; append what settles to `out`.
    pub fn on_observation(&mut self, o: Observation, out: &mut Vec<Record>) {
        let fresh = match o {
            Observation::CriCall(mut c) => {
                self.listed.fill_from_state(&mut c);
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
                self.clock = (now_ns, cri_oldest_ns, nri_open_ns);
                self.correlator
                    .advance(now_ns, cri_oldest_ns, nri_open_ns, &mut self.settled);
                self.contract.advance(now_ns, &mut self.violations);
                None
            }
            // In time order with the calls that end meanwhile, whatever
            // the chunking of the capture: the assembler reports a pending
            // call as its request message completes, a connection as it
            // closes, and a clock of the same capture time may come before
            // or after that.
            o @ (Observation::CriPending(_) | Observation::CriConnectionGone { .. }) => {
                self.correlator.on_observed(o);
                None
            }
            Observation::CaptureLoss(l) => {
                // Where the hole is (captures before the stamps existed
                // say only that there is one).
                if let (Some(from), Some(to)) = (l.lost_from, l.lost_to) {
                    self.correlator.on_loss(from.mono_ns, to.mono_ns);
                }
                Some(Record::Observed(Observation::CaptureLoss(l)))
            }
            Observation::CriState(s) => {
                self.listed.learn_state(&s);
                Some(Record::Observed(Observation::CriState(s)))
            }
            Observation::Sandbox(e) => {
                // A process of a container's cgroup exiting: the cause of
                // a StopContainer delivery no CRI call makes.
                if let (SandboxOp::Exit { status }, Some(cgroup)) = (&e.op, &e.cgroup) {
                    self.correlator.on_exit(ContainerExit {
                        pid: e.tgid,
                        comm: e.comm.clone(),
                        status: *status,
                        cgroup: cgroup.clone(),
                        at: e.ts,
                    });
                }
                Some(Record::Observed(Observation::Sandbox(e)))
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
        let listed = &self.listed;
        let settled = self.settled.drain(..).map(|c| match c {
            // Named again as it leaves: the runtime's list may have come
            // in after the call ended (the state query answers while the
            // first calls after the attach are in flight).
            Correlated::Cri(mut span) => {
                listed.fill_from_state(&mut span.call);
                Record::CriSpan(span)
            }
            Correlated::Observed(o) => Record::Observed(o),
            Correlated::Uncaused {
                span,
                why,
                exit,
                rolls_back,
            } => Record::NriUncaused(Uncaused {
                span,
                no_cri_cause: why,
                exit,
                rolls_back,
            }),
        });
        for r in settled.chain(fresh) {
            if let Record::Observed(Observation::CaptureLoss(l)) = &r {
                self.loss = *l;
            }
            self.contract.on_record(&r, &mut self.violations);
            self.conformance.on_record(&r);
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

    /// The conformance clauses decided so far (engine/conformance.rs).
    pub fn conformance(&self) -> Vec<ClauseTally> {
        self.conformance.tallies()
    }

    /// Per CRI method totals so far.
    pub fn method_summary(&self) -> Vec<MethodSummary> {
        self.cri_stats.summary()
    }

    /// Histograms for metrics: own time per (plugin, hook) and duration
    /// per CRI method, in [`histogram::BUCKET_BOUNDS_NS`], with their
    /// outcome counts.
    ///
    /// [`histogram::BUCKET_BOUNDS_NS`]: super::histogram::BUCKET_BOUNDS_NS
    pub fn buckets(&self) -> (Vec<HookBuckets>, Vec<MethodBuckets>) {
        (self.timer.buckets(), self.cri_stats.buckets())
    }

    /// Findings so far by (rule, severity, certain).
    pub fn finding_counts(&self) -> &BTreeMap<(&'static str, Severity, bool), u64> {
        &self.finding_counts
    }

    /// Every CRI call and NRI delivery that started before this capture
    /// time has come out as a record (findings aside, which rules hold
    /// for seconds): what a sink printing in start order may print up to.
    /// Calls still in decoding, deliveries awaiting their response (and
    /// the ones the NRI stage holds for the plugin's reply, within
    /// `correlate::NRI_SETTLE_NS`) and what the correlator holds keep it
    /// back.
    pub fn settled_before(&self) -> u64 {
        let (now, cri, nri) = self.clock;
        [
            Some(now.saturating_sub(super::correlate::NRI_SETTLE_NS)),
            cri,
            nri,
            self.correlator.oldest_held(),
        ]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(0)
    }

    /// The last capture loss counters.
    pub fn loss(&self) -> Loss {
        self.loss
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{pod_index::tests::state, test_calls::cri};

    /// The runtime's list answers after the first call after the attach
    /// ended, before its span leaves: the span is named.
    #[test]
    fn a_call_ended_before_the_list_came_is_named_as_it_leaves() {
        let mut e = TraceEngine::new(ContractConfig::default());
        let mut out = Vec::new();
        e.on_observation(
            Observation::CriCall(cri(Some("StopPodSandbox"), "bc2c", 10, 20)),
            &mut out,
        );
        e.on_observation(Observation::CriState(state()), &mut out);
        e.finish(&mut out);
        let named: Vec<String> = out
            .iter()
            .filter_map(|r| match r {
                Record::CriSpan(s) => s.call.pod.as_ref().map(ToString::to_string),
                _ => None,
            })
            .collect();
        assert_eq!(named, ["default/web-7f9c"]);
    }
}
