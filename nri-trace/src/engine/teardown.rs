//! Why is this pod not gone? The teardown of each pod as the trace records
//! show it (StopContainer, StopPodSandbox, RemovePodSandbox and the NRI
//! hooks under them), and [`TeardownLog::explain`]: where the teardown
//! stands ([`TeardownProgress`]) and what holds it ([`Blocker`]), as data with its
//! evidence; `sinks::explain` puts it into words.
//!
//! kubelet removes a pod once no container runs, its volumes are unmounted
//! and its cgroup is gone (pod-stuck-terminating-zh.txt; PROTOCOL-NOTES.md):
//! it stops each container (StopContainer), stops the sandbox
//! (StopPodSandbox), then removes it (RemovePodSandbox). A pod stuck in
//! Terminating is stuck at one of those steps: a call that failed or timed
//! out, a plugin hook on the way that failed or never returned, or a call
//! kubelet never made. Pure: built from the records only (what the node's
//! processes hold is `capture::holders`' part).
//!
//! With the sandbox probes (`Record::Sandbox`), the kernel's side of
//! the teardown joins it: the signals sent to the pod's processes and
//! their exits, its unmounts, unlinks and rmdirs with their errno, its
//! cgroups going. An event belongs to a pod when a container or sandbox id
//! of it appears in its paths or cgroup (containerd and CRI-O name rootfs,
//! bundle and cgroup directories after them). They name the blocker below
//! the CRI call: a process alive after SIGKILL, an unmount failing EBUSY,
//! a directory or cgroup that cannot be removed.

use std::collections::{BTreeMap, HashMap, VecDeque};

use serde::Serialize;

use super::{correlate::CriSpan, findings::Detail, record::Record};
use crate::capture::{
    cri_state::CriState,
    sandbox::{ids_in, pod_uids_in, SandboxEvent, SandboxOp},
    Timestamp,
};
use crate::human::short_id;
use crate::model::{cri_call::CriCall, cri_client::CriClient};
use crate::model::{
    cri_call::{CriMethod, CriOutcome, TEARDOWN_METHODS},
    nri_call::{NriCall, NriOutcome},
    observation::Observation,
};

/// Most pods whose teardown is kept; the ones seen longest ago go first.
pub(crate) const MAX_PODS: usize = 4096;
/// Most teardown steps kept per pod (kubelet retries add steps).
const MAX_STEPS: usize = 64;
/// Most kernel events kept per pod (the newest).
const MAX_KERNEL: usize = 256;

/// One teardown CRI call and what happened under it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TeardownStep {
    pub method: String,
    /// The container it is about, for container calls.
    pub container: Option<String>,
    pub container_id: Option<String>,
    pub start: Option<Timestamp>,
    pub duration_ns: Option<u64>,
    pub outcome: CriOutcome,
    /// Its NRI hooks, in start order.
    pub hooks: Vec<StepHook>,
}

impl TeardownStep {
    pub fn ok(&self) -> bool {
        self.outcome.is_ok()
    }

    /// The hooks under it that failed or timed out.
    pub fn failed_hooks(&self) -> impl Iterator<Item = &StepHook> {
        self.hooks.iter().filter(|h| !h.outcome.is_ok())
    }
}

/// An NRI hook under a teardown step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StepHook {
    /// `IDX-NAME`.
    pub plugin: String,
    pub hook: String,
    pub own_ns: Option<u64>,
    pub outcome: NriOutcome,
}

/// The verdict on a pod's teardown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// RemovePodSandbox succeeded: nothing holds it any more.
    Gone,
    /// A teardown step failed, or a hook under it failed, or something
    /// below the CRI calls holds it.
    Blocked,
    /// The last step succeeded; the next one has not been seen.
    Waiting,
    /// No teardown call of this pod was seen.
    NotTornDown,
}

/// Where the teardown's CRI calls stand (indexes are into
/// [`Explanation::steps`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum TeardownProgress {
    /// RemovePodSandbox succeeded, `took_ns` after the first step began.
    Removed { took_ns: u64 },
    /// No teardown call was seen; the pod's last call of any kind.
    NotStarted {
        last_call: Option<String>,
        at: Option<Timestamp>,
    },
    /// Hook `hook` of step `step` failed (the last step with one).
    HookFailed { step: usize, hook: usize },
    /// The last step, `step`, failed.
    CallFailed { step: usize },
    /// The last step, `step`, succeeded; kubelet has not made the next.
    NextNotCalled { step: usize },
    /// A teardown call was made and has not returned (the oldest such).
    /// A StopContainer waits out the grace period it was given
    /// (`grace_period_ns`, `grace_left_ns`) before the runtime sends
    /// SIGKILL.
    CallPending {
        method: String,
        container: Option<String>,
        since: Timestamp,
        waited_ns: u64,
        /// StopContainer's timeout: what kubelet gave of the pod's grace
        /// period.
        grace_period_ns: Option<u64>,
        /// What is left of it at explain time.
        grace_left_ns: Option<u64>,
        /// The client's deadline for the call (grpc-timeout), when seen.
        deadline_ns: Option<u64>,
    },
}

/// How long past its grace period a StopContainer may still run before
/// the pod is blocked rather than waiting: the runtime sends SIGKILL when
/// the period ends, and the kill, the exit and the shim's report take a
/// moment (containerd `internal/cri/server/container_stop.go`: SIGKILL,
/// then waits for the exit).
const GRACE_SLACK_NS: u64 = 10_000_000_000;

/// What holds the pod below its CRI calls.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Blocker {
    /// A teardown hook was called and has not returned (the oldest).
    HookPending {
        plugin: String,
        event: String,
        since: Timestamp,
        waited_ns: u64,
        /// The runtime's timeout for it.
        timeout_ns: Option<u64>,
    },
    /// Processes sent SIGKILL that have not exited: `alive` of them, the
    /// first `pid` of `container`.
    AliveAfterKill {
        pid: u32,
        comm: Option<String>,
        container: String,
        /// The first SIGKILL.
        signal: SandboxEvent,
        /// Sent by the kernel as the sender, its pid namespace's init,
        /// exited (zap_pid_ns_processes), not by the sender itself.
        by_kernel: bool,
        ago_ns: u64,
        alive: usize,
        /// Every SIGKILL of a process still alive.
        signals: Vec<SandboxEvent>,
    },
    /// Seen on the node, not in the trace: a process of the pod's
    /// container with SIGKILL pending that has not exited (it was killed
    /// before the trace began; in state D it waits in the kernel, e.g. on
    /// a FUSE or NFS answer). `explain` reads it from /proc
    /// ([`Explanation::note_pending_kill`]).
    PendingSigkill {
        pid: u32,
        comm: String,
        container: String,
        state: String,
        wchan: String,
    },
    /// The CRI connection of the pod's latest call closed and no call of
    /// the pod came since: no client (kubelet) asks the runtime to stop
    /// it. Its client's label, when known.
    ClientGone {
        client: Option<String>,
        closed: Timestamp,
        ago_ns: u64,
    },
    /// An unmount of the pod's paths failed and was not redone.
    UnmountFailed {
        path: String,
        errno: i32,
        event: SandboxEvent,
        ago_ns: u64,
    },
    /// A removal of the pod's paths or cgroups failed and was not redone.
    RemoveFailed {
        what: Removal,
        path: String,
        errno: i32,
        event: SandboxEvent,
        ago_ns: u64,
    },
}

/// What a failed removal was of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Removal {
    Cgroup,
    NetnsFile,
    Directory,
    File,
}

/// The step kubelet makes next, when one is expected.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NextStep {
    pub method: String,
    /// The same call again (kubelet retries a failed step).
    pub retry: bool,
}

/// A kernel event of the pod, and how often it was repeated right after
/// (a retry loop) and until when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KernelEntry {
    pub event: SandboxEvent,
    pub again: u32,
    pub until: Timestamp,
}

/// A finding against the pod.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PodFinding {
    pub rule: &'static str,
    pub plugin: Option<String>,
    pub detail: Detail,
}

/// What `explain` knows of one pod: data, which `sinks::explain` puts into
/// words.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Explanation {
    /// "namespace/name".
    pub pod: String,
    pub sandbox_id: Option<String>,
    /// The pod's uid (kubelet's paths name the pod by it), when known.
    pub uid: Option<String>,
    pub verdict: Verdict,
    /// Where the CRI calls stand.
    pub progress: TeardownProgress,
    /// What holds it below the CRI calls, when something does.
    pub blocker: Option<Blocker>,
    /// The teardown calls seen, in order.
    pub steps: Vec<TeardownStep>,
    /// The step kubelet makes next, when one is expected.
    pub expected_next: Option<NextStep>,
    /// How long the expected step has been waited for (capture time).
    pub waited_ns: Option<u64>,
    /// Contract findings against the pod.
    pub findings: Vec<PodFinding>,
    /// Container ids of the pod and their names (for the node inspection).
    pub containers: Vec<(String, String)>,
    /// What the kernel saw of the pod (sandbox probes), oldest first.
    pub kernel: Vec<KernelEntry>,
    /// Processes of the pod that were sent SIGKILL and were not seen to
    /// exit (for the node inspection): (pid, container name).
    pub alive_after_kill: Vec<(u32, String)>,
}

#[derive(Debug, Default, Clone)]
struct PodTeardown {
    label: String,
    sandbox_id: Option<String>,
    uid: Option<String>,
    /// Container id -> name.
    containers: BTreeMap<String, String>,
    steps: VecDeque<TeardownStep>,
    findings: Vec<PodFinding>,
    last_seen: u64,
    /// The last call of any kind: (method, end or start).
    last_call: Option<(String, Option<Timestamp>)>,
    /// Kernel events of the pod's processes and paths, oldest first, with
    /// how often each was repeated right after (retry loops) and when last.
    kernel: VecDeque<(SandboxEvent, u32, Timestamp)>,
    /// Teardown hooks called and not ended yet, by (connection, mux
    /// conn, stream id).
    pending_hooks: BTreeMap<(u64, u32, u32), NriCall>,
    /// Teardown calls made and not ended yet, by (connection, stream id).
    pending_calls: BTreeMap<(u64, u32), CriCall>,
    /// The connection of its latest call (made or ended).
    last_conn: Option<u64>,
}

impl Explanation {
    /// What the node shows now, as its caller read it: process `pid` of
    /// `container` has SIGKILL pending and has not exited. When the trace
    /// named no blocker and the pod is not gone, that is the blocker (its
    /// SIGKILL went before the trace began, so no signal event shows it).
    pub fn note_pending_kill(
        &mut self,
        pid: u32,
        comm: &str,
        container: &str,
        state: &str,
        wchan: &str,
    ) {
        if self.blocker.is_some() || self.verdict == Verdict::Gone {
            return;
        }
        self.verdict = Verdict::Blocked;
        self.blocker = Some(Blocker::PendingSigkill {
            pid,
            comm: comm.into(),
            container: container.into(),
            state: state.into(),
            wchan: wchan.into(),
        });
    }
}

/// The teardown of every pod, from trace records.
#[derive(Debug, Default, Clone)]
pub struct TeardownLog {
    /// Sandbox id (or "ns/name" before one is known) -> teardown.
    pods: HashMap<String, PodTeardown>,
    /// Container id -> sandbox id.
    by_container: HashMap<String, String>,
    /// Pod uid -> its key: kubelet's paths name a pod by uid.
    by_uid: HashMap<String, String>,
    /// "ns/name" -> sandbox ids, newest last.
    by_label: HashMap<String, Vec<String>>,
    /// Latest capture time seen.
    now_ns: u64,
    /// Its wall clock minus its monotonic clock (which boot it is from).
    wall_offset_ns: i128,
    /// CRI connections that closed: when, and their client's label.
    conns_gone: HashMap<u64, (Timestamp, Option<String>)>,
    /// When a CRI connection was seen first last (capture time), by its
    /// client's comm ("" when unknown): a client that connects again asks
    /// for its pods again; another one (nri-trace's own state query, a
    /// crictl) does not ask for them.
    conn_opened: HashMap<String, u64>,
}

/// The comm of a client label `comm[pid]` ("" when unknown).
fn comm_of(label: Option<&str>) -> &str {
    label.map_or("", |l| CriClient::comm_of_label(l).unwrap_or(l))
}

/// Most closed CRI connections remembered (kubelet keeps one for days).
const MAX_CONNS_GONE: usize = 256;

impl TeardownLog {
    pub fn new() -> Self {
        Self::default()
    }

    /// Take one trace record.
    pub fn on_record(&mut self, r: &Record) {
        match r {
            Record::CriSpan(s) => {
                for h in &s.hooks {
                    self.hook_ended(&h.call);
                }
                self.on_span(s)
            }
            Record::NriUncaused(u) => self.hook_ended(&u.span.call),
            Record::Observed(Observation::NriPending(c)) => self.hook_called(c),
            Record::Observed(Observation::CriPending(c)) => self.call_made(c),
            Record::Observed(Observation::CriConnection { ts, client, .. }) => {
                let comm = comm_of(client.as_deref());
                if self.conn_opened.len() < MAX_CONNS_GONE || self.conn_opened.contains_key(comm) {
                    let at = self.conn_opened.entry(comm.to_owned()).or_default();
                    *at = (*at).max(ts.mono_ns);
                }
            }
            Record::Observed(Observation::CriConnectionGone { conn, ts, client }) => {
                if self.conns_gone.len() >= MAX_CONNS_GONE {
                    let oldest = self
                        .conns_gone
                        .iter()
                        .min_by_key(|(_, (t, _))| t.mono_ns)
                        .map(|(c, _)| *c);
                    oldest.map(|c| self.conns_gone.remove(&c));
                }
                self.conns_gone.insert(conn.0, (*ts, client.clone()));
            }
            Record::Observed(Observation::Sandbox(s)) => self.on_kernel(s),
            Record::Observed(Observation::CriState(s)) => self.on_state(s),
            Record::Violation(v) => {
                if let Some(key) = v.pod.as_ref().and_then(|l| self.key_of_label(l)) {
                    if let Some(p) = self.pods.get_mut(&key) {
                        if p.findings.len() < MAX_STEPS {
                            p.findings.push(PodFinding {
                                rule: v.rule,
                                plugin: v.plugin.clone(),
                                detail: v.detail.clone(),
                            });
                        }
                    }
                }
            }
            Record::Observed(_) => {}
        }
    }

    fn key_of_label(&self, label: &str) -> Option<String> {
        if self.pods.contains_key(label) {
            return Some(label.to_string());
        }
        self.by_label.get(label).and_then(|v| v.last()).cloned()
    }

    /// The key of the pod `c` is of, its entry made or updated with what
    /// `c` names (sandbox id, uid, label); the capture clock moved to
    /// `c`'s time.
    fn pod_of_call(&mut self, c: &CriCall) -> Option<String> {
        let at = c.end.or(c.start).map_or(0, |t| t.mono_ns);
        if at > self.now_ns {
            self.now_ns = at;
            if let Some(t) = c.end.or(c.start) {
                self.wall_offset_ns = i128::from(t.wall_ns) - i128::from(t.mono_ns);
            }
        }
        let sandbox = c.sandbox_id.clone().or_else(|| {
            c.container_id
                .as_ref()
                .and_then(|id| self.by_container.get(id).cloned())
        });
        let label = c.pod.as_ref().map(ToString::to_string);
        let key = sandbox.clone().or_else(|| label.clone())?;
        let key_out = key.clone();
        self.bound();
        let uid = c.pod.as_ref().map(|p| &p.uid).filter(|u| !u.is_empty());
        if let Some(uid) = uid {
            self.by_uid.insert(uid.clone(), key.clone());
        }
        let p = self.pods.entry(key.clone()).or_default();
        if uid.is_some() {
            p.uid = uid.cloned();
        }
        if let Some(l) = &label {
            p.label.clone_from(l);
            let ids = self.by_label.entry(l.clone()).or_default();
            if !ids.contains(&key) {
                ids.push(key);
                if ids.len() > 8 {
                    ids.remove(0);
                }
            }
        } else if p.label.is_empty() {
            p.label = key;
        }
        p.sandbox_id = sandbox.or_else(|| p.sandbox_id.take());
        if at >= p.last_seen {
            p.last_conn = Some(c.conn.0);
        }
        p.last_seen = p.last_seen.max(at);
        Some(key_out)
    }

    /// A teardown call made, its end not seen yet.
    fn call_made(&mut self, c: &CriCall) {
        let key = self.pod_of_call(c);
        if let Some(p) = key.and_then(|k| self.pods.get_mut(&k)) {
            if p.pending_calls.len() < MAX_STEPS {
                p.pending_calls.insert((c.conn.0, c.stream_id), c.clone());
            }
        }
    }

    fn on_span(&mut self, s: &CriSpan) {
        let c = &s.call;
        let Some(p) = self.pod_of_call(c).and_then(|k| self.pods.get_mut(&k)) else {
            return;
        };
        p.pending_calls.remove(&(c.conn.0, c.stream_id));
        let method = c.method_name().unwrap_or("(unknown)").to_owned();
        p.last_call = Some((method.clone(), c.end.or(c.start)));
        if let (Some(id), Some(sb)) = (&c.container_id, &p.sandbox_id) {
            let name = c
                .container
                .as_ref()
                .map(|k| k.name.clone())
                .or_else(|| p.containers.get(id).cloned())
                .unwrap_or_else(|| short_id(id).to_owned());
            p.containers.insert(id.clone(), name);
            if p.containers.len() > MAX_STEPS {
                let first = p.containers.keys().next().cloned();
                first.map(|k| p.containers.remove(&k));
            }
            self.by_container.insert(id.clone(), sb.clone());
        }
        if !c
            .cri_method()
            .is_some_and(|m| TEARDOWN_METHODS.contains(&m))
        {
            return;
        }
        // A plugin's refusal of a per-event method is followed by the
        // StateChange that delivers the event: not a step of its own.
        let hooks = s
            .hooks
            .iter()
            .filter(|h| !h.call.is_fallback_refusal())
            .map(|h| StepHook {
                plugin: h.call.plugin.label(),
                hook: h.hook.to_string(),
                own_ns: h.own_ns,
                outcome: h.call.outcome.clone(),
            })
            .collect();
        let step = TeardownStep {
            method,
            container: c
                .container_id
                .as_ref()
                .and_then(|id| p.containers.get(id).cloned()),
            container_id: c.container_id.clone(),
            start: c.start,
            duration_ns: c.duration_ns,
            outcome: c.outcome.clone(),
            hooks,
        };
        if p.steps.len() >= MAX_STEPS {
            p.steps.pop_front();
        }
        p.steps.push_back(step);
    }

    fn hook_called(&mut self, c: &NriCall) {
        let key = c
            .pod
            .as_ref()
            .map(|p| p.id.clone())
            .filter(|id| self.pods.contains_key(id))
            .or_else(|| {
                c.container
                    .as_ref()
                    .and_then(|k| self.by_container.get(&k.id).cloned())
            });
        if let Some(p) = key.and_then(|k| self.pods.get_mut(&k)) {
            if p.pending_hooks.len() < MAX_STEPS {
                p.pending_hooks
                    .insert((c.conn.0, c.mux_conn, c.stream_id), c.clone());
            }
        }
    }

    fn hook_ended(&mut self, c: &NriCall) {
        let key = (c.conn.0, c.mux_conn, c.stream_id);
        let pod = c.pod.as_ref().map(|p| p.id.as_str());
        match pod.and_then(|id| self.pods.get_mut(id)) {
            Some(p) => {
                p.pending_hooks.remove(&key);
            }
            None => self.pods.values_mut().for_each(|p| {
                p.pending_hooks.remove(&key);
            }),
        }
    }

    /// The pod a kernel event is about: a container or sandbox id of a
    /// known pod in its paths or cgroup (or, for an exit, in the cgroup the
    /// process was in when it was signalled).
    /// The runtime's own lists (at the attach, after a restart): pods made
    /// before the trace get their name, uid and containers, so that a pod
    /// already stuck is found by name and its kernel events by its ids.
    fn on_state(&mut self, s: &CriState) {
        for pod in &s.pods {
            self.bound();
            let label = pod.to_string();
            let p = self.pods.entry(pod.id.clone()).or_default();
            p.label.clone_from(&label);
            p.sandbox_id = Some(pod.id.clone());
            if !pod.uid.is_empty() {
                p.uid = Some(pod.uid.clone());
            }
            p.last_seen = p.last_seen.max(s.ts.mono_ns);
            let ids = self.by_label.entry(label).or_default();
            if !ids.contains(&pod.id) {
                ids.push(pod.id.clone());
                if ids.len() > 8 {
                    ids.remove(0);
                }
            }
            if !pod.uid.is_empty() {
                self.by_uid.insert(pod.uid.clone(), pod.id.clone());
            }
        }
        for c in &s.containers {
            if let Some(p) = self.pods.get_mut(&c.sandbox_id) {
                if p.containers.len() < MAX_STEPS {
                    p.containers.insert(c.id.clone(), c.name.clone());
                    self.by_container.insert(c.id.clone(), c.sandbox_id.clone());
                }
            }
        }
    }

    fn on_kernel(&mut self, ev: &SandboxEvent) {
        // The teardown's events: what makes a pod is left out.
        if matches!(
            ev.op,
            SandboxOp::CgroupMkdir { .. }
                | SandboxOp::NsBind { .. }
                | SandboxOp::Unshare { .. }
                | SandboxOp::Setns { .. }
                | SandboxOp::CloneNs { .. }
                | SandboxOp::Exec { .. }
        ) {
            return;
        }
        let texts = ev.pod_texts();
        let key = texts.iter().flat_map(|t| ids_in(t)).find_map(|id| {
            if self.pods.contains_key(id) {
                Some(id.to_string())
            } else {
                self.by_container.get(id).cloned()
            }
        });
        // kubelet's share: its volume directories and pod cgroup.
        let key = key.or_else(|| {
            texts
                .iter()
                .flat_map(|t| pod_uids_in(t))
                .find_map(|uid| self.by_uid.get(&uid).cloned())
        });
        // An exit of a process signalled earlier: the pod of that signal.
        let key = key.or_else(|| match ev.op {
            SandboxOp::Exit { .. } => self.pods.iter().find_map(|(k, p)| {
                p.kernel
                    .iter()
                    .any(|(e, ..)| matches!(e.op, SandboxOp::Signal { target, .. } if target == ev.tgid))
                    .then(|| k.clone())
            }),
            _ => None,
        });
        let Some(p) = key.and_then(|k| self.pods.get_mut(&k)) else {
            return;
        };
        match p.kernel.back_mut() {
            // The same call with the same result again: a retry loop.
            Some((last, n, at)) if last.op == ev.op && last.tgid == ev.tgid => {
                *n += 1;
                *at = ev.ts;
            }
            _ => {
                if p.kernel.len() >= MAX_KERNEL {
                    p.kernel.pop_front();
                }
                p.kernel.push_back((ev.clone(), 0, ev.ts));
            }
        }
        p.last_seen = p.last_seen.max(ev.ts.mono_ns);
        if ev.ts.mono_ns > self.now_ns {
            self.now_ns = ev.ts.mono_ns;
        }
    }

    /// At most [`MAX_PODS`] pods: the ones seen longest ago go.
    fn bound(&mut self) {
        if self.pods.len() < MAX_PODS {
            return;
        }
        let mut seen: Vec<(u64, String)> = self
            .pods
            .iter()
            .map(|(k, p)| (p.last_seen, k.clone()))
            .collect();
        seen.sort();
        for (_, k) in seen.into_iter().take(MAX_PODS / 4) {
            self.pods.remove(&k);
        }
        let pods = &self.pods;
        self.by_container.retain(|_, sb| pods.contains_key(sb));
        self.by_uid.retain(|_, k| pods.contains_key(k));
        self.by_label.retain(|_, ids| {
            ids.retain(|k| pods.contains_key(k));
            !ids.is_empty()
        });
    }

    /// The latest capture time seen, and the recording's wall clock minus
    /// its monotonic clock (the same as this boot's when it was recorded
    /// since this boot).
    pub fn last_seen(&self) -> (u64, i128) {
        (self.now_ns, self.wall_offset_ns)
    }

    /// Whether a teardown attempt of `pod` that began at or after
    /// `since_ns` has been seen through by capture time `now_ns`: a
    /// teardown call of it that ended at least `settle_ns` before (the
    /// kernel rules hold their findings that long: `SETTLE_NS`), a hook
    /// under one or a teardown call pending that long, or the pod removed. `explain` without
    /// a recording waits for this: kubelet retries a terminating pod's
    /// teardown every few seconds, and one attempt shows where it fails.
    pub fn attempt_seen(&self, pod: &str, since_ns: u64, settle_ns: u64, now_ns: u64) -> bool {
        let Some(p) = self.find(pod).and_then(|k| self.pods.get(&k)) else {
            return false;
        };
        let ripe = |t: u64| t >= since_ns && now_ns.saturating_sub(t) >= settle_ns;
        let removed = p
            .steps
            .iter()
            .any(|s| s.method == "RemovePodSandbox" && s.ok());
        removed
            || p.steps.iter().any(|s| {
                s.start.is_some_and(|t| {
                    t.mono_ns >= since_ns && ripe(t.mono_ns + s.duration_ns.unwrap_or(0))
                })
            })
            || p.pending_hooks
                .values()
                .any(|c| c.start.is_some_and(|t| ripe(t.mono_ns)))
            || p.pending_calls
                .values()
                .any(|c| c.start.is_some_and(|t| ripe(t.mono_ns)))
    }

    /// The pods known, "namespace/name" (or sandbox id).
    pub fn pods(&self) -> Vec<String> {
        let mut v: Vec<String> = self.pods.values().map(|p| p.label.clone()).collect();
        v.sort();
        v.dedup();
        v
    }

    /// Explain the teardown of `pod` ("namespace/name", "name", or a
    /// sandbox id or its prefix) as of capture time `now_ns` (0: the last
    /// record's time). `None` when no call of it was seen.
    pub fn explain(&self, pod: &str, now_ns: u64) -> Option<Explanation> {
        let now = if now_ns == 0 { self.now_ns } else { now_ns };
        let p = &self.pods[&self.find(pod)?];
        let mut e = Self::explain_calls(p, now);
        let kernel = kernel_cause(p, now);
        if let Some(Blocker::AliveAfterKill { signals, .. }) = &kernel {
            e.alive_after_kill = signals
                .iter()
                .filter_map(|s| match &s.op {
                    SandboxOp::Signal {
                        target,
                        target_cgroup,
                        ..
                    } => Some((*target, container_of(p, target_cgroup.as_deref()))),
                    _ => None,
                })
                .collect();
        }
        if e.verdict == Verdict::Gone {
            return Some(e);
        }
        // A hook not returned, or the kernel's side, names the blocker
        // below the CRI call.
        let client_gone = || client_gone(p, &self.conns_gone, &self.conn_opened, now);
        if let Some(b) = hook_cause(p, now).or(kernel).or_else(client_gone) {
            if e.verdict == Verdict::Waiting || e.verdict == Verdict::NotTornDown {
                e.verdict = Verdict::Blocked;
            }
            e.blocker = Some(b);
        }
        Some(e)
    }

    /// What the CRI calls and their hooks say of `p`: the steps that
    /// ended, then the call still running, when one is.
    fn explain_calls(p: &PodTeardown, now: u64) -> Explanation {
        let mut e = Self::explain_steps(p, now);
        if e.verdict != Verdict::Gone {
            pending_call(&mut e, p, now);
        }
        e
    }

    /// What the teardown calls that ended and their hooks say of `p`.
    fn explain_steps(p: &PodTeardown, now: u64) -> Explanation {
        let steps: Vec<TeardownStep> = p.steps.iter().cloned().collect();
        let mut e = Explanation {
            pod: p.label.clone(),
            sandbox_id: p.sandbox_id.clone(),
            uid: p.uid.clone(),
            verdict: Verdict::NotTornDown,
            progress: TeardownProgress::NotStarted {
                last_call: None,
                at: None,
            },
            blocker: None,
            steps: steps.clone(),
            expected_next: None,
            waited_ns: None,
            findings: p.findings.clone(),
            containers: p
                .containers
                .iter()
                .map(|(id, n)| (id.clone(), n.clone()))
                .collect(),
            kernel: p
                .kernel
                .iter()
                .map(|(event, again, until)| KernelEntry {
                    event: event.clone(),
                    again: *again,
                    until: *until,
                })
                .collect(),
            alive_after_kill: Vec::new(),
        };
        // Gone: RemovePodSandbox succeeded.
        if let Some(rm) = steps
            .iter()
            .rfind(|s| s.method == "RemovePodSandbox" && s.ok())
        {
            let first = steps.first().and_then(|s| s.start).map_or(0, |t| t.mono_ns);
            let end = rm.start.map_or(0, |t| t.mono_ns) + rm.duration_ns.unwrap_or(0);
            e.verdict = Verdict::Gone;
            e.progress = TeardownProgress::Removed {
                took_ns: end.saturating_sub(first),
            };
            return e;
        }
        let Some(last) = steps.last() else {
            let (m, t) = p.last_call.clone().unwrap_or_default();
            e.progress = TeardownProgress::NotStarted {
                last_call: (!m.is_empty()).then_some(m),
                at: t,
            };
            e.expected_next = Some(NextStep {
                method: "StopPodSandbox".into(),
                retry: false,
            });
            e.waited_ns = t.map(|t| now.saturating_sub(t.mono_ns));
            return e;
        };
        let last_i = steps.len() - 1;
        // A failed hook under the last step with one.
        if let Some((i, s)) = steps
            .iter()
            .enumerate()
            .rev()
            .find(|(_, s)| s.failed_hooks().next().is_some())
        {
            let hook = s.hooks.iter().position(|h| !h.outcome.is_ok()).unwrap_or(0);
            e.progress = TeardownProgress::HookFailed { step: i, hook };
            if s.ok() && last.ok() {
                // The runtime went past the failed hook (containerd logs a
                // failed StopPodSandbox or RemovePodSandbox notification
                // and goes on: internal/cri/server/sandbox_stop.go): the
                // hook holds nothing, kubelet's next call is awaited.
                e.verdict = Verdict::Waiting;
                let (next, waited) = Self::next_step(last, now);
                e.expected_next = next;
                e.waited_ns = waited;
            } else {
                // The runtime returned the plugin's error (CRI-O's
                // StopPodSandbox) and kubelet retries: blocked on it.
                e.verdict = Verdict::Blocked;
                e.expected_next = Some(NextStep {
                    method: s.method.clone(),
                    retry: true,
                });
            }
            return e;
        }
        if !last.ok() {
            e.verdict = Verdict::Blocked;
            e.progress = TeardownProgress::CallFailed { step: last_i };
            e.expected_next = Some(NextStep {
                method: last.method.clone(),
                retry: true,
            });
            e.waited_ns = last
                .start
                .map(|t| now.saturating_sub(t.mono_ns + last.duration_ns.unwrap_or(0)));
            return e;
        }
        let (next, waited) = Self::next_step(last, now);
        e.verdict = Verdict::Waiting;
        e.progress = TeardownProgress::NextNotCalled { step: last_i };
        e.expected_next = next;
        e.waited_ns = waited;
        e
    }

    /// The step kubelet makes after `last`, and how long it has been
    /// waited for.
    fn next_step(last: &TeardownStep, now: u64) -> (Option<NextStep>, Option<u64>) {
        let next = match last.method.as_str() {
            "StopContainer" | "RemoveContainer" => "StopPodSandbox",
            "StopPodSandbox" => "RemovePodSandbox",
            _ => return (None, None),
        };
        let ended = last
            .start
            .map(|t| t.mono_ns + last.duration_ns.unwrap_or(0));
        (
            Some(NextStep {
                method: next.into(),
                retry: false,
            }),
            ended.map(|e| now.saturating_sub(e)),
        )
    }

    fn find(&self, pod: &str) -> Option<String> {
        if let Some(k) = self.key_of_label(pod) {
            return Some(k);
        }
        // "name" alone, or a sandbox id prefix: only when it is unique.

        // Several pods of that name (recreated): the one seen last.
        self.pods
            .iter()
            .filter(|(k, p)| {
                p.label.rsplit('/').next() == Some(pod) || (pod.len() >= 6 && k.starts_with(pod))
            })
            .map(|(k, _)| k)
            .max_by_key(|k| self.pods[*k].last_seen)
            .cloned()
    }
}

mod causes;
use causes::{client_gone, container_of, hook_cause, kernel_cause, pending_call};

#[cfg(test)]
pub(crate) mod tests;
