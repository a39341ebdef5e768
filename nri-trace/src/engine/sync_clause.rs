//! The Synchronize clause of the conformance table: a plugin that
//! registers is told of every pod that exists, in its Synchronize, or, for
//! a pod whose RunPodSandbox was still in flight, by that RunPodSandbox.
//!
//! NRI hands a registering plugin the runtime's pods and containers in
//! Synchronize (nri pkg/adaptation `syncPlugin`); a pod created while the
//! plugin registers is in neither the list nor its RunPodSandbox
//! deliveries when the runtime does not hold the registration back while
//! CRI calls are in flight: the race of nri issue 63
//! (nri-63-synchronize-race.txt), which containerd 1.7 has and 2.1 closes.
//! Per pod and registration, from the wire alone:
//!
//! - the pods that exist when the plugin's first Synchronize starts: those
//!   whose RunPodSandbox returned OK before it, with no StopPodSandbox or
//!   RemovePodSandbox begun before it, and those the runtime's state listed
//!   as ready when nri-trace attached (`CriState`, the late-attach case);
//!   each must be in the pod ids the Synchronize lists (every part of a
//!   split one, on the same connection);
//! - the pods whose RunPodSandbox began before the Synchronize and returned
//!   OK after it: listed, or their RunPodSandbox delivered to the plugin.
//!
//! The pod's containers are part of its case: each that exists when the
//! Synchronize starts (its CreateContainer returned OK before it, or the
//! runtime's state at attach listed it created or running), with no
//! StopContainer or RemoveContainer begun and no StopContainer delivered
//! (an exit) before it, must be among the container ids it lists; one
//! whose CreateContainer was in flight must be listed or have its
//! CREATE_CONTAINER delivered to the plugin. The case holds only when the
//! pod and all those containers were told.
//!
//! A pod stopped but not removed is not decided (whether a runtime lists
//! it is not the clause), nor a pod whose RunPodSandbox is not seen to
//! return. Decisions are by timestamps, not by the order records settle,
//! so a replay decides as the live run did. The state is bounded: recent
//! pods and registrations only.

use crate::model::cri_call::CriMethod;
use crate::model::nri_call::NriMethod;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

use serde::Serialize;

use super::{
    contract::split_synchronize_reply::split_reply_detail, correlate::CriSpan,
    hook_latency::HookSpan,
};
use crate::{
    basic_types::{ConnId, Timestamp},
    capture::cri_state::CriState,
    decode::nri::message::Event,
};

/// The clause's id.
pub const SYNCHRONIZE_TELLS_EXISTING_PODS: &str = "synchronize-tells-existing-pods";

/// Pods and containers remembered (the newest), and registrations.
const MAX_PODS: usize = 16384;
const MAX_CONTAINERS: usize = 65536;
const MAX_REGISTRATIONS: usize = 1024;
/// Synchronize calls of one connection this close to its first one are
/// parts of the same (split) Synchronize.
const SPLIT_WINDOW_NS: u64 = 10_000_000_000;

/// The wire's side of one case of the clause.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SyncStep {
    /// Pods the plugin's Synchronize listed.
    pub listed: u64,
    /// When the pod's RunPodSandbox returned; `None` for a pod the
    /// runtime's state listed when nri-trace attached.
    pub pod_ready: Option<Timestamp>,
    /// How the plugin was told of the pod: `listed` (in its Synchronize),
    /// `run_pod_sandbox` (its RunPodSandbox, in flight at the
    /// registration, was delivered to the plugin) or `not_told`.
    pub told: &'static str,
    /// The pod's containers that existed (decided with it).
    pub containers: u64,
    /// Those of them the plugin was not told of (names, or ids when the
    /// name is not known).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub containers_not_told: Vec<String>,
}

/// One pod as the clause knows it.
struct Pod {
    label: String,
    /// RunPodSandbox's start and end (`None`: from the runtime's state).
    run: Option<(Timestamp, Timestamp)>,
    /// Plugins (labels) its RunPodSandbox was delivered to.
    told: BTreeSet<String>,
    /// When its StopPodSandbox or RemovePodSandbox began.
    stopping: Option<Timestamp>,
}

/// One container as the clause knows it.
struct Ctr {
    /// Its pod's sandbox id.
    pod: String,
    label: String,
    /// CreateContainer's start and end (`None`: from the runtime's state).
    create: Option<(Timestamp, Timestamp)>,
    /// Plugins (labels) its CreateContainer was delivered to.
    told: BTreeSet<String>,
    /// When it began to go: its StopContainer or RemoveContainer, or a
    /// StopContainer delivery (an exit).
    stopping: Option<Timestamp>,
}

/// The containers remembered (the newest [`MAX_CONTAINERS`]), by id and
/// by pod: a pod's case reads its own containers, not every container.
#[derive(Default)]
struct Containers {
    by_id: BTreeMap<String, Ctr>,
    by_pod: BTreeMap<String, BTreeSet<String>>,
    order: VecDeque<String>,
}

impl Containers {
    fn contains(&self, id: &str) -> bool {
        self.by_id.contains_key(id)
    }

    fn get_mut(&mut self, id: &str) -> Option<&mut Ctr> {
        self.by_id.get_mut(id)
    }

    /// Pod `pod`'s containers, by id.
    fn of_pod<'a>(&'a self, pod: &str) -> impl Iterator<Item = (&'a String, &'a Ctr)> {
        self.by_pod
            .get(pod)
            .into_iter()
            .flatten()
            .filter_map(|id| self.by_id.get_key_value(id))
    }

    fn remember(&mut self, id: String, c: Ctr) {
        if !self.by_id.contains_key(&id) {
            if self.order.len() >= MAX_CONTAINERS {
                if let Some(old) = self.order.pop_front() {
                    self.forget(&old);
                }
            }
            self.order.push_back(id.clone());
        }
        self.forget(&id);
        self.by_pod
            .entry(c.pod.clone())
            .or_default()
            .insert(id.clone());
        self.by_id.insert(id, c);
    }

    /// Drop `id` from both maps (not from `order`).
    fn forget(&mut self, id: &str) {
        let Some(old) = self.by_id.remove(id) else {
            return;
        };
        if let Some(ids) = self.by_pod.get_mut(&old.pod) {
            ids.remove(id);
            if ids.is_empty() {
                self.by_pod.remove(&old.pod);
            }
        }
    }
}

/// One plugin's registration: its (first) Synchronize.
struct Registration {
    conn: ConnId,
    plugin: String,
    start: Timestamp,
    listed: BTreeSet<String>,
    listed_containers: BTreeSet<String>,
    /// Still open to further parts of a split Synchronize: its pods are
    /// decided once it closes (a later part may list one an earlier part
    /// did not), provisionally until then ([`SyncClause::pending`]).
    open: bool,
    /// Pods decided for it.
    decided: BTreeSet<String>,
}

impl Registration {
    /// The containers of pod `id` decided with it: (how many existed, the
    /// labels of those the plugin was not told of).
    fn containers_for(&self, id: &str, ctrs: &Containers) -> (u64, Vec<String>) {
        let at = self.start.mono_ns;
        let mut existed = 0;
        let mut not_told = Vec::new();
        for (cid, c) in ctrs.of_pod(id) {
            if c.stopping.is_some_and(|t| t.mono_ns < at) {
                continue;
            }
            let told = self.listed_containers.contains(cid)
                || match c.create {
                    None => false,
                    Some((_, end)) if end.mono_ns < at => false,
                    Some((start, _)) if start.mono_ns < at => c.told.contains(&self.plugin),
                    // Made after the registration: ordinary delivery.
                    Some(_) => continue,
                };
            existed += 1;
            if !told {
                not_told.push(c.label.clone());
            }
        }
        (existed, not_told)
    }

    /// The case of pod `id` for this registration; `None` when it is not
    /// decidable (made after it, or stopping before it).
    fn case_for(&self, id: &str, p: &Pod, ctrs: &Containers) -> Option<SyncCase> {
        let at = self.start.mono_ns;
        if p.stopping.is_some_and(|t| t.mono_ns < at) {
            return None;
        }
        let listed = self.listed.contains(id);
        let listed_or = |otherwise| if listed { "listed" } else { otherwise };
        let (told, pod_ready) = match p.run {
            // Existed from before the trace, or returned before the
            // registration: the list must have it.
            None => (listed_or("not_told"), None),
            Some((_, end)) if end.mono_ns < at => (listed_or("not_told"), Some(end)),
            // In flight at the registration: listed, or told by its
            // RunPodSandbox.
            Some((start, end)) if start.mono_ns < at => {
                let by_run = if p.told.contains(&self.plugin) {
                    "run_pod_sandbox"
                } else {
                    "not_told"
                };
                (listed_or(by_run), Some(end))
            }
            // Made after the registration: ordinary delivery.
            Some(_) => return None,
        };
        let (containers, containers_not_told) = self.containers_for(id, ctrs);
        Some(SyncCase {
            pod: p.label.clone(),
            sandbox_id: id.to_string(),
            plugin: self.plugin.clone(),
            delivered: self.start,
            step: SyncStep {
                listed: self.listed.len() as u64,
                pod_ready,
                told,
                containers,
                containers_not_told,
            },
        })
    }
}

/// The plugins (labels) `s`'s `hook` was delivered to.
fn plugins_told(s: &CriSpan, hook: &str) -> BTreeSet<String> {
    s.hooks
        .iter()
        .filter(|h| h.hook.as_str() == hook)
        .map(|h| h.call.plugin.label())
        .collect()
}

/// A decided case: held or not, and its parts (the conformance table
/// makes the [`super::conformance::ClauseCase`]).
pub struct SyncCase {
    pub pod: String,
    pub sandbox_id: String,
    pub plugin: String,
    pub delivered: Timestamp,
    pub step: SyncStep,
}

impl SyncCase {
    /// The plugin was told of the pod, one way or the other, and of each
    /// of its containers.
    pub fn held(&self) -> bool {
        self.step.told != "not_told" && self.step.containers_not_told.is_empty()
    }
}

#[derive(Default)]
pub(crate) struct SyncClause {
    pods: BTreeMap<String, Pod>,
    pod_order: VecDeque<String>,
    containers: Containers,
    registrations: VecDeque<Registration>,
}

impl SyncClause {
    /// The runtime's state at attach: its ready pods exist (from before).
    pub(crate) fn on_state(&mut self, s: &CriState) {
        for c in s
            .containers
            .iter()
            .filter(|c| c.state == "created" || c.state == "running")
        {
            if !self.containers.contains(&c.id) {
                self.containers.remember(
                    c.id.clone(),
                    Ctr {
                        pod: c.sandbox_id.clone(),
                        label: c.name.clone(),
                        create: None,
                        told: BTreeSet::new(),
                        stopping: None,
                    },
                );
            }
        }
        for p in s.pods.iter().filter(|p| p.state == "ready") {
            if !self.pods.contains_key(&p.id) {
                self.remember(
                    p.id.clone(),
                    Pod {
                        label: p.to_string(),
                        run: None,
                        told: BTreeSet::new(),
                        stopping: None,
                    },
                );
            }
        }
    }

    /// A CRI span: RunPodSandbox makes a pod, StopPodSandbox and
    /// RemovePodSandbox end it. A RunPodSandbox that settles after a
    /// registration closed is decided for it then.
    pub(crate) fn on_cri_span(&mut self, s: &CriSpan, out: &mut Vec<SyncCase>) {
        self.on_container_span(s);
        let (Some(id), Some(start)) = (s.call.sandbox_id.as_deref(), s.call.start) else {
            return;
        };
        self.close_before(s.call.end.unwrap_or(start), out);
        if id.is_empty() {
            return;
        }
        match s.call.cri_method() {
            Some(CriMethod::RunPodSandbox) => {
                let Some(end) = s.call.end.filter(|_| s.call.outcome.is_ok()) else {
                    return;
                };
                let pod = Pod {
                    label: s
                        .call
                        .pod
                        .as_ref()
                        .map_or_else(|| id.to_string(), ToString::to_string),
                    run: Some((start, end)),
                    told: plugins_told(s, "RUN_POD_SANDBOX"),
                    stopping: None,
                };
                self.remember(id.to_string(), pod);
                for i in 0..self.registrations.len() {
                    if !self.registrations[i].open {
                        self.decide(i, id, out);
                    }
                }
            }
            Some(CriMethod::StopPodSandbox | CriMethod::RemovePodSandbox) => {
                if let Some(p) = self.pods.get_mut(id) {
                    if p.stopping.is_none_or(|t| start.mono_ns < t.mono_ns) {
                        p.stopping = Some(start);
                    }
                }
            }
            _ => {}
        }
    }

    /// A container's CRI span: CreateContainer makes it (decided with its
    /// pod), StopContainer and RemoveContainer end it.
    fn on_container_span(&mut self, s: &CriSpan) {
        let (Some(cid), Some(start)) = (s.call.container_id.as_deref(), s.call.start) else {
            return;
        };
        match s.call.cri_method() {
            Some(CriMethod::CreateContainer) => {
                let (Some(end), Some(pod)) = (
                    s.call.end.filter(|_| s.call.outcome.is_ok()),
                    s.call.sandbox_id.clone(),
                ) else {
                    return;
                };
                let ctr = Ctr {
                    pod,
                    label: s
                        .call
                        .container
                        .as_ref()
                        .map_or_else(|| cid.to_string(), |c| c.name.clone()),
                    create: Some((start, end)),
                    told: plugins_told(s, "CREATE_CONTAINER"),
                    stopping: None,
                };
                self.containers.remember(cid.to_string(), ctr);
            }
            Some(CriMethod::StopContainer | CriMethod::RemoveContainer) => {
                self.container_stopping(cid, start)
            }
            _ => {}
        }
    }

    fn container_stopping(&mut self, id: &str, at: Timestamp) {
        if let Some(c) = self.containers.get_mut(id) {
            if c.stopping.is_none_or(|t| at.mono_ns < t.mono_ns) {
                c.stopping = Some(at);
            }
        }
    }

    /// A delivery: a Synchronize opens a registration (or is a further
    /// part of one); anything else on that connection closes it.
    pub(crate) fn on_hook(&mut self, h: &HookSpan, out: &mut Vec<SyncCase>) {
        let Some(start) = h.call.start else { return };
        self.close_before(start, out);
        let sync = h.call.method == Some(NriMethod::Synchronize);
        let same =
            |r: &Registration| r.open && r.conn == h.call.conn && r.start.mono_ns <= start.mono_ns;
        // A StopContainer with no CRI call is the runtime telling of an
        // exit (containerd 2.x, CRI-O): the container is going.
        if let (Some(Event::StopContainer), Some(c)) = (h.call.event, &h.call.container) {
            self.container_stopping(&c.id, start);
        }
        if !sync {
            let closing: Vec<usize> = (0..self.registrations.len())
                .filter(|&i| same(&self.registrations[i]))
                .collect();
            for i in closing {
                self.close(i, out);
            }
            return;
        }
        if h.call.partial {
            return;
        }
        if split_reply_detail(&h.call).is_some() {
            // The plugin answered a split part against the protocol: the
            // runtime closes it and its registration fails
            // (contract/split_synchronize_reply.rs), so no pod is decided for it.
            self.registrations.retain(|r| !same(r));
            return;
        }
        if let Some(r) = self.registrations.iter_mut().find(|r| same(r)) {
            r.listed.extend(h.call.synchronized_pods.iter().cloned());
            r.listed_containers
                .extend(h.call.synchronized_containers.iter().cloned());
            return;
        }
        if self.registrations.len() >= MAX_REGISTRATIONS {
            self.registrations.pop_front();
        }
        self.registrations.push_back(Registration {
            conn: h.call.conn,
            plugin: h.call.plugin.label(),
            start,
            listed: h.call.synchronized_pods.iter().cloned().collect(),
            listed_containers: h.call.synchronized_containers.iter().cloned().collect(),
            open: true,
            decided: BTreeSet::new(),
        });
    }

    /// The cases of the registrations still open, as they would be
    /// decided now.
    pub(crate) fn pending(&self) -> Vec<SyncCase> {
        self.registrations
            .iter()
            .filter(|r| r.open)
            .flat_map(|r| {
                self.pods
                    .iter()
                    .filter_map(move |(id, p)| r.case_for(id, p, &self.containers))
            })
            .collect()
    }

    /// Registrations open since before `now` - [`SPLIT_WINDOW_NS`] close.
    fn close_before(&mut self, now: Timestamp, out: &mut Vec<SyncCase>) {
        let old: Vec<usize> = (0..self.registrations.len())
            .filter(|&i| {
                let r = &self.registrations[i];
                r.open && r.start.mono_ns + SPLIT_WINDOW_NS < now.mono_ns
            })
            .collect();
        for i in old {
            self.close(i, out);
        }
    }

    fn close(&mut self, i: usize, out: &mut Vec<SyncCase>) {
        self.registrations[i].open = false;
        let ids: Vec<String> = self.pods.keys().cloned().collect();
        for id in ids {
            self.decide(i, &id, out);
        }
    }

    /// Pod `id` for closed registration `i`, once.
    fn decide(&mut self, i: usize, id: &str, out: &mut Vec<SyncCase>) {
        let (Some(r), Some(p)) = (self.registrations.get(i), self.pods.get(id)) else {
            return;
        };
        if r.decided.contains(id) {
            return;
        }
        let Some(case) = r.case_for(id, p, &self.containers) else {
            return;
        };
        self.registrations[i].decided.insert(id.to_string());
        out.push(case);
    }

    fn remember(&mut self, id: String, pod: Pod) {
        if !self.pods.contains_key(&id) {
            if self.pod_order.len() >= MAX_PODS {
                if let Some(old) = self.pod_order.pop_front() {
                    self.pods.remove(&old);
                }
            }
            self.pod_order.push_back(id.clone());
        }
        self.pods.insert(id, pod);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        capture::cri_state::StatePod,
        engine::{
            conformance::Conformance,
            correlate::NoCause,
            record::{Record, Uncaused},
            test_calls::{cri, hook, span, to_plugin, ts},
        },
    };

    const LATE_CONN: u64 = 7;

    fn uncaused(h: HookSpan) -> Record {
        Record::NriUncaused(Uncaused {
            span: h,
            no_cri_cause: NoCause::NoCriCallInFlight,
            exit: None,
            rolls_back: None,
        })
    }

    /// Plugin 20-late's Synchronize (a part of one) at `at`, listing `pods`.
    fn sync(at: u64, pods: &[&str]) -> Record {
        let mut h = to_plugin(hook(None, "late", "", at, at + 1), "late", "20", LATE_CONN);
        h.call.method = Some(NriMethod::Synchronize);
        h.call.pod = None;
        h.call.synchronized_pods = pods.iter().map(ToString::to_string).collect();
        uncaused(h)
    }

    /// Pod `id`'s RunPodSandbox, delivered to the plugins `told`.
    fn run(id: &str, start: u64, end: u64, told: &[(&str, &str, u64)]) -> Record {
        let hooks = told
            .iter()
            .map(|&(name, idx, conn)| {
                to_plugin(
                    hook(Some(Event::RunPodSandbox), name, id, start + 1, start + 2),
                    name,
                    idx,
                    conn,
                )
            })
            .collect();
        span(cri(Some("RunPodSandbox"), id, start, end), hooks)
    }

    /// An ordinary delivery to 20-late: its registration is over.
    fn late_event(at: u64) -> Record {
        uncaused(to_plugin(
            hook(Some(Event::CreateContainer), "late", "p1", at, at + 1),
            "late",
            "20",
            LATE_CONN,
        ))
    }

    fn table(records: &[Record]) -> (u64, u64, Vec<(String, &'static str)>) {
        let mut c = Conformance::new();
        let mut cases = Vec::new();
        for r in records {
            c.on_record(r);
        }
        let t: Vec<_> = c
            .tallies()
            .into_iter()
            .filter(|t| t.clause == SYNCHRONIZE_TELLS_EXISTING_PODS)
            .collect();
        let Some(t) = t.first() else {
            return (0, 0, cases);
        };
        for case in [&t.broken_case, &t.held_case].into_iter().flatten() {
            let s = case.sync.as_ref().expect("a Synchronize case");
            cases.push((case.sandbox_id.clone(), s.told));
        }
        (t.held, t.broken, cases)
    }

    /// containerd 1.7 (the nri#63 race): a pod whose RunPodSandbox is in
    /// flight while a plugin registers is neither listed nor delivered to
    /// it; the pod that existed before is listed.
    #[test]
    fn a_pod_in_flight_at_the_registration_is_not_told() {
        let records = [
            run("p1", 10, 20, &[("a", "10", 2)]),
            sync(50, &["p1"]),
            run("p2", 40, 100, &[("a", "10", 2)]),
            late_event(120),
        ];
        let (held, broken, cases) = table(&records);
        assert_eq!((held, broken), (1, 1));
        assert_eq!(
            cases,
            [("p2".to_string(), "not_told"), ("p1".to_string(), "listed")]
        );
    }

    /// containerd 2.1 holds the registration until the CRI call is done
    /// (listed), or the in-flight RunPodSandbox reaches the new plugin.
    #[test]
    fn listed_or_told_by_its_run_pod_sandbox_holds() {
        let records = [
            run("p1", 10, 20, &[("a", "10", 2)]),
            run("p2", 40, 45, &[("a", "10", 2)]),
            sync(50, &["p1", "p2"]),
            run("p3", 48, 100, &[("a", "10", 2), ("late", "20", LATE_CONN)]),
            late_event(120),
            // Made after the registration: not the clause's.
            run("p4", 130, 140, &[("a", "10", 2), ("late", "20", LATE_CONN)]),
        ];
        let (held, broken, cases) = table(&records);
        assert_eq!((held, broken), (3, 0), "{cases:?}");
    }

    /// A split Synchronize (NRI >= 0.7, `more`): each part lists some of
    /// the pods; the pods are decided on the parts together, and an open
    /// registration is counted as it stands.
    #[test]
    fn split_synchronize_parts_are_one_registration() {
        let first = [
            run("p1", 10, 20, &[]),
            run("p2", 11, 21, &[]),
            sync(50, &["p1"]),
            sync(51, &["p2"]),
        ];
        assert_eq!(table(&first).0, 2, "open: {:?}", table(&first).2);
        let mut closed = first.to_vec();
        closed.push(late_event(60));
        let (held, broken, _) = table(&closed);
        assert_eq!((held, broken), (2, 0));
    }

    /// Container `cid` of pod `pod`: its CreateContainer, delivered to
    /// the plugins `told`.
    fn create(pod: &str, cid: &str, start: u64, end: u64, told: &[(&str, &str, u64)]) -> Record {
        let mut call = cri(Some("CreateContainer"), pod, start, end);
        call.container_id = Some(cid.into());
        let hooks = told
            .iter()
            .map(|&(name, idx, conn)| {
                to_plugin(
                    hook(
                        Some(Event::CreateContainer),
                        name,
                        pod,
                        start + 1,
                        start + 2,
                    ),
                    name,
                    idx,
                    conn,
                )
            })
            .collect();
        span(call, hooks)
    }

    fn sync_with(at: u64, pods: &[&str], containers: &[&str]) -> Record {
        let mut r = sync(at, pods);
        if let Record::NriUncaused(u) = &mut r {
            u.span.call.synchronized_containers =
                containers.iter().map(ToString::to_string).collect();
        }
        r
    }

    /// The pod's containers are part of its case: one that existed but
    /// is not in the Synchronize breaks it; one in flight is told by its
    /// CreateContainer; a stopped one and one made after are not decided.
    #[test]
    fn containers_are_decided_with_their_pod() {
        let base = [
            run("p1", 10, 20, &[]),
            create("p1", "c1", 21, 22, &[]),
            run("p2", 11, 23, &[]),
            create("p2", "c2", 24, 25, &[]),
            create("p2", "c3", 26, 27, &[]),
        ];
        // Everything listed: held on both pods.
        let mut all = base.to_vec();
        all.extend([
            sync_with(50, &["p1", "p2"], &["c1", "c2", "c3"]),
            late_event(60),
        ]);
        assert_eq!(table(&all).0, 2, "{:?}", table(&all).2);
        // c3 left out: p2 broken, with c3 named.
        let mut missing = base.to_vec();
        missing.extend([sync_with(50, &["p1", "p2"], &["c1", "c2"]), late_event(60)]);
        let mut c = Conformance::new();
        for r in &missing {
            c.on_record(r);
        }
        let t = c
            .tallies()
            .into_iter()
            .find(|t| t.clause == SYNCHRONIZE_TELLS_EXISTING_PODS)
            .expect("the clause");
        assert_eq!((t.held, t.broken), (1, 1));
        let step = t.broken_case.and_then(|c| c.sync).expect("a broken case");
        assert_eq!((step.told, step.containers), ("listed", 2));
        assert_eq!(step.containers_not_told, vec!["c3".to_string()]);
        // c3 stopped before the registration, c4 in flight and told by its
        // CreateContainer, c5 made after: held.
        let mut stop = cri(Some("StopContainer"), "", 30, 31);
        stop.sandbox_id = None;
        stop.container_id = Some("c3".into());
        let mut varied = base.to_vec();
        varied.extend([
            span(stop, vec![]),
            create("p2", "c4", 45, 55, &[("late", "20", LATE_CONN)]),
            sync_with(50, &["p1", "p2"], &["c1", "c2"]),
            create("p1", "c5", 56, 57, &[]),
            late_event(60),
        ]);
        assert_eq!(table(&varied).0, 2, "{:?}", table(&varied).2);
    }

    /// A plugin that answers a split part without `more` is closed by the
    /// runtime: its registration decides nothing, the other plugin's does.
    #[test]
    fn a_registration_failed_on_its_split_reply_decides_nothing() {
        use crate::model::nri_call::SplitPart;
        let mut first = sync(50, &["p1"]);
        let mut stale = sync(52, &["p1"]);
        for (r, more) in [(&mut first, true), (&mut stale, false)] {
            if let Record::NriUncaused(u) = r {
                u.span.call.split_part = Some(SplitPart {
                    reply_more: Some(more),
                    reply_updates: 0,
                });
            }
        }
        if let Record::NriUncaused(u) = &mut stale {
            u.span.call.conn = ConnId(LATE_CONN + 1);
        }
        let records = [
            run("p1", 10, 20, &[]),
            run("p2", 11, 21, &[]),
            first,
            sync(51, &["p2"]),
            stale,
            late_event(60),
        ];
        let (held, broken, cases) = table(&records);
        assert_eq!((held, broken), (2, 0), "{cases:?}");
    }

    /// Late attach: the runtime's state at attach says which pods exist;
    /// one left out of a later Synchronize breaks the clause. A pod being
    /// stopped at the registration is not decided.
    #[test]
    fn pods_from_the_runtime_state_and_stopped_pods() {
        use crate::{capture::cri_state::CriState, model::observation::Observation};
        let pod = |id: &str, state: &str| StatePod {
            id: id.into(),
            namespace: "ns".into(),
            name: id.into(),
            uid: "u".into(),
            attempt: 0,
            state: state.into(),
            created_unix_ns: 0,
        };
        let state = Record::Observed(Observation::CriState(CriState {
            ts: ts(1).unwrap(),
            pods: vec![pod("old", "ready"), pod("stopped", "notready")],
            containers: vec![],
            truncated: false,
            bytes: 0,
            took_ns: 0,
            runtime: Some("containerd 1.7.24".into()),
        }));
        let stopping = span(cri(Some("StopPodSandbox"), "p1", 30, 35), vec![]);
        let records = [
            state,
            run("p1", 10, 20, &[]),
            stopping,
            sync(50, &[]),
            late_event(60),
        ];
        let (held, broken, cases) = table(&records);
        assert_eq!((held, broken), (0, 1));
        assert_eq!(cases, [("old".to_string(), "not_told")]);
    }
}
