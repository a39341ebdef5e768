//! Correlation: each NRI delivery attached to the CRI call during which the
//! runtime made it.
//!
//! The runtime calls NRI from inside its CRI handlers (containerd
//! `internal/cri/server/*` via `internal/nri`; PROTOCOL-NOTES.md "where
//! runtimes call NRI"): a RUN_POD_SANDBOX delivery happens while the CRI
//! RunPodSandbox of that pod is in flight. A delivery is attached to the
//! CRI call that (1) was in flight when the delivery started, (2) names the
//! same pod (sandbox id, or uid for RunPodSandbox, whose sandbox id comes
//! only with its response) or container, and (3) is a method that makes
//! that event ([`causes`]). Deliveries with no such call are kept and
//! labeled: plugin lifecycle (Configure, Synchronize...), or no CRI call in
//! flight (runtime-internal causes, or CRI not traced).
//!
//! A CRI call whose method is unknown (hidden by HPACK after a late attach)
//! and whose candidates include exactly one cause of a delivery it holds
//! is resolved by it, marked inferred with that evidence.
//!
//! Inputs arrive in completion order, not start order: a CRI call is held
//! until the NRI calls it may contain are in ([`NRI_SETTLE_NS`] of capture
//! time past its end, and no delivery begun before its end still open: a
//! hung hook comes out of the NRI stage only at its deadline, after the CRI
//! call it hung), and a delivery until no CRI call that could contain it is
//! still unreported. Pure and deterministic.

use serde::Serialize;

use super::hook_latency::{Hook, HookSpan};
use crate::{
    capture::Timestamp,
    decode::nri::message::Event,
    model::{
        cri_call::{CriCall, Identified},
        nri_call::Caller,
    },
};

/// How long past a CRI call's end NRI calls inside it may still come out
/// of the NRI stage (it holds answered calls up to 5 ms for the plugin's
/// reply; `model::nri_call`).
pub const NRI_SETTLE_NS: u64 = 10_000_000;

/// A CRI call with the NRI deliveries it caused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CriSpan {
    #[serde(flatten)]
    pub call: CriCall,
    /// The deliveries, in start order.
    pub hooks: Vec<HookSpan>,
    /// Time the runtime spent waiting on those deliveries (they run one
    /// after another under the NRI lock).
    pub nri_ns: u64,
    /// `nri_ns` as a share of the call's duration, in per mille.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nri_permille: Option<u32>,
}

/// Why a delivery has no CRI call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NoCause {
    /// Registration, configuration, synchronization, shutdown, or a call
    /// the plugin made (UpdateContainers).
    PluginLifecycle,
    /// No CRI call that makes this event was in flight for its pod or
    /// container: a runtime-internal cause (container exit, restart), or a
    /// CRI connection not traced.
    NoCriCallInFlight,
}

/// What the correlator yields.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum Correlated {
    Cri(CriSpan),
    Uncaused { span: HookSpan, why: NoCause },
}

/// CRI methods whose handler makes NRI event `event` (containerd 1.7
/// `internal/cri/server`: RunPodSandbox, StopPodSandbox (which stops the
/// pod's containers first), RemovePodSandbox (stops and removes them), ...).
pub fn causes(event: Event) -> &'static [&'static str] {
    match event {
        Event::RunPodSandbox => &["RunPodSandbox"],
        Event::StopPodSandbox => &["StopPodSandbox", "RemovePodSandbox"],
        Event::RemovePodSandbox => &["RemovePodSandbox"],
        Event::CreateContainer
        | Event::PostCreateContainer
        | Event::ValidateContainerAdjustment => &["CreateContainer"],
        Event::StartContainer | Event::PostStartContainer => &["StartContainer"],
        Event::UpdateContainer | Event::PostUpdateContainer => &["UpdateContainerResources"],
        Event::StopContainer => &[
            "StopContainer",
            "RemoveContainer",
            "StopPodSandbox",
            "RemovePodSandbox",
        ],
        Event::RemoveContainer => &["RemoveContainer", "RemovePodSandbox"],
        Event::UpdatePodSandbox => &["UpdatePodSandboxResources"],
        Event::Unknown | Event::PostUpdatePodSandbox | Event::Last => &[],
    }
}

/// The CRI methods whose handler makes `hook`: none for a plugin's
/// lifecycle methods.
fn hook_causes(hook: &Hook) -> &'static [&'static str] {
    hook.event().map_or(&[], causes)
}

/// Does `call` name the pod or container of delivery `d`?
fn same_object(call: &CriCall, d: &HookSpan) -> bool {
    let (pod, ctr) = (d.call.pod.as_ref(), d.call.container.as_ref());
    let id_eq = |a: Option<&String>, b: Option<&str>| match (a, b) {
        (Some(a), Some(b)) => !b.is_empty() && a == b,
        _ => false,
    };
    if id_eq(call.container_id.as_ref(), ctr.map(|c| c.id.as_str())) {
        return true;
    }
    // A call on one container did not make another container's event, even
    // in the same pod (kubelet stops a pod's containers concurrently): the
    // pod's id matches only for calls that name no container.
    if call.container_id.is_some() && ctr.is_some_and(|c| !c.id.is_empty()) {
        return false;
    }
    if id_eq(call.sandbox_id.as_ref(), pod.map(|p| p.id.as_str())) {
        return true;
    }
    // RunPodSandbox learns its sandbox id only from its response; its
    // request names the pod by uid (and name, namespace).
    match (call.pod.as_ref(), pod) {
        (Some(a), Some(b)) => {
            !b.uid.is_empty() && a.uid == b.uid && a.name == b.name && a.namespace == b.namespace
        }
        _ => false,
    }
}

/// Can `call` have made `hook`: `None` if not; `Some(Some(m))` when the
/// method that makes it is `m` (its own, or its only candidate that makes
/// it when its method is unknown); `Some(None)` when several candidates
/// would.
#[allow(
    clippy::option_option,
    reason = "three answers: cannot, can by one method, can by several"
)]
fn cause_method(call: &CriCall, hook: &Hook) -> Option<Option<String>> {
    let causes = hook_causes(hook);
    match (&call.method, &call.identified) {
        (Some(m), _) => causes.contains(&m.as_str()).then(|| Some(m.clone())),
        (None, Identified::Unknown { candidates }) => {
            let fit: Vec<&String> = candidates
                .iter()
                .filter(|c| causes.contains(&c.as_str()))
                .collect();
            match fit.len() {
                0 => None,
                1 => Some(Some(fit[0].clone())),
                _ => Some(None),
            }
        }
        _ => None,
    }
}

/// Attaches NRI deliveries to CRI calls. Feed it in capture order; it
/// yields [`Correlated`] items as they settle.
#[derive(Default)]
pub struct Correlator {
    /// CRI calls waiting for the NRI calls they may contain.
    calls: Vec<CriCall>,
    /// Event deliveries waiting for the CRI call that may contain them.
    deliveries: Vec<HookSpan>,
}

impl Correlator {
    pub fn new() -> Self {
        Self::default()
    }

    /// A finished CRI call.
    pub fn on_cri(&mut self, call: CriCall) {
        self.calls.push(call);
    }

    /// A finished NRI call.
    pub fn on_nri(&mut self, span: HookSpan, out: &mut Vec<Correlated>) {
        let lifecycle = span.call.caller == Caller::Plugin
            || span.call.event.is_none()
            || hook_causes(&span.hook).is_empty();
        if lifecycle {
            out.push(Correlated::Uncaused {
                span,
                why: NoCause::PluginLifecycle,
            });
            return;
        }
        self.deliveries.push(span);
    }

    /// Capture time is now `now`; the CRI stage still has calls begun at
    /// `cri_oldest` and later unreported; the NRI stage still has event
    /// deliveries begun at `nri_open` and later unanswered. Release what has
    /// settled.
    pub fn advance(
        &mut self,
        now: u64,
        cri_oldest: Option<u64>,
        nri_open: Option<u64>,
        out: &mut Vec<Correlated>,
    ) {
        // CRI calls whose NRI calls are all in.
        let mut i = 0;
        while i < self.calls.len() {
            let end = end_of(&self.calls[i]);
            let settled =
                end.saturating_add(NRI_SETTLE_NS) <= now && nri_open.is_none_or(|o| o > end);
            if settled {
                let call = self.calls.remove(i);
                out.push(Correlated::Cri(self.claim(call)));
            } else {
                i += 1;
            }
        }
        // Deliveries no CRI call can claim any more: none held began before
        // them, and none unreported did.
        let held_oldest = self
            .calls
            .iter()
            .filter_map(|c| c.start.map(|t| t.mono_ns))
            .min();
        let oldest = match (held_oldest, cri_oldest) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let mut i = 0;
        while i < self.deliveries.len() {
            let d = &self.deliveries[i];
            let start = d.call.start.map_or(0, |t| t.mono_ns);
            let settled = oldest.is_none_or(|o| o > start)
                && end_ts(d.call.end, d.call.start).saturating_add(NRI_SETTLE_NS) <= now;
            if settled {
                let span = self.deliveries.remove(i);
                out.push(Correlated::Uncaused {
                    span,
                    why: NoCause::NoCriCallInFlight,
                });
            } else {
                i += 1;
            }
        }
    }

    /// The start of the oldest CRI call or delivery held (capture time).
    pub fn oldest_held(&self) -> Option<u64> {
        self.calls
            .iter()
            .filter_map(|c| c.start.or(c.end))
            .chain(
                self.deliveries
                    .iter()
                    .filter_map(|d| d.call.start.or(d.call.end)),
            )
            .map(|t| t.mono_ns)
            .min()
    }

    /// The capture ended: everything comes out.
    pub fn finish(&mut self, out: &mut Vec<Correlated>) {
        self.advance(u64::MAX, None, None, out);
    }

    /// Take the deliveries `call` made.
    fn claim(&mut self, mut call: CriCall) -> CriSpan {
        let (start, end) = (call.start.map_or(0, |t| t.mono_ns), end_of(&call));
        let mut hooks = Vec::new();
        let mut resolved: Option<(String, String)> = None;
        let mut conflict = false;
        let mut i = 0;
        while i < self.deliveries.len() {
            let d = &self.deliveries[i];
            let ds = d.call.start.map_or(0, |t| t.mono_ns);
            let inside = call.start.is_some() && ds >= start && ds <= end;
            let method = cause_method(&call, &d.hook);
            let take = inside && same_object(&call, d) && method.is_some();
            if take {
                if let (None, Some(Some(m))) = (&call.method, method) {
                    match &resolved {
                        None => resolved = Some((m, d.hook.to_string())),
                        // Two deliveries pointing at different methods:
                        // nothing is concluded.
                        Some((r, _)) if *r != m => conflict = true,
                        _ => {}
                    }
                }
                hooks.push(self.deliveries.remove(i));
            } else {
                i += 1;
            }
        }
        let resolved = resolved.filter(|_| !conflict);
        if let (Some((m, hook)), Identified::Unknown { candidates }) = (resolved, &call.identified)
        {
            call.identified = Identified::Inferred {
                evidence: format!(
                    "its messages fit {}; during it the runtime delivered NRI {hook} for the \
                     object it names, which only {m} of those makes",
                    candidates.join(" or ")
                ),
            };
            call.method = Some(m);
            call.service = Some("runtime.v1.RuntimeService".into());
        }
        hooks.sort_by_key(|h| h.call.start.map(|t| t.mono_ns));
        let nri_ns = hooks.iter().filter_map(|h| h.call.duration_ns).sum();
        let nri_permille = call
            .duration_ns
            .filter(|d| *d > 0 && !hooks.is_empty())
            .map(|d| {
                ((u128::from(nri_ns) * 1000) / u128::from(d)).min(u128::from(u32::MAX)) as u32
            });
        CriSpan {
            call,
            hooks,
            nri_ns,
            nri_permille,
        }
    }
}

fn end_ts(end: Option<Timestamp>, start: Option<Timestamp>) -> u64 {
    end.or(start).map_or(0, |t| t.mono_ns)
}

fn end_of(call: &CriCall) -> u64 {
    end_ts(call.end, call.start)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{decode::cri::message::PodMeta, model::nri_call::Outcome};

    use super::super::test_calls::*;

    fn run(c: &mut Correlator, until: u64) -> Vec<Correlated> {
        let mut out = Vec::new();
        c.advance(until * MS, None, None, &mut out);
        out
    }

    #[test]
    fn delivery_attached_to_its_cri_call() {
        let mut c = Correlator::new();
        let mut out = Vec::new();
        c.on_nri(
            hook(Some(Event::StopPodSandbox), "a", "s1", 10, 40),
            &mut out,
        );
        // A status poll of the same pod in flight at the same time claims
        // nothing; StopPodSandbox does.
        c.on_cri(cri(Some("PodSandboxStatus"), "s1", 5, 20));
        c.on_cri(cri(Some("StopPodSandbox"), "s1", 5, 50));
        out.extend(run(&mut c, 100));
        let spans: Vec<&CriSpan> = out
            .iter()
            .filter_map(|o| match o {
                Correlated::Cri(s) => Some(s),
                Correlated::Uncaused { .. } => None,
            })
            .collect();
        assert_eq!(spans.len(), 2);
        let stop = spans
            .iter()
            .find(|s| s.call.method.as_deref() == Some("StopPodSandbox"))
            .unwrap();
        assert_eq!(stop.hooks.len(), 1);
        assert_eq!(stop.nri_ns, 30 * MS);
        assert_eq!(stop.nri_permille, Some(666));
        let status = spans
            .iter()
            .find(|s| s.call.method.as_deref() == Some("PodSandboxStatus"))
            .unwrap();
        assert!(status.hooks.is_empty());
    }

    #[test]
    fn concurrent_calls_on_two_containers_of_a_pod_keep_their_own_events() {
        let stop = |ctr: &str, start, end| {
            let mut c = cri(Some("StopContainer"), "s1", start, end);
            c.container_id = Some(ctr.into());
            c
        };
        let delivery = |ctr: &str, start, end| {
            let mut h = hook(Some(Event::StopContainer), "a", "s1", start, end);
            h.call.container = Some(crate::model::nri_call::ContainerRef {
                id: ctr.into(),
                name: ctr.into(),
            });
            h
        };
        let mut c = Correlator::new();
        let mut out = Vec::new();
        // c2's stop overlaps c1's and ends first: it must not take c1's event.
        c.on_nri(delivery("c1", 1900, 1910), &mut out);
        c.on_nri(delivery("c2", 1950, 1960), &mut out);
        c.on_cri(stop("c1", 0, 2000));
        c.on_cri(stop("c2", 10, 1970));
        out.extend(run(&mut c, 3000));
        for o in &out {
            let Correlated::Cri(s) = o else {
                panic!("uncaused: {o:?}")
            };
            let own = s.call.container_id.as_deref();
            assert_eq!(s.hooks.len(), 1, "{own:?}");
            assert_eq!(
                s.hooks[0].call.container.as_ref().map(|k| k.id.as_str()),
                own
            );
        }
    }

    #[test]
    fn other_pod_or_no_call_is_uncaused() {
        let mut c = Correlator::new();
        let mut out = Vec::new();
        c.on_nri(
            hook(Some(Event::StopPodSandbox), "a", "s2", 10, 40),
            &mut out,
        );
        c.on_nri(hook(None, "a", "", 1, 2), &mut out);
        c.on_cri(cri(Some("StopPodSandbox"), "s1", 5, 50));
        out.extend(run(&mut c, 100));
        let whys: Vec<NoCause> = out
            .iter()
            .filter_map(|o| match o {
                Correlated::Uncaused { why, .. } => Some(*why),
                Correlated::Cri(_) => None,
            })
            .collect();
        assert_eq!(
            whys,
            vec![NoCause::PluginLifecycle, NoCause::NoCriCallInFlight]
        );
    }

    #[test]
    fn waits_for_cri_calls_still_unreported() {
        let mut c = Correlator::new();
        let mut out = Vec::new();
        c.on_nri(
            hook(Some(Event::RunPodSandbox), "a", "s1", 10, 40),
            &mut out,
        );
        // A CRI call begun at 5 ms is still in flight: the delivery waits.
        c.advance(1000 * MS, Some(5 * MS), None, &mut out);
        assert!(out.is_empty());
        let mut run_call = cri(Some("RunPodSandbox"), "s1", 5, 2000);
        run_call.sandbox_id = None;
        run_call.pod = Some(PodMeta {
            name: "p".into(),
            namespace: "ns".into(),
            uid: "u".into(),
            attempt: 0,
        });
        c.on_cri(run_call);
        c.advance(3000 * MS, None, None, &mut out);
        match &out[..] {
            [Correlated::Cri(s)] => assert_eq!(s.hooks.len(), 1, "matched by pod uid"),
            other => panic!("{other:?}"),
        }
    }

    /// A hook that hangs past the CRI call's end comes out of the NRI stage
    /// only at its deadline: the call waits for it while it is open.
    #[test]
    fn waits_for_deliveries_still_open() {
        let mut c = Correlator::new();
        let mut out = Vec::new();
        c.on_cri(cri(Some("StopPodSandbox"), "s1", 5, 5000));
        // The delivery begun at 40 ms is open well past the call's end.
        c.advance(5200 * MS, None, Some(40 * MS), &mut out);
        assert!(out.is_empty(), "{out:?}");
        let mut hung = hook(Some(Event::StopPodSandbox), "a", "s1", 40, 40);
        hung.call.end = None;
        hung.call.duration_ns = Some(4960 * MS);
        hung.call.outcome = Outcome::TimedOut;
        c.on_nri(hung, &mut out);
        c.advance(5200 * MS, None, None, &mut out);
        match &out[..] {
            [Correlated::Cri(s)] => {
                assert_eq!(s.hooks.len(), 1);
                assert_eq!(s.hooks[0].call.outcome, Outcome::TimedOut);
            }
            other => panic!("{other:?}"),
        }
        // An open delivery begun after a call's end does not hold it.
        c.on_cri(cri(Some("StopPodSandbox"), "s2", 6000, 6010));
        c.advance(6100 * MS, None, Some(6050 * MS), &mut out);
        assert_eq!(out.len(), 2, "{out:?}");
    }

    #[test]
    fn unknown_method_resolved_by_its_delivery() {
        let mut c = Correlator::new();
        let mut out = Vec::new();
        c.on_nri(
            hook(Some(Event::RemovePodSandbox), "a", "s1", 10, 20),
            &mut out,
        );
        let mut call = cri(None, "s1", 5, 30);
        call.identified = Identified::Unknown {
            candidates: vec!["StopPodSandbox".into(), "RemovePodSandbox".into()],
        };
        c.on_cri(call);
        out.extend(run(&mut c, 100));
        match &out[..] {
            [Correlated::Cri(s)] => {
                assert_eq!(s.call.method.as_deref(), Some("RemovePodSandbox"));
                assert!(matches!(s.call.identified, Identified::Inferred { .. }));
            }
            other => panic!("{other:?}"),
        }
    }
}
