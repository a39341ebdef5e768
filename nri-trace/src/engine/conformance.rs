//! Conformance: clauses of the NRI contract draft that a runtime keeps or
//! breaks by design, counted over every pod instead of reported per pod.
//!
//! The draft (nri PR 286, "NRI plugin contract"; the review thread in
//! `shared/context`) states what a plugin may rely on. Some of it a runtime
//! breaks on every pod because of how it is built (containerd 1.7 calls
//! the plugins' RunPodSandbox before it starts the pod's pause process;
//! containerd 2.x after): a finding per pod would bury the real incidents,
//! so such clauses are tallied here, per runtime: held N times, broken M
//! times, with the evidence of one case of each. Findings
//! ([`super::findings`]) stay for what goes wrong on one pod.
//!
//! Clauses, each decided only when both of its sides were seen:
//!
//! - [`SANDBOX_RUNNING_AT_RUN_POD_SANDBOX`]: "the pod sandbox is running"
//!   when a plugin gets RunPodSandbox. Seen from the kernel: the exec of
//!   the program that runs in the sandbox's own cgroup (its pause
//!   process; the cgroup path names the sandbox id, as containerd and
//!   CRI-O name it with either cgroup driver; the OCI runtime's own
//!   re-exec there is skipped), before or after the start
//!   of the first RUN_POD_SANDBOX delivery of that pod. Decided when the
//!   RunPodSandbox CRI call settles, or, when the exec comes after that, at
//!   the exec: `runc start` returns once the container's init is released,
//!   before the init's execve, so the runtime can answer the CRI call
//!   before the program runs (containerd 1.7 and 2.1 in the lab: up to
//!   14 ms before it on an idle machine, 165 ms with both cores busy; a
//!   call settles 10 ms after its end). Not decided when no exec in the
//!   sandbox's cgroup was seen after the call began, before the pod's
//!   StopPodSandbox (the sandbox probes off, or attached after the pause
//!   process started: then its exec is not in the capture).
//! - [`STOP_POD_SANDBOX_BEFORE_NETNS_TEARDOWN`]: plugins get StopPodSandbox
//!   while the pod's network namespace still exists (the ordering
//!   cri-o#9905 asks for; CRI-O tears the network down first). Seen from
//!   the wire and the kernel: the pod's netns file as NRI gave it to the
//!   plugins (`PodRef::netns`), its first successful unmount or unlink by
//!   the runtime's tree, against the start of the first STOP_POD_SANDBOX
//!   delivery of that pod. The file is matched under either of its names:
//!   the path NRI gave, and that path with its symlinks resolved (the
//!   bind mount's `resolved`: containerd unmounts and removes a netns at
//!   its resolved path, `/run/netns/...` for a configured
//!   `/var/run/netns/...`). Decided once both are seen, in either order;
//!   host-network pods (no netns) and pods whose netns is never seen
//!   going are not decided.
//!
//! - [`STOP_CONTAINER_ONCE_PER_EXIT`]: a container that exits on its own
//!   gets one StopContainer per plugin, at the exit, and none again when
//!   kubelet's CRI StopContainer (or RemoveContainer) follows (containerd
//!   `needsStopping`; docs/contract.md). Seen from the wire and the kernel:
//!   the deliveries labeled `container_exited` with the exit the sandbox
//!   probes saw ([`super::correlate::NoCause::ContainerExited`]), then the
//!   CRI call's own STOP_CONTAINER deliveries. Decided at that CRI call.
//!
//! - [`SYNCHRONIZE_TELLS_EXISTING_PODS`]: a registering plugin is told of
//!   every pod that exists, in its Synchronize (split or whole), or by the
//!   RunPodSandbox that was in flight (the race of nri issue 63). From the
//!   wire and the runtime's state at attach; per pod and registration, in
//!   [`super::sync_clause`].
//!
//! Pure and deterministic: it reads only the records the engine emits.

use crate::model::cri_call::CriMethod;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

use serde::Serialize;

pub(crate) use super::sync_clause::{SyncStep, SYNCHRONIZE_TELLS_EXISTING_PODS};
use super::{
    correlate::{cgroup_names, CriSpan},
    record::Record,
    sync_clause::{SyncCase, SyncClause},
};
use crate::{
    capture::{
        sandbox::{ids_in, SandboxEvent, SandboxOp},
        Timestamp,
    },
    model::observation::Observation,
};

/// The clause: the pod's sandbox (pause) process runs when plugins get
/// RunPodSandbox.
pub(crate) const SANDBOX_RUNNING_AT_RUN_POD_SANDBOX: &str = "sandbox-running-at-run-pod-sandbox";
/// The clause: plugins get StopPodSandbox before the pod's network
/// namespace is torn down.
pub(crate) const STOP_POD_SANDBOX_BEFORE_NETNS_TEARDOWN: &str =
    "stop-pod-sandbox-before-netns-teardown";

/// The clause: a container that exits on its own gets one StopContainer
/// per plugin.
pub(crate) const STOP_CONTAINER_ONCE_PER_EXIT: &str = "stop-container-once-per-exit";

/// Containers whose exit clause is pending, at most (the oldest go).
const MAX_EXITED: usize = 16384;

/// Execs remembered (the newest), and for how long.
const MAX_EXECS: usize = 4096;
/// Pods whose netns clause is pending, at most (the oldest go).
const MAX_NETNS_PODS: usize = 16384;
/// Unmounts remembered for pods first seen at their teardown, and netns
/// bind mounts remembered for the pods they are made for.
const MAX_RECENT_UMOUNTS: usize = 256;
/// RunPodSandbox calls settled before their sandbox's program started,
/// at most (the oldest go).
const MAX_PENDING_RUNS: usize = 4096;
const EXEC_KEEP_NS: u64 = 600_000_000_000;

/// One clause as a runtime keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClauseTally {
    /// The clause's id ([`SANDBOX_RUNNING_AT_RUN_POD_SANDBOX`], ...).
    pub clause: &'static str,
    /// The runtime as it names itself (CRI Version, or NRI Configure):
    /// "containerd 1.7.24~ds1"; `None` until it said.
    pub runtime: Option<String>,
    /// Pods on which it held, and on which it was broken.
    pub held: u64,
    pub broken: u64,
    /// One case of each, the first seen.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held_case: Option<ClauseCase>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub broken_case: Option<ClauseCase>,
}

/// One pod's case of a clause, as data (sinks word it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClauseCase {
    /// The pod, `namespace/name` when known, and its sandbox id.
    pub pod: String,
    pub sandbox_id: String,
    /// The plugin told first, and when its delivery started.
    pub plugin: String,
    /// The hook (RUN_POD_SANDBOX, STOP_POD_SANDBOX) and when its first
    /// delivery started.
    pub hook: &'static str,
    pub delivered: Timestamp,
    /// What the kernel saw on the other side of the clause (the kernel's
    /// clauses).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel: Option<KernelStep>,
    /// What the wire showed of the registration (the Synchronize clause).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sync: Option<SyncStep>,
}

impl From<SyncCase> for ClauseCase {
    fn from(c: SyncCase) -> Self {
        ClauseCase {
            pod: c.pod,
            sandbox_id: c.sandbox_id,
            plugin: c.plugin,
            hook: "SYNCHRONIZE",
            delivered: c.delivered,
            kernel: None,
            sync: Some(c.step),
        }
    }
}

/// The kernel's side of a clause's case.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KernelStep {
    /// `exec` (the sandbox's program started), `umount` or `unlink` (its
    /// netns file went), `exit` (the container's program ended: `path` is
    /// its cgroup).
    pub op: &'static str,
    /// The program, or the netns file.
    pub path: String,
    /// Who: the process that started the program, or that removed the file.
    pub pid: u32,
    pub comm: String,
    pub at: Timestamp,
}

/// One pod's netns clause, as far as seen.
#[derive(Default)]
struct NetnsCase {
    /// The netns file as NRI named it, then the other names the kernel
    /// may see it under (its bind mount's `resolved`).
    paths: Vec<String>,
    pod: String,
    /// The first STOP_POD_SANDBOX delivery: its plugin and start.
    stop: Option<(String, Timestamp)>,
    gone: Option<KernelStep>,
}

/// A program started in the runtime's tree, and the cgroup it runs in.
struct Exec {
    step: KernelStep,
    cgroup: String,
}

impl Exec {
    /// The OCI runtime re-executing itself inside the container's cgroup
    /// before it starts the container's program: runc's init runs a copy
    /// of its own binary from a memfd (`/dev/fd/N`, `/proc/self/fd/N`;
    /// seen on containerd 2.1's lab: comm `runc`), not the sandbox's
    /// program.
    fn is_oci_runtime(&self) -> bool {
        let KernelStep { comm, path, .. } = &self.step;
        comm.starts_with("runc")
            || comm.starts_with("crun")
            || path.starts_with("/dev/fd/")
            || path.starts_with("/proc/self/")
    }
}

/// The clauses' tallies so far.
#[derive(Default)]
pub(crate) struct Conformance {
    /// Recent execs of the runtime's tree, oldest first.
    execs: VecDeque<Exec>,
    runtime: Option<String>,
    tallies: BTreeMap<&'static str, ClauseTally>,
    /// Pods with their own netns, by sandbox id, until decided; and the
    /// sandbox id of each netns path.
    netns: BTreeMap<String, NetnsCase>,
    by_netns_path: BTreeMap<String, String>,
    /// Pods whose netns clause is decided (the newest, at most
    /// MAX_NETNS_PODS): each is counted once, though every plugin's
    /// delivery names it again (CRI-O sends the pod's netns with every
    /// event, containerd 1.7 with RunPodSandbox only).
    netns_decided: BTreeSet<String>,
    netns_decided_order: VecDeque<String>,
    /// The last successful unmounts, for a pod first seen at its teardown
    /// (made before the trace: its netns path comes with its
    /// STOP_POD_SANDBOX delivery, which settles after the unmount).
    recent_umounts: VecDeque<KernelStep>,
    /// The last netns bind mounts whose target resolves to another path:
    /// (target, resolved). A bind comes before the pod's first delivery.
    recent_binds: VecDeque<(String, String)>,
    /// RunPodSandbox calls that settled before their sandbox's program
    /// started, by sandbox id: decided at that exec.
    pending_runs: BTreeMap<String, PendingRun>,
    /// Containers told of their own exit, by container id: the exit, the
    /// pod, and each plugin's exit-caused deliveries (the first's start).
    exited: BTreeMap<String, ExitedContainer>,
    /// The Synchronize clause's pods and registrations.
    sync: SyncClause,
}

/// A RunPodSandbox call whose sandbox's program had not started when it
/// settled.
struct PendingRun {
    start_ns: u64,
    /// The case, its kernel step still to come.
    case: ClauseCase,
}

/// A container whose exit the plugins were told of.
struct ExitedContainer {
    exit: KernelStep,
    pod: String,
    sandbox_id: String,
    deliveries: BTreeMap<String, (u32, Timestamp)>,
}

impl Conformance {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Look at one record the engine emits.
    pub(crate) fn on_record(&mut self, r: &Record) {
        let mut synced = Vec::new();
        for h in r.hooks() {
            self.sync.on_hook(h, &mut synced);
        }
        match r {
            Record::Observed(Observation::Sandbox(e)) => self.on_kernel(e),
            Record::Observed(Observation::CriState(s)) => {
                if let Some(rt) = &s.runtime {
                    self.runtime = Some(rt.clone());
                }
                self.sync.on_state(s);
            }
            Record::NriUncaused(u) => {
                if let Some(rt) = &u.span.call.configured_runtime {
                    self.runtime = Some(rt.to_string());
                }
            }
            Record::CriSpan(s) if s.call.is(CriMethod::RunPodSandbox) => {
                self.on_run_pod_sandbox(s);
            }
            // A sandbox whose program never started (a failed start, or
            // one before the trace): its teardown ends the wait.
            Record::CriSpan(s)
                if matches!(
                    s.call.cri_method(),
                    Some(CriMethod::StopPodSandbox | CriMethod::RemovePodSandbox)
                ) =>
            {
                if let Some(id) = s.call.sandbox_id.as_deref() {
                    self.pending_runs.remove(id);
                }
            }
            Record::CriSpan(s)
                if matches!(
                    s.call.cri_method(),
                    Some(CriMethod::StopContainer | CriMethod::RemoveContainer)
                ) =>
            {
                self.on_container_stop(s);
            }
            _ => {}
        }
        if let Record::CriSpan(s) = r {
            self.sync.on_cri_span(s, &mut synced);
        }
        for c in synced {
            self.tally(SYNCHRONIZE_TELLS_EXISTING_PODS, c.held(), c.into());
        }
        if let Record::NriUncaused(u) = r {
            if let (super::correlate::NoCause::ContainerExited, Some(x)) = (u.no_cri_cause, &u.exit)
            {
                self.on_exit_delivery(&u.span, x);
            }
        }
        for h in r.hooks() {
            self.on_hook_for_netns(h);
        }
    }

    /// A delivery naming a pod with its own netns: the pod is followed; a
    /// STOP_POD_SANDBOX one is the clause's first side.
    fn on_hook_for_netns(&mut self, h: &super::hook_latency::HookSpan) {
        let Some(pod) = &h.call.pod else { return };
        // The netns comes with the pod's RunPodSandbox (containerd 1.7
        // sends StopPodSandbox's pod without its namespaces).
        let path = pod.netns.as_deref().filter(|p| !p.is_empty());
        let known = self.netns.contains_key(&pod.id) || self.netns_decided.contains(&pod.id);
        if let (Some(path), false) = (path, known) {
            if self.netns.len() >= MAX_NETNS_PODS {
                if let Some((_, c)) = self.netns.pop_first() {
                    for p in &c.paths {
                        self.by_netns_path.remove(p);
                    }
                }
            }
            // The file as NRI names it, and as the kernel may see it go.
            let mut paths = vec![path.to_string()];
            for (_, resolved) in self.recent_binds.iter().filter(|(t, _)| t == path) {
                if !paths.contains(resolved) {
                    paths.push(resolved.clone());
                }
            }
            for p in &paths {
                self.by_netns_path.insert(p.clone(), pod.id.clone());
            }
            let gone = self
                .recent_umounts
                .iter()
                .find(|k| paths.contains(&k.path))
                .cloned();
            self.netns.insert(
                pod.id.clone(),
                NetnsCase {
                    paths,
                    pod: pod.to_string(),
                    gone,
                    ..NetnsCase::default()
                },
            );
        }
        if h.hook.as_str() == "STOP_POD_SANDBOX" {
            if let (Some(c), Some(start)) = (self.netns.get_mut(&pod.id), h.call.start) {
                if c.stop
                    .as_ref()
                    .is_none_or(|(_, t)| start.mono_ns < t.mono_ns)
                {
                    c.stop = Some((h.call.plugin.label(), start));
                }
            }
            self.decide_netns(&pod.id);
        }
    }

    /// The netns clause of one pod, once both sides are seen.
    fn decide_netns(&mut self, id: &str) {
        let Some(c) = self.netns.get(id) else { return };
        let (Some((plugin, delivered)), Some(gone)) = (&c.stop, &c.gone) else {
            return;
        };
        let case = ClauseCase {
            pod: c.pod.clone(),
            sandbox_id: id.to_string(),
            plugin: plugin.clone(),
            hook: "STOP_POD_SANDBOX",
            delivered: *delivered,
            kernel: Some(gone.clone()),
            sync: None,
        };
        let held = delivered.mono_ns < gone.at.mono_ns;
        if let Some(c) = self.netns.remove(id) {
            for p in &c.paths {
                self.by_netns_path.remove(p);
            }
        }
        if self.netns_decided_order.len() >= MAX_NETNS_PODS {
            if let Some(old) = self.netns_decided_order.pop_front() {
                self.netns_decided.remove(&old);
            }
        }
        self.netns_decided.insert(id.to_string());
        self.netns_decided_order.push_back(id.to_string());
        self.tally(STOP_POD_SANDBOX_BEFORE_NETNS_TEARDOWN, held, case);
    }

    fn on_kernel(&mut self, e: &SandboxEvent) {
        // A followed pod's netns file unmounted or removed.
        let step = |op, path: &String| KernelStep {
            op,
            path: path.clone(),
            pid: e.tgid,
            comm: e.comm.clone(),
            at: e.ts,
        };
        let (step, cgroup) = match (&e.op, &e.cgroup) {
            (
                SandboxOp::NsBind {
                    target,
                    errno: 0,
                    resolved: Some(resolved),
                    ..
                },
                _,
            ) => {
                self.on_netns_bind(target, resolved);
                return;
            }
            (SandboxOp::Umount { path, errno: 0, .. }, _) => (step("umount", path), None),
            (SandboxOp::Unlink { path, errno: 0, .. }, _) => (step("unlink", path), None),
            (SandboxOp::Exec { path }, Some(cgroup)) => (step("exec", path), Some(cgroup)),
            _ => return,
        };
        if let Some(cgroup) = cgroup {
            self.on_exec(Exec {
                step,
                cgroup: cgroup.clone(),
            });
            return;
        }
        // A followed pod's netns file unmounted or removed.
        if let Some(id) = self.by_netns_path.get(&step.path).cloned() {
            if let Some(c) = self.netns.get_mut(&id) {
                c.gone.get_or_insert_with(|| step.clone());
            }
            self.decide_netns(&id);
        }
        if step.op == "umount" {
            if self.recent_umounts.len() >= MAX_RECENT_UMOUNTS {
                self.recent_umounts.pop_front();
            }
            self.recent_umounts.push_back(step);
        }
    }

    /// A netns bound at `target`, which resolves to `resolved`: the
    /// runtime may unmount and remove it under that name (containerd does).
    fn on_netns_bind(&mut self, target: &str, resolved: &str) {
        if let Some(id) = self.by_netns_path.get(target).cloned() {
            if let Some(c) = self.netns.get_mut(&id) {
                if !c.paths.iter().any(|p| p == resolved) {
                    c.paths.push(resolved.to_string());
                    self.by_netns_path.insert(resolved.to_string(), id);
                }
            }
        }
        if self.recent_binds.len() >= MAX_RECENT_UMOUNTS {
            self.recent_binds.pop_front();
        }
        self.recent_binds
            .push_back((target.to_string(), resolved.to_string()));
    }

    fn on_exec(&mut self, exec: Exec) {
        self.decide_pending_run(&exec);
        let now = exec.step.at.mono_ns;
        while self.execs.len() >= MAX_EXECS
            || self
                .execs
                .front()
                .is_some_and(|x| x.step.at.mono_ns + EXEC_KEEP_NS < now)
        {
            self.execs.pop_front();
        }
        self.execs.push_back(exec);
    }

    /// The sandbox-running clause on one RunPodSandbox call.
    fn on_run_pod_sandbox(&mut self, s: &CriSpan) {
        let (Some(start), Some(id)) = (s.call.start, s.call.sandbox_id.as_deref()) else {
            return;
        };
        if id.is_empty() {
            return;
        }
        let Some(first) = s
            .hooks
            .iter()
            .filter(|h| h.hook.as_str() == "RUN_POD_SANDBOX")
            .filter_map(|h| h.call.start.map(|t| (t, h)))
            .min_by_key(|(t, _)| t.mono_ns)
        else {
            return;
        };
        let (delivered, hook) = first;
        let case = ClauseCase {
            pod: s
                .call
                .pod
                .as_ref()
                .map_or_else(|| id.to_string(), ToString::to_string),
            sandbox_id: id.to_string(),
            plugin: hook.call.plugin.label(),
            hook: "RUN_POD_SANDBOX",
            delivered,
            kernel: None,
            sync: None,
        };
        // The sandbox's program: the first exec in its own cgroup that is
        // not the OCI runtime's own; or, not started yet (the runtime
        // answered before runc's init exec'd it), the first to come.
        let Some(exec) = self.execs.iter().find(|x| {
            x.step.at.mono_ns >= start.mono_ns && cgroup_names(&x.cgroup, id) && !x.is_oci_runtime()
        }) else {
            if self.pending_runs.len() >= MAX_PENDING_RUNS {
                self.pending_runs.pop_first();
            }
            self.pending_runs.insert(
                id.to_string(),
                PendingRun {
                    start_ns: start.mono_ns,
                    case,
                },
            );
            return;
        };
        let step = exec.step.clone();
        self.decide_run(case, step);
    }

    /// A program started in a sandbox's cgroup whose RunPodSandbox call
    /// settled before it: that sandbox's clause.
    fn decide_pending_run(&mut self, exec: &Exec) {
        if self.pending_runs.is_empty() || exec.is_oci_runtime() {
            return;
        }
        let last = exec.cgroup.rsplit('/').next().unwrap_or_default();
        let Some(id) = ids_in(last)
            .find(|id| self.pending_runs.contains_key(*id) && cgroup_names(&exec.cgroup, id))
            .map(str::to_string)
        else {
            return;
        };
        if self.pending_runs[&id].start_ns > exec.step.at.mono_ns {
            return;
        }
        if let Some(p) = self.pending_runs.remove(&id) {
            self.decide_run(p.case, exec.step.clone());
        }
    }

    /// The sandbox-running clause of one pod: its program started at
    /// `exec`, held when that was no later than the first delivery.
    fn decide_run(&mut self, mut case: ClauseCase, exec: KernelStep) {
        let held = exec.at.mono_ns <= case.delivered.mono_ns;
        case.kernel = Some(exec);
        self.tally(SANDBOX_RUNNING_AT_RUN_POD_SANDBOX, held, case);
    }

    /// A StopContainer delivery caused by the container's exit.
    fn on_exit_delivery(
        &mut self,
        h: &super::hook_latency::HookSpan,
        x: &super::correlate::ContainerExit,
    ) {
        let (Some(c), Some(start)) = (&h.call.container, h.call.start) else {
            return;
        };
        if !self.exited.contains_key(&c.id) && self.exited.len() >= MAX_EXITED {
            self.exited.pop_first();
        }
        let e = self
            .exited
            .entry(c.id.clone())
            .or_insert_with(|| ExitedContainer {
                exit: KernelStep {
                    op: "exit",
                    path: x.cgroup.clone(),
                    pid: x.pid,
                    comm: x.comm.clone(),
                    at: x.at,
                },
                pod: h
                    .call
                    .pod
                    .as_ref()
                    .map_or_else(String::new, ToString::to_string),
                sandbox_id: h
                    .call
                    .pod
                    .as_ref()
                    .map_or_else(String::new, |p| p.id.clone()),
                deliveries: BTreeMap::new(),
            });
        let d = e
            .deliveries
            .entry(h.call.plugin.label())
            .or_insert((0, start));
        d.0 += 1;
    }

    /// The CRI StopContainer (or RemoveContainer) after a container's exit:
    /// held when each plugin was told once, at the exit, and not again.
    fn on_container_stop(&mut self, s: &CriSpan) {
        let Some(id) = s.call.container_id.as_deref() else {
            return;
        };
        let Some(e) = self.exited.remove(id) else {
            return;
        };
        let again = s.hooks.iter().find(|h| h.hook.as_str() == "STOP_CONTAINER");
        let twice = e.deliveries.iter().find(|(_, (n, _))| *n > 1);
        let (plugin, delivered) = match (again, twice) {
            (Some(h), _) => (h.call.plugin.label(), h.call.start.unwrap_or(e.exit.at)),
            (None, Some((p, (_, t)))) => (p.clone(), *t),
            (None, None) => match e.deliveries.iter().next() {
                Some((p, (_, t))) => (p.clone(), *t),
                None => return,
            },
        };
        let held = again.is_none() && twice.is_none();
        let case = ClauseCase {
            pod: if e.pod.is_empty() {
                e.sandbox_id.clone()
            } else {
                e.pod
            },
            sandbox_id: e.sandbox_id,
            plugin,
            hook: "STOP_CONTAINER",
            delivered,
            kernel: Some(e.exit),
            sync: None,
        };
        self.tally(STOP_CONTAINER_ONCE_PER_EXIT, held, case);
    }

    fn tally(&mut self, clause: &'static str, held: bool, case: ClauseCase) {
        tally_into(&mut self.tallies, self.runtime.as_ref(), clause, held, case);
    }

    /// Every clause decided at least once, by clause id; the Synchronize
    /// clause's open registrations counted as they stand.
    pub(crate) fn tallies(&self) -> Vec<ClauseTally> {
        let mut tallies = self.tallies.clone();
        for c in self.sync.pending() {
            let held = c.held();
            tally_into(
                &mut tallies,
                self.runtime.as_ref(),
                SYNCHRONIZE_TELLS_EXISTING_PODS,
                held,
                c.into(),
            );
        }
        tallies.into_values().collect()
    }
}

fn tally_into(
    tallies: &mut BTreeMap<&'static str, ClauseTally>,
    runtime: Option<&String>,
    clause: &'static str,
    held: bool,
    case: ClauseCase,
) {
    let t = tallies.entry(clause).or_insert_with(|| ClauseTally {
        clause,
        runtime: None,
        held: 0,
        broken: 0,
        held_case: None,
        broken_case: None,
    });
    t.runtime = runtime.cloned();
    if held {
        t.held += 1;
        t.held_case.get_or_insert(case);
    } else {
        t.broken += 1;
        t.broken_case.get_or_insert(case);
    }
}

#[cfg(test)]
mod tests;
