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
//! labeled: plugin lifecycle (Configure, Synchronize...), the container's
//! own exit (a StopContainer delivery after a process of that container's
//! cgroup exited: containerd 2.x tells NRI of every exit, nri
//! `NotifyContainerExit`), the runtime undoing a sandbox whose
//! RunPodSandbox failed (containerd 2.x, after the client's deadline on
//! 2.3: [`NoCause::Rollback`]), or no CRI call in flight (other
//! runtime-internal causes, or CRI not traced).
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

use crate::model::{cri_call::CallMethod, observation::Observation};
use std::collections::{BTreeSet, HashMap, VecDeque};

use serde::Serialize;

use super::hook_latency::{Hook, HookSpan};
use crate::{
    basic_types::{ConnId, Timestamp},
    decode::cri::message::PodMeta,
    decode::{
        cri::message::{CriMethod, ObjectKind},
        nri::message::Event,
    },
    model::{
        cri_call::{CriCall, CriOutcome, Identified},
        nri_call::{Caller, PodRef},
    },
};

/// How long past a CRI call's end NRI calls inside it may still come out
/// of the NRI stage (it holds answered calls up to 5 ms for the plugin's
/// reply; `model::nri_call`).
pub(crate) const NRI_SETTLE_NS: u64 = 10_000_000;

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
    /// container: a runtime-internal cause (a restart...), or a CRI
    /// connection not traced.
    NoCriCallInFlight,
    /// A StopContainer delivery of a container that had already exited on
    /// its own, with no CRI call in flight: containerd's exit handler tells
    /// the plugins (containerd 1.7 `pkg/cri/nri` `WithContainerExit` at
    /// the task's delete, 2.x `internal/nri/nri.go` `NotifyContainerExit`;
    /// once per container: `needsStopping`). Known from the wire (the
    /// delivery's container is `stopped`, with its exit code from NRI
    /// 0.9 on) or from the kernel (a process of its cgroup exited before
    /// it: the record's `exit`).
    ContainerExited,
    /// No CRI call that makes this event was seen in flight, but the
    /// capture lost records while it may have been: the delivery began
    /// inside a hole of the capture ([`Loss::lost_from`] to
    /// [`Loss::lost_to`]), or within [`LOSS_STRADDLE_NS`] after one, or
    /// before the end of a CRI call whose request the hole took (its
    /// response came after it). Its cause may be a call the capture lost;
    /// nothing more can be said.
    ///
    /// [`Loss::lost_from`]: crate::capture::Loss::lost_from
    /// [`Loss::lost_to`]: crate::capture::Loss::lost_to
    CaptureLoss,
    /// A StopPodSandbox or RemovePodSandbox delivery of a sandbox whose
    /// RunPodSandbox failed (an error, or its client's deadline ran out),
    /// with no CRI call in flight for it: the runtime undoing the sandbox
    /// on its own. containerd 2.x tells the plugins StopPodSandbox and
    /// RemovePodSandbox when the NRI RunPodSandbox failed
    /// (internal/cri/nri/nri_api_linux.go `RunPodSandbox`), and
    /// RemovePodSandbox when a later step of the handler did
    /// (internal/cri/server/sandbox_run.go, its deferred cleanup). The
    /// handler runs on after the client gave up: containerd 2.3 passes the
    /// CRI deadline to the hook, so the hook fails with it and the undoing
    /// comes after the call ended on the wire. Kubelet never learned the
    /// sandbox's id (the call answered none), so none of its calls made
    /// it. The record's `rolls_back` is that RunPodSandbox.
    Rollback,
}

/// How long after a hole in the capture a delivery without a seen CRI
/// cause may still be one of a call whose request the hole took: CRI
/// calls that make NRI events end within seconds (a StopContainer waits
/// out its grace period, 2 s in the lab, 30 s by default in kubelet, but
/// it delivers STOP_CONTAINER first). Calls seen to end later (responses
/// without a request) extend the hole to their end.
pub(crate) const LOSS_STRADDLE_NS: u64 = 10_000_000_000;

/// The longest a call whose request a hole took may be seen to run after
/// it: kubelet's `runtimeRequestTimeout` (2 min by default) ends every CRI
/// call it makes.
const MAX_CALL_NS: u64 = 120_000_000_000;
/// Holes this close are one: the ring stayed full between the reader's
/// reports of them.
const HOLES_TOUCH_NS: u64 = 1_000_000;

/// Holes remembered (the newest).
const MAX_HOLES: usize = 64;

/// A process of a container's cgroup exiting, as the sandbox probes saw
/// it: the evidence of [`NoCause::ContainerExited`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ContainerExit {
    pub pid: u32,
    pub comm: String,
    /// The wait status (exit code << 8, or the signal), when the probe
    /// read it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<i32>,
    /// The cgroup it ran in (naming the container).
    pub cgroup: String,
    pub at: Timestamp,
}

/// Whether a cgroup path is the object's own: its last component names
/// the sandbox or container id (`.../<id>`, `.../cri-containerd-<id>.scope`,
/// `.../crio-<id>.scope`, CRI-O on cgroupfs `.../crio-<id>`, as containerd
/// and CRI-O name them with either cgroup driver). Not CRI-O's monitor
/// cgroup `crio-conmon-<id>` (`conmon_cgroup = "pod"`; CRI-O
/// internal/config/cgmgr/cgroupfs_linux.go), which also names the id: the
/// OCI runtime and its helpers run there, not the sandbox's program.
pub(crate) fn cgroup_names(cgroup: &str, id: &str) -> bool {
    let Some(last) = cgroup.rsplit('/').next() else {
        return false;
    };
    let last = last.strip_suffix(".scope").unwrap_or(last);
    if id.is_empty() || last.starts_with("crio-conmon-") {
        return false;
    }
    last == id || last.strip_suffix(id).is_some_and(|p| p.ends_with('-'))
}

/// What the correlator yields.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) enum Correlated {
    Cri(CriSpan),
    /// An observation passed on unchanged, in time order with the calls
    /// ([`Correlator::on_observed`]).
    Observed(Observation),
    Uncaused {
        span: HookSpan,
        why: NoCause,
        /// The exit that caused it ([`NoCause::ContainerExited`]).
        exit: Option<ContainerExit>,
        /// The RunPodSandbox it undoes ([`NoCause::Rollback`]).
        rolls_back: Option<FailedRun>,
    },
}

/// A RunPodSandbox that did not end OK: the evidence of
/// [`NoCause::Rollback`], naming the call as the record of its span does
/// (its connection and stream).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FailedRun {
    pub conn: ConnId,
    pub stream_id: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod: Option<PodMeta>,
    /// The sandbox its RunPodSandbox delivery named (the call itself
    /// answered none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sandbox_id: Option<String>,
    pub start: Option<Timestamp>,
    pub end: Option<Timestamp>,
    pub outcome: CriOutcome,
}

impl FailedRun {
    /// Whether `d` is of the sandbox this call made: the id its delivery
    /// named, else the pod (uid, name, namespace) its request named.
    fn made(&self, d: &HookSpan) -> bool {
        let Some(pod) = d.call.pod.as_ref() else {
            return false;
        };
        match (&self.sandbox_id, &self.pod) {
            (Some(id), _) => !pod.id.is_empty() && *id == pod.id,
            (None, Some(p)) => names_pod(p, pod),
            (None, None) => false,
        }
    }
}

/// Failed RunPodSandbox calls remembered (the newest), and how long after
/// one's end a delivery may be its undoing: kubelet's
/// `runtimeRequestTimeout` bounds a call, not the runtime's handler, which
/// undoes the sandbox as soon as its failed step returns (a hook's
/// timeout: 2 s by default, nri `DefaultPluginRequestTimeout`).
const MAX_FAILED_RUNS: usize = 1024;
const ROLLBACK_NS: u64 = MAX_CALL_NS;

/// CRI methods whose handler makes NRI event `event` (containerd 1.7
/// `internal/cri/server`: RunPodSandbox, StopPodSandbox (which stops the
/// pod's containers first), RemovePodSandbox (stops and removes them), ...).
pub fn causes(event: Event) -> &'static [CriMethod] {
    match event {
        Event::RunPodSandbox => &[CriMethod::RunPodSandbox],
        Event::StopPodSandbox => &[CriMethod::StopPodSandbox, CriMethod::RemovePodSandbox],
        Event::RemovePodSandbox => &[CriMethod::RemovePodSandbox],
        Event::CreateContainer
        | Event::PostCreateContainer
        | Event::ValidateContainerAdjustment => &[CriMethod::CreateContainer],
        Event::StartContainer | Event::PostStartContainer => &[CriMethod::StartContainer],
        Event::UpdateContainer | Event::PostUpdateContainer => {
            &[CriMethod::UpdateContainerResources]
        }
        Event::StopContainer => &[
            CriMethod::StopContainer,
            CriMethod::RemoveContainer,
            CriMethod::StopPodSandbox,
            CriMethod::RemovePodSandbox,
        ],
        Event::RemoveContainer => &[CriMethod::RemoveContainer, CriMethod::RemovePodSandbox],
        // containerd 2.3 internal/cri/server/sandbox_update_resources.go:
        // UpdatePodSandbox before the update, PostUpdatePodSandbox after.
        Event::UpdatePodSandbox | Event::PostUpdatePodSandbox => {
            &[CriMethod::UpdatePodSandboxResources]
        }
        Event::Unknown | Event::Last => &[],
    }
}

/// The CRI methods whose handler makes `hook`: none for a plugin's
/// lifecycle methods.
fn hook_causes(hook: &Hook) -> &'static [CriMethod] {
    hook.event().map_or(&[], causes)
}

/// Which object of delivery `d` the id of an unknown call's request is
/// (`CriCall::request_id`: the object predates the attach, so the CRI stage
/// could not tell): containerd ids are unique across sandboxes and
/// containers, so the one it equals is its kind.
fn request_id_kind(call: &CriCall, d: &HookSpan) -> Option<ObjectKind> {
    let id = call.request_id.as_deref().filter(|i| !i.is_empty())?;
    if d.call.container.as_ref().is_some_and(|c| c.id == id) {
        Some(ObjectKind::Container)
    } else if d.call.pod.as_ref().is_some_and(|p| p.id == id) {
        Some(ObjectKind::Sandbox)
    } else {
        None
    }
}

/// Does `call` name the pod or container of delivery `d`?
fn same_object(call: &CriCall, d: &HookSpan) -> bool {
    if request_id_kind(call, d).is_some() {
        return true;
    }
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
        (Some(a), Some(b)) => names_pod(a, b),
        _ => false,
    }
}

/// Whether a CRI request's pod metadata names the pod of an NRI delivery:
/// the same uid (not empty), name and namespace.
fn names_pod(meta: &PodMeta, pod: &PodRef) -> bool {
    !pod.uid.is_empty()
        && meta.uid == pod.uid
        && meta.name == pod.name
        && meta.namespace == pod.namespace
}

/// The methods `call` may be that make delivery `d`: its own method if it
/// makes it; when its method is unknown, those of its candidates that make
/// it (and, when its request's id is `d`'s pod or container, that name
/// that kind of object in their request). Empty: `call` did not make `d`.
fn cause_methods(call: &CriCall, d: &HookSpan) -> Vec<CriMethod> {
    let causes = hook_causes(&d.hook);
    match (&call.method, &call.identified) {
        (Some(m), _) => match m.cri() {
            Some(m) if causes.contains(&m) || undoes_create(call, d) => vec![m],
            _ => vec![],
        },
        (None, Identified::Unknown { candidates }) => {
            let kind = request_id_kind(call, d);
            candidates
                .iter()
                .copied()
                .filter(|c| causes.contains(c))
                .filter(|c| kind.is_none_or(|k| c.request_names() == Some(k)))
                .collect()
        }
        _ => vec![],
    }
}

/// Whether delivery `d` is a failed CreateContainer's undoing of its
/// container: containerd 2.x tells the plugins StopContainer and
/// RemoveContainer of the container it did not make, inside the call
/// (`internal/cri/server/container_create.go` defers
/// `nri.UndoCreateContainer` on error; seen on 2.3.7 when a validator
/// rejected the adjustments, the lab's `adjustment-rejected`).
/// The container is the one the request names (the pod is checked by
/// [`same_object`]; a failed call has no container id).
fn undoes_create(call: &CriCall, d: &HookSpan) -> bool {
    call.is(CriMethod::CreateContainer)
        && !call.outcome.is_ok()
        && matches!(
            d.hook.event(),
            Some(Event::StopContainer | Event::RemoveContainer)
        )
        && match (&call.container, &d.call.container) {
            (Some(meta), Some(c)) => meta.name == c.name,
            _ => false,
        }
}

/// NRI events that containerd 1.7 delivers for an object only while its
/// NRI state says it still needs stopping or removal (pkg/nri/nri.go
/// `needsStopping` / `needsRemoval`), a state a successful removal deletes
/// (`setState(id, Removed)` in `RemovePodSandbox` / `RemoveContainer`,
/// reached on every successful path of the CRI handlers in
/// pkg/cri/server/sandbox_remove.go and container_remove.go that found the
/// object). One of them begun after a call ended proves that the call did
/// not remove that object.
fn proves_not_removed(event: Event) -> Option<ObjectKind> {
    match event {
        Event::StopPodSandbox | Event::RemovePodSandbox => Some(ObjectKind::Sandbox),
        Event::StopContainer | Event::RemoveContainer => Some(ObjectKind::Container),
        _ => None,
    }
}

/// Most objects whose last stop/removal delivery is remembered; past it
/// the older half is forgotten (a call then stays unknown, never wrong).
const MAX_LAST_DELIVERY: usize = 16384;

/// Exits of container processes remembered (the newest), and for how long
/// before a StopContainer delivery one may be its cause.
const MAX_EXITS: usize = 4096;
const EXIT_CAUSE_NS: u64 = 60_000_000_000;

/// Attaches NRI deliveries to CRI calls. Feed it in capture order; it
/// yields [`Correlated`] items as they settle.
#[derive(Default)]
pub(crate) struct Correlator {
    /// CRI calls waiting for the NRI calls they may contain, and other
    /// observations of the CRI stage waiting their turn: each leaves in the
    /// order of its time (a call's end, an observation's), whatever clocks
    /// the capture brought.
    calls: Vec<Held>,
    /// Event deliveries waiting for the CRI call that may contain them.
    deliveries: Vec<HookSpan>,
    /// (kind, object id) -> start of the latest delivery of an event that
    /// proves the object was not removed before it ([`proves_not_removed`]).
    last_delivery: HashMap<(ObjectKind, String), u64>,
    /// Recent exits of processes in a cgroup, oldest first.
    exits: VecDeque<ContainerExit>,
    /// Holes of the capture, (from, to) in capture time, oldest first:
    /// a delivery there without a cause may be of a lost call.
    holes: VecDeque<(u64, u64)>,
    /// RunPodSandbox calls that did not end OK, oldest first: a later stop
    /// or removal of their sandbox with no call in flight is its undoing.
    failed_runs: VecDeque<FailedRun>,
}

impl Correlator {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// A finished CRI call.
    pub(crate) fn on_cri(&mut self, call: CriCall) {
        // A response whose request a hole took: that call ran until here,
        // so a delivery up to its end may be its.
        if let (None, Some(end)) = (call.start, call.end) {
            if let Some(h) = self
                .holes
                .iter_mut()
                .rev()
                .find(|h| h.0 <= end.mono_ns && end.mono_ns <= h.1.saturating_add(MAX_CALL_NS))
            {
                h.1 = h.1.max(end.mono_ns);
            }
        }
        self.calls.push(Held::Call(call));
    }

    /// An observation of the CRI stage to pass on in time order with the
    /// calls (a teardown call made, a connection closed): once the calls
    /// that ended before it are passed on.
    pub(crate) fn on_observed(&mut self, o: Observation) {
        self.calls.push(Held::Observed(o));
    }

    /// The capture lost records between capture times `from` and `to`.
    pub(crate) fn on_loss(&mut self, from: u64, to: u64) {
        if self.holes.len() >= MAX_HOLES {
            self.holes.pop_front();
        }
        self.holes.push_back((from, to.max(from)));
    }

    /// Until when `call` may hold deliveries (capture time): its end. A
    /// call whose request was seen but not its end was in flight from its
    /// start on: when a hole of the capture cut it (its response lost in
    /// there, or undecodable after it), until the end of that hole (of
    /// the run of holes that touch); without a hole, it was still open
    /// when the capture ended.
    fn holds_until(&self, call: &CriCall) -> u64 {
        let (Some(start), None) = (call.start, call.end) else {
            return end_of(call);
        };
        let mut holes = self.holes.iter().skip_while(|h| h.1 < start.mono_ns);
        let Some(&(_, mut to)) = holes.next() else {
            return u64::MAX;
        };
        for &(from, next_to) in holes {
            if from > to.saturating_add(HOLES_TOUCH_NS) {
                break;
            }
            to = to.max(next_to);
        }
        to
    }

    /// Whether a delivery begun at `start` may be of a call a hole took.
    fn in_hole(&self, start: u64) -> bool {
        self.holes
            .iter()
            .any(|&(from, to)| from <= start && start <= to.saturating_add(LOSS_STRADDLE_NS))
    }

    /// A process exited in a cgroup: a later StopContainer delivery of
    /// the container that cgroup names, with no CRI call in flight, is
    /// the exit's.
    pub(crate) fn on_exit(&mut self, exit: ContainerExit) {
        if self.exits.len() >= MAX_EXITS {
            self.exits.pop_front();
        }
        self.exits.push_back(exit);
    }

    /// Why a StopContainer delivery without a CRI call came: the
    /// container's own exit when the wire says it had stopped or the
    /// kernel saw a process of its cgroup exit before the delivery
    /// started (that exit, the latest, is the evidence).
    fn exit_cause(&self, span: &HookSpan) -> (NoCause, Option<ContainerExit>) {
        let none = (NoCause::NoCriCallInFlight, None);
        let Some(c) = span.call.container.as_ref() else {
            return none;
        };
        if span.hook.event() != Some(Event::StopContainer) {
            return none;
        }
        let start = span.call.start.map_or(0, |t| t.mono_ns);
        let exit = self
            .exits
            .iter()
            .rev()
            .find(|x| {
                x.at.mono_ns <= start
                    && x.at.mono_ns + EXIT_CAUSE_NS >= start
                    && cgroup_names(&x.cgroup, &c.id)
            })
            .cloned();
        if exit.is_some() || c.state.as_deref() == Some("stopped") {
            (NoCause::ContainerExited, exit)
        } else {
            none
        }
    }

    /// Why a delivery no CRI call claimed came: the container's exit
    /// ([`Self::exit_cause`]), else a hole of the capture around it, else
    /// no call in flight.
    fn no_cause(&self, span: HookSpan) -> Correlated {
        let (why, exit) = self.exit_cause(&span);
        let start = span.call.start.or(span.call.end).map_or(0, |t| t.mono_ns);
        let (why, rolls_back) = if why != NoCause::NoCriCallInFlight {
            (why, None)
        } else if let Some(run) = self.rolled_back(&span, start) {
            (NoCause::Rollback, Some(run))
        } else if self.in_hole(start) {
            (NoCause::CaptureLoss, None)
        } else {
            (why, None)
        };
        Correlated::Uncaused {
            span,
            why,
            exit,
            rolls_back,
        }
    }

    /// The failed RunPodSandbox that delivery `span`, begun at `start`,
    /// undoes: a stop or removal of the sandbox it made, begun during it
    /// or within [`ROLLBACK_NS`] after its end (the newest such call).
    fn rolled_back(&self, span: &HookSpan, start: u64) -> Option<FailedRun> {
        if !matches!(
            span.hook.event(),
            Some(Event::StopPodSandbox | Event::RemovePodSandbox)
        ) {
            return None;
        }
        self.failed_runs
            .iter()
            .rev()
            .find(|r| {
                let from = r.start.or(r.end).map_or(0, |t| t.mono_ns);
                let to = r
                    .end
                    .map_or(u64::MAX, |t| t.mono_ns.saturating_add(ROLLBACK_NS));
                from <= start && start <= to && r.made(span)
            })
            .cloned()
    }

    /// A finished NRI call.
    pub(crate) fn on_nri(&mut self, span: HookSpan, out: &mut Vec<Correlated>) {
        let lifecycle = span.call.caller == Caller::Plugin
            || span.call.event.is_none()
            || hook_causes(&span.hook).is_empty();
        if lifecycle {
            out.push(Correlated::Uncaused {
                span,
                why: NoCause::PluginLifecycle,
                exit: None,
                rolls_back: None,
            });
            return;
        }
        self.remember(&span);
        self.deliveries.push(span);
    }

    fn remember(&mut self, span: &HookSpan) {
        let Some(kind) = span.hook.event().and_then(proves_not_removed) else {
            return;
        };
        let id = match kind {
            ObjectKind::Sandbox => span.call.pod.as_ref().map(|p| p.id.clone()),
            ObjectKind::Container => span.call.container.as_ref().map(|c| c.id.clone()),
        };
        let (Some(id), Some(start)) = (id.filter(|i| !i.is_empty()), span.call.start) else {
            return;
        };
        let t = self.last_delivery.entry((kind, id)).or_insert(0);
        *t = (*t).max(start.mono_ns);
        if self.last_delivery.len() > MAX_LAST_DELIVERY {
            let mut times: Vec<u64> = self.last_delivery.values().copied().collect();
            times.sort_unstable();
            let cut = times[times.len() / 2];
            self.last_delivery.retain(|_, t| *t > cut);
        }
    }

    /// Capture time is now `now`; the CRI stage still has calls begun at
    /// `cri_oldest` and later unreported; the NRI stage still has event
    /// deliveries begun at `nri_open` and later unanswered. Release what has
    /// settled.
    pub(crate) fn advance(
        &mut self,
        now: u64,
        cri_oldest: Option<u64>,
        nri_open: Option<u64>,
        out: &mut Vec<Correlated>,
    ) {
        // CRI calls whose NRI calls are all in.
        let mut i = 0;
        while i < self.calls.len() {
            let end = self.calls[i].at();
            let settled =
                end.saturating_add(NRI_SETTLE_NS) <= now && nri_open.is_none_or(|o| o > end);
            if settled {
                match self.calls.remove(i) {
                    Held::Call(call) => out.push(Correlated::Cri(self.claim(call))),
                    Held::Observed(o) => out.push(Correlated::Observed(o)),
                }
            } else {
                i += 1;
            }
        }
        // Deliveries no CRI call can claim any more: none held began before
        // them, and none unreported did.
        let held_oldest = self
            .calls
            .iter()
            .filter_map(Held::ended)
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
                out.push(self.no_cause(span));
            } else {
                i += 1;
            }
        }
    }

    /// The start of the oldest CRI call or delivery held (capture time).
    pub(crate) fn oldest_held(&self) -> Option<u64> {
        self.calls
            .iter()
            .filter_map(Held::ended)
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
    pub(crate) fn finish(&mut self, out: &mut Vec<Correlated>) {
        self.advance(u64::MAX, None, None, out);
    }

    /// Take the deliveries `call` made.
    fn claim(&mut self, mut call: CriCall) -> CriSpan {
        let (start, end) = (call.start.map_or(0, |t| t.mono_ns), self.holds_until(&call));
        let mut hooks = Vec::new();
        // For an unknown call: the methods that make every delivery it
        // holds, and what it was seen to name.
        let mut fit: Option<Vec<CriMethod>> = None;
        let mut named: Option<(ObjectKind, String, Option<String>)> = None;
        let mut i = 0;
        while i < self.deliveries.len() {
            let d = &self.deliveries[i];
            let ds = d.call.start.map_or(0, |t| t.mono_ns);
            let inside = call.start.is_some() && ds >= start && ds <= end;
            let methods = if inside && same_object(&call, d) {
                cause_methods(&call, d)
            } else {
                vec![]
            };
            if methods.is_empty() {
                i += 1;
                continue;
            }
            if call.method.is_none() {
                if let Some(kind) = request_id_kind(&call, d) {
                    let pod = d.call.pod.as_ref().map(|p| p.id.clone());
                    let id = call.request_id.clone().unwrap_or_default();
                    named = Some((kind, id, pod.filter(|p| !p.is_empty())));
                }
                fit = Some(match fit {
                    None => methods,
                    Some(f) => f.into_iter().filter(|m| methods.contains(m)).collect(),
                });
            }
            hooks.push(self.deliveries.remove(i));
        }
        hooks.sort_by_key(|h| h.call.start.map(|t| t.mono_ns));
        if let Some((kind, id, pod)) = named {
            // The deliveries say which object the request's id is.
            match kind {
                ObjectKind::Sandbox => call.sandbox_id = Some(id),
                ObjectKind::Container => {
                    call.container_id = Some(id);
                    if call.sandbox_id.is_none() {
                        call.sandbox_id = pod;
                    }
                }
            }
            call.request_id = None;
        }
        if let (Some(fit), Identified::Unknown { candidates }) = (fit, &call.identified) {
            if let Some((m, why)) = self.decide(&call, &hooks, &fit) {
                call.identified = Identified::Inferred {
                    evidence: format!(
                        "its messages fit {}; {why}",
                        CriMethod::join(candidates, " or ")
                    ),
                };
                call.method = Some(CallMethod::Cri(m));
                call.service = Some("runtime.v1.RuntimeService".into());
            }
        }
        if call.is(CriMethod::RunPodSandbox) && !call.outcome.is_ok() {
            self.remember_failed_run(&call, &hooks);
        }
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

    /// A RunPodSandbox that did not end OK, with the deliveries it made:
    /// its sandbox's id from its RunPodSandbox delivery, if any.
    fn remember_failed_run(&mut self, call: &CriCall, hooks: &[HookSpan]) {
        let sandbox_id = hooks
            .iter()
            .filter(|h| h.hook.event() == Some(Event::RunPodSandbox))
            .find_map(|h| h.call.pod.as_ref().map(|p| p.id.clone()))
            .filter(|id| !id.is_empty());
        if self.failed_runs.len() >= MAX_FAILED_RUNS {
            self.failed_runs.pop_front();
        }
        self.failed_runs.push_back(FailedRun {
            conn: call.conn,
            stream_id: call.stream_id,
            pod: call.pod.clone(),
            sandbox_id,
            start: call.start,
            end: call.end,
            outcome: call.outcome.clone(),
        });
    }

    /// The method of unknown `call` from the deliveries it holds (`hooks`,
    /// in start order), of which `fit` are the methods that make them all:
    /// the method and the evidence, or `None` when they do not decide.
    fn decide(
        &self,
        call: &CriCall,
        hooks: &[HookSpan],
        fit: &[CriMethod],
    ) -> Option<(CriMethod, String)> {
        let object = |kind: ObjectKind| -> &'static str {
            match kind {
                ObjectKind::Sandbox => "pod sandbox",
                ObjectKind::Container => "container",
            }
        };
        let what: Vec<String> = hooks
            .iter()
            .map(|h| h.hook.to_string())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        if let [m] = fit {
            return Some((
                *m,
                format!(
                    "during it the runtime delivered NRI {} for the object it names, which only {} of those makes",
                    what.join(", "),
                    m.name()
                ),
            ));
        }
        // Stop or remove: a successful removal ends the object's NRI
        // events, so one delivered after the call ended rules it out.
        let pair = |a, b| fit.len() == 2 && fit.contains(&a) && fit.contains(&b);
        let (stop, remove, kind) = if pair(CriMethod::StopPodSandbox, CriMethod::RemovePodSandbox) {
            (
                CriMethod::StopPodSandbox,
                CriMethod::RemovePodSandbox,
                ObjectKind::Sandbox,
            )
        } else if pair(CriMethod::StopContainer, CriMethod::RemoveContainer) {
            (
                CriMethod::StopContainer,
                CriMethod::RemoveContainer,
                ObjectKind::Container,
            )
        } else {
            return None;
        };
        if !call.outcome.is_ok() {
            return None;
        }
        let id = match kind {
            ObjectKind::Sandbox => call.sandbox_id.clone(),
            ObjectKind::Container => call.container_id.clone(),
        }?;
        let later = self.last_delivery.get(&(kind, id))?;
        let end = call.end?.mono_ns;
        (*later > end).then(|| {
            (
                stop,
                format!(
                    "during it the runtime delivered NRI {} for the {o} it names, which {stop} \
                     and {remove} make; the runtime delivered a stop or removal event for that \
                     {o} after it ended, which containerd does not after a successful {remove}",
                    what.join(", "),
                    o = object(kind),
                    stop = stop.name(),
                    remove = remove.name(),
                ),
            )
        })
    }
}

/// A CRI call the correlator holds.
#[derive(Debug, Clone)]
enum Held {
    /// Ended: waits for the NRI calls it may contain.
    Call(CriCall),
    /// Waits its turn ([`Correlator::on_observed`]).
    Observed(Observation),
}

impl Held {
    /// Its place in time: a call's end, an observation's time.
    fn at(&self) -> u64 {
        match self {
            Held::Call(c) => end_of(c),
            Held::Observed(o) => o.ts().map_or(0, |t| t.mono_ns),
        }
    }

    /// The call (an observation holds no delivery back).
    fn ended(&self) -> Option<&CriCall> {
        match self {
            Held::Call(c) => Some(c),
            Held::Observed(_) => None,
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
mod tests;
