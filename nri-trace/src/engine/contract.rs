//! The NRI contract, checked: rules over the correlated stream (CRI spans
//! with their hooks, uncaused NRI calls, plugins coming and going, capture
//! loss), each finding a [`Violation`] with its rule, the calls that show
//! it, and whether the evidence is complete.
//!
//! The rules, their statements and sources are [`RULES`] (documented in
//! docs/contract.md). Timestamps, not arrival order, decide orderings, so a
//! replay gives the same findings as the live run. A rule that sees
//! something wrong with incomplete evidence (capture loss, a resync, a
//! plugin whose subscription was never seen) reports it
//! [`Certainty::Uncertain`] with the reason; where it cannot see enough to
//! judge (a pod created before the trace) it stays silent.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use super::{
    adjustment_rejected,
    correlate::{CriSpan, NoCause},
    findings::{
        rule, Certainty, Detail, Evidence, Severity, Violation, CONTAINER_BEFORE_POD_READY,
        CONTAINER_EVENT_ORDER, CONTAINER_IN_STOPPED_POD, HOOK_OVER_BUDGET, NAME_RESERVATION_RETRY,
        PLUGIN_TIMEOUT, POD_EVENT_ORDER, POD_UNKNOWN_TO_PLUGIN, SPLIT_SYNCHRONIZE_REPLY,
        SUBSCRIBED_NOT_DELIVERED, TEARDOWN_HOOK_FAILED, UNEXPLAINED_AFTER_RESTART,
        UNSUBSCRIBED_DELIVERED,
    },
    hook_latency::HookSpan,
    record::Record,
    sandbox_rules::SandboxRules,
    split_reply::split_reply_detail,
};
use crate::{
    capture::{ConnId, Timestamp},
    model::{
        cri_call::{CriCall, CriOutcome},
        nri_call::{IdentitySource, Outcome},
        observation::Observation,
    },
};

/// What the checker is told.
#[derive(Debug, Clone, Copy, Default)]
pub struct ContractConfig {
    /// A fixed hook budget; default: half of each request's timeout.
    pub hook_budget_ns: Option<u64>,
}

pub(super) fn nri_evidence(h: &HookSpan) -> Evidence {
    Evidence::Nri {
        conn: h.call.conn,
        stream_id: h.call.stream_id,
        hook: h.hook.clone(),
        plugin: h.call.plugin.label(),
        start: h.call.start,
        outcome: h.call.outcome.clone(),
    }
}

pub(super) fn cri_evidence(c: &CriCall) -> Evidence {
    Evidence::Cri {
        conn: c.conn,
        stream_id: c.stream_id,
        method: c.method.clone(),
        start: c.start,
        outcome: c.outcome.clone(),
    }
}

/// The capture time a record is about (its end).
fn record_time(r: &Record) -> Option<u64> {
    let t = match r {
        Record::CriSpan(s) => s.call.end.or(s.call.start),
        Record::NriUncaused(u) => u.span.call.end.or(u.span.call.start),
        Record::Observed(
            Observation::NriPlugin { ts, .. }
            | Observation::NriPluginGone { ts, .. }
            | Observation::NriResync { ts, .. }
            | Observation::RuntimeExited { ts, .. }
            | Observation::RuntimeStarted { ts, .. },
        ) => Some(*ts),
        Record::Observed(Observation::Sandbox(s)) => Some(s.ts),
        _ => None,
    };
    t.map(|t| t.mono_ns)
}

fn pod_of_hook(h: &HookSpan) -> Option<String> {
    h.call.pod.as_ref().map(ToString::to_string)
}

fn ts0() -> Timestamp {
    Timestamp {
        mono_ns: 0,
        wall_ns: 0,
    }
}

#[derive(Debug, Default)]
struct PluginState {
    label: String,
    index: Option<String>,
    /// From Configure; `None` when it registered before the trace.
    events: Option<Vec<String>>,
    /// Without `events`: the events it was delivered, which it is
    /// subscribed to (the runtime sends a plugin only what it subscribed
    /// to), the part of its mask the trace can know.
    learned: BTreeSet<String>,
    since: u64,
    gone: Option<u64>,
    timed_out: bool,
    resynced: bool,
    /// Events it was subscribed to and missed after it was gone.
    missed_after_gone: u64,
    /// Its RegisterPlugin was seen (so was its whole handshake).
    registered: bool,
    /// Pods its Synchronize listed, on this connection (`None`: none seen).
    synced: Option<BTreeSet<String>>,
    /// Pods it received RunPodSandbox for, on this connection.
    run_pods: BTreeSet<String>,
}

const POD_ORDER: [&str; 3] = ["RUN_POD_SANDBOX", "STOP_POD_SANDBOX", "REMOVE_POD_SANDBOX"];
const CONTAINER_ORDER: [&str; 4] = [
    "CREATE_CONTAINER",
    "START_CONTAINER",
    "STOP_CONTAINER",
    "REMOVE_CONTAINER",
];

/// Most objects (pod or container per plugin, pods, pending retries) the
/// checker remembers. Past it, the oldest state is dropped: memory stays
/// bounded on a node that runs for months, at the price of not seeing an
/// order violation across the forgotten part.
pub const MAX_TRACKED: usize = 16_384;
/// How long (capture time) a pod-unknown-to-plugin finding is held before
/// it is reported: a RunPodSandbox delivery that started before the event
/// but answered after it (containerd gives up on a hook at the CRI
/// deadline and goes on, the plugin still busy) settles later, and would
/// show the plugin was told after all.
pub const UNKNOWN_POD_HOLD_NS: u64 = 30_000_000_000;
/// Most disconnected plugin connections remembered (timed-out ones are
/// kept first: what they missed is reported at the end).
pub const MAX_GONE_PLUGINS: usize = 64;

/// Pure checker of the contract rules.
#[derive(Default)]
pub struct ContractChecker {
    cfg: ContractConfig,
    plugins: BTreeMap<ConnId, PluginState>,
    /// Capture loss seen: every finding from then on is uncertain.
    lossy: bool,
    /// (plugin, object id) -> event -> first delivery start.
    seen: HashMap<(String, String), BTreeMap<&'static str, u64>>,
    /// Rule firings already reported: (rule, plugin, object).
    fired: BTreeSet<(&'static str, String, String)>,
    /// Pod id -> end of its RunPodSandbox operation (last hook end).
    pod_ready: HashMap<String, u64>,
    /// Pod id -> first StopPodSandbox delivery start.
    pod_stopped: HashMap<String, u64>,
    /// CRI requests whose client gave up: key -> (first start, calls).
    retries: HashMap<String, (Timestamp, Vec<CriCall>)>,
    /// Plugin -> pods announced to it (Synchronize, RunPodSandbox); only for
    /// plugins whose Synchronize was seen.
    announced: HashMap<String, BTreeSet<String>>,
    /// Plugin label -> its current connection.
    by_label: HashMap<String, ConnId>,
    /// The last runtime restart: (when, the new runtime pid).
    restart: Option<(u64, u32)>,
    /// Pod ids seen in any call (bounded by [`MAX_TRACKED`]).
    pods_seen: HashSet<String>,
    /// `pods_seen` when the runtime last restarted.
    pods_before_restart: HashSet<String>,
    /// pod-unknown-to-plugin findings held back (see
    /// [`UNKNOWN_POD_HOLD_NS`]): (event start, plugin, pod id, finding).
    unknown_pending: Vec<(u64, String, String, Violation)>,
    /// The latest capture time in the records.
    clock_ns: u64,
    /// The kernel side of teardowns (sandbox probes).
    sandbox: SandboxRules,
}

impl ContractChecker {
    pub fn new(cfg: ContractConfig) -> Self {
        ContractChecker {
            cfg,
            ..Default::default()
        }
    }

    fn certainty(&self, plugin: Option<&PluginState>) -> Certainty {
        if self.lossy {
            return Certainty::Uncertain {
                why: "the capture lost records".into(),
            };
        }
        if plugin.is_some_and(|p| p.resynced) {
            return Certainty::Uncertain {
                why: "the plugin's connection lost bytes or was joined mid-stream".into(),
            };
        }
        Certainty::Certain
    }

    /// The certainty of a finding that rests on `p`'s subscription to
    /// `hook`: uncertain when that subscription is only learned from
    /// deliveries (its Configure was not seen).
    fn mask_certainty(&self, p: &PluginState, hook: &str) -> Certainty {
        match self.certainty(Some(p)) {
            Certainty::Certain if p.events.is_none() => Certainty::Uncertain {
                why: format!(
                    "{}'s Configure was not seen (it registered before the capture): its \
                     subscription to {hook} is learned from the deliveries it received",
                    p.label
                ),
            },
            c => c,
        }
    }

    /// A finding of `rule_id` shown by delivery `h` to plugin `label`.
    fn hook_finding(
        &self,
        rule_id: &'static str,
        h: &HookSpan,
        label: &str,
        detail: Detail,
    ) -> Violation {
        Violation {
            rule: rule_id,
            severity: rule(rule_id).map_or(Severity::Error, |r| r.severity),
            certainty: self.certainty(self.plugin_by_label(label)),
            ts: h.call.end.or(h.call.start).unwrap_or_else(ts0),
            pod: pod_of_hook(h),
            plugin: Some(label.to_owned()),
            detail,
            evidence: vec![nri_evidence(h)],
        }
    }

    /// The plugin connection with this label: the one that connected last
    /// (a plugin that reconnected has had several).
    fn plugin_by_label(&self, label: &str) -> Option<&PluginState> {
        self.by_label.get(label).and_then(|c| self.plugins.get(c))
    }

    /// Feed one record (in the order the trace analysis emits them).
    pub fn on_record(&mut self, r: &Record, out: &mut Vec<Violation>) {
        self.bound();
        if let Some(t) = record_time(r) {
            self.clock_ns = self.clock_ns.max(t);
        }
        self.check_record(r, out);
        self.release_unknown(self.clock_ns.saturating_sub(UNKNOWN_POD_HOLD_NS), out);
        self.sandbox.release(self.clock_ns, out);
    }

    /// The capture has reached `now_ns` (a clock observation): findings
    /// of the kernel rules held until then are due, even when no record
    /// came (a pod stuck in silence).
    pub fn advance(&mut self, now_ns: u64, out: &mut Vec<Violation>) {
        self.clock_ns = self.clock_ns.max(now_ns);
        self.sandbox.release(self.clock_ns, out);
    }

    /// Report the held pod-unknown findings of events before `before`.
    fn release_unknown(&mut self, before: u64, out: &mut Vec<Violation>) {
        if self.unknown_pending.iter().all(|p| p.0 >= before) {
            return;
        }
        let (due, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut self.unknown_pending)
            .into_iter()
            .partition(|p| p.0 < before);
        self.unknown_pending = keep;
        out.extend(due.into_iter().map(|p| p.3));
    }

    /// Keep every map under [`MAX_TRACKED`]: drop the state of the objects
    /// seen longest ago (by their first event).
    fn bound(&mut self) {
        if self.seen.len() > MAX_TRACKED {
            let mut firsts: Vec<u64> = self
                .seen
                .values()
                .map(|e| e.values().copied().min().unwrap_or(0))
                .collect();
            firsts.sort_unstable();
            let cut = firsts[firsts.len() / 2];
            self.seen
                .retain(|_, e| e.values().copied().min().unwrap_or(0) > cut);
            self.seen.shrink_to_fit();
        }
        for m in [&mut self.pod_ready, &mut self.pod_stopped] {
            if m.len() > MAX_TRACKED {
                let mut v: Vec<u64> = m.values().copied().collect();
                v.sort_unstable();
                let cut = v[v.len() / 2];
                m.retain(|_, t| *t > cut);
                m.shrink_to_fit();
            }
        }
        if self.fired.len() > MAX_TRACKED {
            self.fired.clear();
        }
        if self.retries.len() > MAX_TRACKED {
            self.retries.clear();
        }
    }

    /// At most [`MAX_GONE_PLUGINS`] disconnected plugin connections (called
    /// when one more goes).
    fn prune_gone_plugins(&mut self) {
        let gone = self.plugins.values().filter(|p| p.gone.is_some()).count();
        if gone > MAX_GONE_PLUGINS {
            // Oldest disconnections first, timed-out ones last.
            let mut order: Vec<(bool, u64, ConnId)> = self
                .plugins
                .iter()
                .filter_map(|(c, p)| Some((p.timed_out, p.gone?, *c)))
                .collect();
            order.sort();
            for (_, _, c) in order.into_iter().take(gone - MAX_GONE_PLUGINS / 2) {
                self.plugins.remove(&c);
            }
        }
    }

    /// `pods` were announced to plugin `label`. Forgetting some announced
    /// pods would make findings up: a plugin with too many is no longer
    /// judged (its entry goes).
    fn announce(&mut self, label: &str, pods: impl IntoIterator<Item = String>) {
        let known = self.announced.entry(label.to_owned()).or_default();
        known.extend(pods);
        if known.len() > MAX_TRACKED {
            self.announced.remove(label);
        }
    }

    fn check_record(&mut self, r: &Record, out: &mut Vec<Violation>) {
        match r {
            Record::Observed(Observation::NriPlugin {
                conn,
                ts,
                plugin,
                events,
                ..
            }) => {
                let p = self.plugins.entry(*conn).or_insert_with(|| PluginState {
                    since: ts.mono_ns,
                    ..Default::default()
                });
                let old_label = std::mem::replace(&mut p.label, plugin.label());
                p.index.clone_from(&plugin.index);
                p.registered |= plugin.source == IdentitySource::RegisterPlugin;
                if events.is_some() {
                    p.events.clone_from(events);
                }
                let label = p.label.clone();
                if old_label != label && self.by_label.get(&old_label) == Some(conn) {
                    self.by_label.remove(&old_label);
                }
                // A plugin that connects again supersedes its earlier
                // connection (kept only if it timed out: what it missed is
                // reported at the end).
                if let Some(prev) = self.by_label.insert(label, *conn) {
                    if prev != *conn && self.plugins.get(&prev).is_some_and(|p| !p.timed_out) {
                        self.plugins.remove(&prev);
                    }
                }
            }
            Record::Observed(Observation::NriPluginGone { conn, ts, .. }) => {
                if let Some(p) = self.plugins.get_mut(conn) {
                    p.gone = Some(ts.mono_ns);
                }
                self.prune_gone_plugins();
            }
            Record::Observed(Observation::NriResync { conn, .. }) => {
                if let Some(p) = self.plugins.get_mut(conn) {
                    p.resynced = true;
                }
            }
            Record::Observed(Observation::CaptureLoss(l)) => {
                if l.lost_records > 0 || l.read_faults > 0 || l.fd_map_full > 0 {
                    self.lossy = true;
                }
            }
            Record::NriUncaused(u) => {
                let h = &u.span;
                if u.no_cri_cause == NoCause::PluginLifecycle {
                    if h.call.method.as_deref() == Some("Synchronize") {
                        self.announce(
                            &h.call.plugin.label(),
                            h.call.synchronized_pods.iter().cloned(),
                        );
                        if let Some(p) = self.plugins.get_mut(&h.call.conn) {
                            p.synced
                                .get_or_insert_with(BTreeSet::new)
                                .extend(h.call.synchronized_pods.iter().cloned());
                        }
                        if let Some(detail) = split_reply_detail(&h.call) {
                            out.push(Violation {
                                rule: SPLIT_SYNCHRONIZE_REPLY,
                                severity: Severity::Error,
                                certainty: self.certainty(self.plugins.get(&h.call.conn)),
                                ts: h.call.end.or(h.call.start).unwrap_or_else(ts0),
                                pod: None,
                                plugin: Some(h.call.plugin.label()),
                                detail,
                                evidence: vec![nri_evidence(h)],
                            });
                        }
                    }
                    self.on_timeout(h, out);
                } else {
                    // An event delivery, whatever caused it.
                    self.on_hook(h, None, out);
                }
            }
            Record::CriSpan(s) => self.on_span(s, out),
            Record::Observed(Observation::RuntimeStarted { ts, pid }) => {
                self.restart = Some((ts.mono_ns, *pid));
                self.pods_before_restart = self.pods_seen.clone();
            }
            Record::Observed(Observation::Sandbox(s)) => {
                let certainty = self.certainty(None);
                self.sandbox.on_event(s, &certainty);
            }
            // Pods made before the attach: their ids and uids name the
            // paths of their teardown.
            Record::Observed(Observation::CriState(s)) => {
                for p in &s.pods {
                    self.sandbox
                        .learn(Some(&p.id), None, Some(&p.uid), Some(p.to_string()));
                }
                for c in &s.containers {
                    self.sandbox
                        .learn(Some(&c.sandbox_id), Some(&c.id), None, None);
                }
            }
            Record::Violation(_) | Record::Observed(_) => {}
        }
    }

    /// The stream ended: what can only be told at the end.
    pub fn finish(&mut self, out: &mut Vec<Violation>) {
        self.release_unknown(u64::MAX, out);
        self.finish_retries(out);
        self.sandbox.release(self.clock_ns, out);
        self.sandbox.finish();
        let gone: Vec<&PluginState> = self
            .plugins
            .values()
            .filter(|p| p.timed_out && p.missed_after_gone > 0)
            .collect();
        for p in gone {
            out.push(Violation {
                rule: PLUGIN_TIMEOUT,
                severity: Severity::Error,
                certainty: self.certainty(Some(p)),
                ts: Timestamp {
                    mono_ns: p.gone.unwrap_or(0),
                    wall_ns: 0,
                },
                pod: None,
                plugin: Some(p.label.clone()),
                detail: Detail::MissedAfterDisconnect {
                    missed: p.missed_after_gone,
                },
                evidence: vec![],
            });
        }
    }

    fn on_span(&mut self, s: &CriSpan, out: &mut Vec<Violation>) {
        self.check_retry(&s.call, out);
        self.sandbox.learn(
            s.call.sandbox_id.as_deref(),
            s.call.container_id.as_deref(),
            s.call.pod.as_ref().map(|p| p.uid.as_str()),
            s.call.pod.as_ref().map(ToString::to_string),
        );
        if let Some(id) = &s.call.sandbox_id {
            self.saw_pod(id);
        }
        for h in &s.hooks {
            self.on_hook(h, Some(s), out);
        }
        self.check_missed(s, out);
        self.check_missed_after_restart(s, out);
        out.extend(adjustment_rejected::check(s, self.certainty(None)));
        if let Some(h) = s.hooks.iter().rfind(|h| h.hook == "RUN_POD_SANDBOX") {
            if let Some(p) = &h.call.pod {
                let end = h.call.end.map_or(u64::MAX, |t| t.mono_ns);
                let e = self.pod_ready.entry(p.id.clone()).or_insert(0);
                *e = (*e).max(end);
            }
        }
    }

    fn on_timeout(&mut self, h: &HookSpan, out: &mut Vec<Violation>) {
        if h.call.outcome == Outcome::TimedOut {
            self.report_timeout(h, out);
        }
    }

    fn report_timeout(&mut self, h: &HookSpan, out: &mut Vec<Violation>) {
        let label = h.call.plugin.label();
        let conn = h.call.conn;
        let mut closed = false;
        if let Some(p) = self.plugins.get_mut(&conn) {
            p.timed_out = true;
            closed = p.gone.is_some();
        }
        let key = (PLUGIN_TIMEOUT, label.clone(), format!("{:?}", h.call.start));
        if !self.fired.insert(key) {
            return;
        }
        // containerd closes the connection only when its own timer fired;
        // on a cancelled CRI call it keeps it (model::nri_call module docs).
        out.push(self.hook_finding(
            PLUGIN_TIMEOUT,
            h,
            &label,
            Detail::PluginTimeout {
                hook: h.hook.clone(),
                timeout_ns: h.call.timeout_nano.and_then(|t| u64::try_from(t).ok()),
                connection_closed: closed,
            },
        ));
    }

    fn saw_pod(&mut self, id: &str) {
        if self.pods_seen.len() >= MAX_TRACKED {
            self.pods_seen.clear();
        }
        self.pods_seen.insert(id.to_owned());
    }

    /// A delivery, after a runtime restart, to a plugin connected since,
    /// of an event of a pod from before the restart that was never
    /// announced to it on this connection: reported (true) or not.
    fn check_after_restart(&mut self, h: &HookSpan, label: &str, out: &mut Vec<Violation>) -> bool {
        let (Some((restart, pid)), Some(pod)) = (self.restart, h.call.pod.as_ref()) else {
            return false;
        };
        let Some(p) = self.plugins.get(&h.call.conn) else {
            return false;
        };
        if p.since < restart
            || h.call.event.is_none()
            || h.hook == "RUN_POD_SANDBOX"
            || !self.pods_before_restart.contains(&pod.id)
            || p.run_pods.contains(&pod.id)
            || p.synced.as_ref().is_some_and(|s| s.contains(&pod.id))
        {
            return false;
        }
        if !self
            .fired
            .insert((UNEXPLAINED_AFTER_RESTART, label.to_owned(), pod.id.clone()))
        {
            return true;
        }
        let mut v = self.hook_finding(
            UNEXPLAINED_AFTER_RESTART,
            h,
            label,
            Detail::UnannouncedAfterRestart {
                hook: h.hook.clone(),
                runtime_pid: pid,
                synchronized: p.synced.is_some(),
            },
        );
        if !p.registered {
            v.certainty = Certainty::Uncertain {
                why: "the plugin's registration was not seen: its Synchronize may have gone \
                      before the capture followed it"
                    .into(),
            };
        }
        out.push(v);
        true
    }

    /// A teardown CRI call, after a runtime restart, of a pod from before
    /// it, that succeeded without delivering its event to any plugin
    /// subscribed to it (containerd's NRI state is in memory).
    fn check_missed_after_restart(&mut self, s: &CriSpan, out: &mut Vec<Violation>) {
        let Some((restart, pid)) = self.restart else {
            return;
        };
        let c = &s.call;
        let event = match c.method.as_deref() {
            Some("StopPodSandbox") => "STOP_POD_SANDBOX",
            Some("RemovePodSandbox") => "REMOVE_POD_SANDBOX",
            _ => return,
        };
        let (Some(id), Some(start)) = (c.sandbox_id.as_ref(), c.start) else {
            return;
        };
        if start.mono_ns < restart
            || !c.outcome.is_ok()
            || !self.pods_before_restart.contains(id)
            || s.hooks.iter().any(|h| h.hook == event)
        {
            return;
        }
        let missed: Vec<String> = self
            .by_label
            .iter()
            .filter_map(|(label, conn)| self.plugins.get(conn).map(|p| (label, p)))
            .filter(|(_, p)| p.gone.is_none() && p.since <= start.mono_ns)
            .filter(|(_, p)| {
                p.events
                    .as_ref()
                    .is_some_and(|e| e.iter().any(|x| x == event))
            })
            .filter(|(label, _)| {
                !self
                    .seen
                    .get(&((*label).clone(), id.clone()))
                    .is_some_and(|e| e.contains_key(event))
            })
            .map(|(label, _)| label.clone())
            .collect();
        if missed.is_empty()
            || !self.fired.insert((
                UNEXPLAINED_AFTER_RESTART,
                String::new(),
                format!("{event}{id}"),
            ))
        {
            return;
        }
        let mut missed = missed;
        missed.sort();
        out.push(Violation {
            rule: UNEXPLAINED_AFTER_RESTART,
            severity: Severity::Error,
            certainty: self.certainty(None),
            ts: c.end.unwrap_or(start),
            pod: c
                .pod
                .as_ref()
                .map(ToString::to_string)
                .or_else(|| Some(id.clone())),
            plugin: None,
            detail: Detail::UndeliveredAfterRestart {
                method: c.method.clone(),
                event: event.to_owned(),
                runtime_pid: pid,
                subscribed: missed,
            },
            evidence: vec![cri_evidence(c)],
        });
    }

    fn on_hook(&mut self, h: &HookSpan, span: Option<&CriSpan>, out: &mut Vec<Violation>) {
        let label = h.call.plugin.label();
        let start = h.call.start.map_or(0, |t| t.mono_ns);
        if let Some(pod) = h.call.pod.as_ref().filter(|p| !p.id.is_empty()) {
            let id = pod.id.clone();
            self.saw_pod(&id);
            if h.hook == "RUN_POD_SANDBOX" {
                if let Some(p) = self.plugins.get_mut(&h.call.conn) {
                    // Past the bound, forget the oldest half: a pod from
                    // before a restart is not created again after it.
                    if p.run_pods.len() >= MAX_TRACKED {
                        p.run_pods.clear();
                    }
                    p.run_pods.insert(id);
                }
            }
        }
        if let Some(p) = self.plugins.get_mut(&h.call.conn) {
            if p.events.is_none() && h.call.event.is_some() {
                p.learned.insert(h.hook.as_str().to_owned());
            }
        }
        let after_restart = self.check_after_restart(h, &label, out);
        let plugin = self.plugin_by_label(&label);
        // Unsubscribed delivery. Only against a mask seen in Configure: a
        // learned one holds every event delivered, so it cannot show one.
        if let Some(events) = plugin.and_then(|p| p.events.as_ref()) {
            if !events.iter().any(|e| h.hook == e.as_str()) && h.call.event.is_some() {
                out.push(self.hook_finding(
                    UNSUBSCRIBED_DELIVERED,
                    h,
                    &label,
                    Detail::Unsubscribed {
                        hook: h.hook.clone(),
                    },
                ));
            }
        }
        // Timeouts and teardown failures.
        if h.call.outcome == Outcome::TimedOut {
            self.report_timeout(h, out);
        }
        let teardown = matches!(
            h.hook.as_str(),
            "STOP_POD_SANDBOX" | "REMOVE_POD_SANDBOX" | "STOP_CONTAINER" | "REMOVE_CONTAINER"
        );
        if teardown && !h.call.outcome.is_ok() && !h.call.is_fallback_refusal() {
            self.report_teardown(h, span, out);
        }
        // Budget.
        let budget = self
            .cfg
            .hook_budget_ns
            .or_else(|| h.call.timeout_nano.filter(|t| *t > 0).map(|t| t as u64 / 2));
        // A timed-out hook is the timeout rule's.
        let own = h.own_ns.filter(|_| h.call.outcome != Outcome::TimedOut);
        if let (Some(b), Some(own)) = (budget, own) {
            if own > b {
                out.push(self.hook_finding(
                    HOOK_OVER_BUDGET,
                    h,
                    &label,
                    Detail::HookOverBudget {
                        hook: h.hook.clone(),
                        own_ns: own,
                        budget_ns: b,
                    },
                ));
            }
        }
        // Orders.
        let (object, order): (Option<String>, &[&str]) = if POD_ORDER.contains(&h.hook.as_str()) {
            (h.call.pod.as_ref().map(|p| p.id.clone()), &POD_ORDER)
        } else if CONTAINER_ORDER.contains(&h.hook.as_str()) {
            (
                h.call.container.as_ref().map(|c| c.id.clone()),
                &CONTAINER_ORDER,
            )
        } else {
            (None, &[])
        };
        if let Some(object) = object.filter(|o| !o.is_empty()) {
            let hook = order
                .iter()
                .copied()
                .find(|e| h.hook == **e)
                .expect("in order");
            let seen = self
                .seen
                .entry((label.clone(), object.clone()))
                .or_default();
            seen.entry(hook).or_insert(start);
            let times: Vec<(usize, u64)> = order
                .iter()
                .enumerate()
                .filter_map(|(i, e)| seen.get(e).map(|t| (i, *t)))
                .collect();
            let inverted = times.windows(2).any(|w| w[0].1 > w[1].1);
            let rule = if order.len() == 3 {
                POD_EVENT_ORDER
            } else {
                CONTAINER_EVENT_ORDER
            };
            if inverted && self.fired.insert((rule, label.clone(), object)) {
                let got: Vec<String> = {
                    let mut v: Vec<(u64, &str)> = seen.iter().map(|(e, t)| (*t, *e)).collect();
                    v.sort_unstable();
                    v.into_iter().map(|(_, e)| e.to_owned()).collect()
                };
                out.push(Violation {
                    rule,
                    severity: Severity::Error,
                    certainty: self.certainty(self.plugin_by_label(&label)),
                    ts: h.call.start.unwrap_or_else(ts0),
                    pod: pod_of_hook(h),
                    plugin: Some(label.clone()),
                    detail: Detail::EventOrder { seen: got },
                    evidence: vec![nri_evidence(h)],
                });
            }
        }
        // A pod the plugin was never told about (Synchronize race). Only
        // for a plugin subscribed to RunPodSandbox: the runtime tells the
        // others of a pod only in Synchronize, so one made after that
        // reaches them first in, say, CreateContainer (the NRI project's
        // device-injector, ulimit-adjuster and hook-injector subscribe to
        // container events alone; seen on containerd 1.7, 2.1 and 2.3,
        // 2026-11-28).
        let told_of_new_pods = self
            .plugin_by_label(&label)
            .and_then(|p| p.events.as_ref())
            .is_none_or(|e| e.iter().any(|e| e == "RUN_POD_SANDBOX"));
        if let Some(pod) = h
            .call
            .pod
            .as_ref()
            .filter(|p| !p.id.is_empty() && told_of_new_pods)
        {
            // `None`: the plugin's Synchronize was not seen, nothing to judge.
            let known = self.announced.get(&label).map(|k| k.contains(&pod.id));
            // After a restart, the restart rule speaks for such pods.
            if let (Some(known), false) = (known, after_restart) {
                if h.hook == "RUN_POD_SANDBOX" {
                    self.announce(&label, [pod.id.clone()]);
                    // Told before the held event after all: no finding.
                    self.unknown_pending
                        .retain(|p| !(p.1 == label && p.2 == pod.id && start <= p.0));
                } else if !known
                    && self.unknown_pending.len() < MAX_TRACKED
                    && self
                        .fired
                        .insert((POD_UNKNOWN_TO_PLUGIN, label.clone(), pod.id.clone()))
                {
                    let v = self.hook_finding(
                        POD_UNKNOWN_TO_PLUGIN,
                        h,
                        &label,
                        Detail::PodUnknown {
                            hook: h.hook.clone(),
                        },
                    );
                    self.unknown_pending
                        .push((start, label.clone(), pod.id.clone(), v));
                }
            }
        }
        // Containers of a pod not ready, or already stopped.
        if h.hook == "STOP_POD_SANDBOX" {
            if let Some(p) = &h.call.pod {
                self.pod_stopped.entry(p.id.clone()).or_insert(start);
            }
        }
        if matches!(h.hook.as_str(), "CREATE_CONTAINER" | "START_CONTAINER") {
            let Some(pod) = h.call.pod.as_ref() else {
                return;
            };
            if let Some(ready) = self.pod_ready.get(&pod.id) {
                if start < *ready
                    && self.fired.insert((
                        CONTAINER_BEFORE_POD_READY,
                        String::new(),
                        pod.id.clone(),
                    ))
                {
                    out.push(self.hook_finding(
                        CONTAINER_BEFORE_POD_READY,
                        h,
                        &label,
                        Detail::ContainerBeforePodReady {
                            hook: h.hook.clone(),
                            container: h.call.container.as_ref().map(|c| c.name.clone()),
                        },
                    ));
                }
            }
            if let Some(stopped) = self.pod_stopped.get(&pod.id) {
                if start > *stopped
                    && self
                        .fired
                        .insert((CONTAINER_IN_STOPPED_POD, String::new(), pod.id.clone()))
                {
                    out.push(self.hook_finding(
                        CONTAINER_IN_STOPPED_POD,
                        h,
                        &label,
                        Detail::ContainerInStoppedPod {
                            hook: h.hook.clone(),
                        },
                    ));
                }
            }
        }
    }

    fn report_teardown(&mut self, h: &HookSpan, span: Option<&CriSpan>, out: &mut Vec<Violation>) {
        let label = h.call.plugin.label();
        let mut evidence = vec![nri_evidence(h)];
        let mut severity = Severity::Warning;
        let mut not_called = Vec::new();
        if let Some(s) = span {
            evidence.insert(0, cri_evidence(&s.call));
            if !s.call.outcome.is_ok() {
                severity = Severity::Critical;
            }
            // Later plugins (higher index) subscribed but not delivered to.
            let later: Vec<String> = self
                .plugins
                .values()
                .filter(|p| p.index > h.call.plugin.index && p.gone.is_none())
                .filter(|p| {
                    p.events
                        .as_ref()
                        .is_some_and(|e| e.iter().any(|e| h.hook == e.as_str()))
                })
                .filter(|p| {
                    !s.hooks
                        .iter()
                        .any(|x| x.hook == h.hook && x.call.plugin.label() == p.label)
                })
                .map(|p| p.label.clone())
                .collect();
            if !later.is_empty() {
                severity = Severity::Critical;
                not_called = later;
            }
        }
        out.push(Violation {
            rule: TEARDOWN_HOOK_FAILED,
            severity,
            certainty: self.certainty(self.plugin_by_label(&label)),
            ts: h.call.end.or(h.call.start).unwrap_or_else(ts0),
            pod: pod_of_hook(h),
            plugin: Some(label),
            detail: Detail::TeardownHookFailed {
                hook: h.hook.clone(),
                outcome: h.call.outcome.clone(),
                cri_method: span.and_then(|s| s.call.method.clone()),
                cri_ok: span.map(|s| s.call.outcome.is_ok()),
                not_called,
            },
            evidence,
        });
    }

    /// Plugins connected and subscribed to an event of this span that did
    /// not receive it.
    fn check_missed(&mut self, s: &CriSpan, out: &mut Vec<Violation>) {
        // Operations: (hook, object) -> plugins that got it.
        let mut ops: BTreeMap<(&str, String), Vec<String>> = BTreeMap::new();
        let mut first: BTreeMap<(&str, String), &HookSpan> = BTreeMap::new();
        for h in &s.hooks {
            let object = h
                .call
                .container
                .as_ref()
                .map(|c| c.id.clone())
                .or_else(|| h.call.pod.as_ref().map(|p| p.id.clone()))
                .unwrap_or_default();
            ops.entry((h.hook.as_str(), object.clone()))
                .or_default()
                .push(h.call.plugin.label());
            first.entry((h.hook.as_str(), object)).or_insert(h);
        }
        let failed_before = |idx: &Option<String>| {
            s.hooks
                .iter()
                .any(|x| !x.call.outcome.is_ok() && x.call.plugin.index < *idx)
        };
        for ((hook, object), got) in ops {
            let op = first[&(hook, object.clone())];
            let op_start = op.call.start.map_or(0, |t| t.mono_ns);
            let op_end = s.call.end.map_or(u64::MAX, |t| t.mono_ns);
            for (conn, p) in &self.plugins {
                if self.by_label.get(&p.label) != Some(conn) {
                    continue;
                }
                if got.contains(&p.label)
                    || p.since > op_start
                    || p.gone.is_some_and(|g| g <= op_end)
                {
                    continue;
                }
                // A failure earlier in the chain is the teardown rule's.
                if failed_before(&p.index) {
                    continue;
                }
                // Without Configure, what it was delivered before (uncertain).
                let subscribed = match &p.events {
                    Some(e) => e.iter().any(|x| x == hook),
                    None => p.learned.contains(hook),
                };
                if !subscribed
                    || !self.fired.insert((
                        SUBSCRIBED_NOT_DELIVERED,
                        p.label.clone(),
                        format!("{hook}{object}"),
                    ))
                {
                    continue;
                }
                out.push(Violation {
                    rule: SUBSCRIBED_NOT_DELIVERED,
                    severity: Severity::Error,
                    certainty: self.mask_certainty(p, hook),
                    ts: op.call.start.unwrap_or_else(ts0),
                    pod: pod_of_hook(op),
                    plugin: Some(p.label.clone()),
                    detail: Detail::NotDelivered {
                        hook: hook.to_owned(),
                        received_by: got.clone(),
                    },
                    evidence: vec![cri_evidence(&s.call), nri_evidence(op)],
                });
            }
        }
        // Deliveries a timed-out, disconnected plugin would have had: each
        // event once (the hook, its pod and container), however many other
        // plugins got it.
        for p in self.plugins.values_mut() {
            let missed: BTreeSet<(&str, Option<&str>, Option<&str>)> = s
                .hooks
                .iter()
                .filter(|h| {
                    p.timed_out
                        && p.gone
                            .is_some_and(|g| g <= h.call.start.map_or(0, |t| t.mono_ns))
                        && p.events
                            .as_ref()
                            .is_some_and(|e| e.iter().any(|e| h.hook == e.as_str()))
                        && h.call.plugin.index.as_ref() != p.index.as_ref()
                })
                .map(|h| {
                    (
                        h.hook.as_str(),
                        h.call.pod.as_ref().map(|x| x.id.as_str()),
                        h.call.container.as_ref().map(|x| x.id.as_str()),
                    )
                })
                .collect();
            p.missed_after_gone += missed.len() as u64;
        }
    }

    fn check_retry(&mut self, c: &CriCall, out: &mut Vec<Violation>) {
        let m = c.method.as_deref().unwrap_or("");
        if !matches!(m, "RunPodSandbox" | "CreateContainer") {
            return;
        }
        let Some(pod) = &c.pod else { return };
        let key = format!(
            "{m} {}/{} {} {} {:?}",
            pod.namespace,
            pod.name,
            pod.uid,
            pod.attempt,
            c.container.as_ref().map(|k| (&k.name, k.attempt))
        );
        let gave_up = c.outcome.deadline_expired() || c.outcome == CriOutcome::Cancelled;
        if let Some((first, calls)) = self.retries.get_mut(&key) {
            calls.push(c.clone());
            if c.outcome.is_ok() || !(gave_up || is_reserved(&c.outcome)) {
                let (first, calls) = (*first, std::mem::take(calls));
                self.retries.remove(&key);
                out.push(self.retry_violation(first, &calls));
            }
        } else if gave_up {
            let start = c.start.unwrap_or_else(ts0);
            self.retries.insert(key, (start, vec![c.clone()]));
        }
    }

    /// The name-reservation finding of one retry streak: `calls`, the
    /// first of which gave up at `first`'s deadline; the last one ends it.
    fn retry_violation(&self, first: Timestamp, calls: &[CriCall]) -> Violation {
        let c = calls.last().expect("a retry streak has calls");
        let m = c.method.as_deref().unwrap_or("");
        let pod = c.pod.as_ref();
        let end = c.end.map_or(0, |t| t.mono_ns);
        let reserved = calls.iter().filter(|x| is_reserved(&x.outcome)).count();
        Violation {
            rule: NAME_RESERVATION_RETRY,
            severity: Severity::Warning,
            certainty: self.certainty(None),
            ts: c.end.unwrap_or_else(ts0),
            pod: pod.map(|p| format!("{}/{}", p.namespace, p.name)),
            plugin: None,
            detail: Detail::NameReservationRetry {
                method: m.to_owned(),
                attempt: pod.map_or(0, |p| p.attempt),
                requests: calls.len(),
                reserved,
                held_ns: end.saturating_sub(first.mono_ns),
            },
            evidence: calls.iter().map(cri_evidence).collect(),
        }
    }

    /// Retry streaks still open at the end that the runtime answered
    /// "name is reserved": the client asked again after its deadline and
    /// ran into the reservation, and then never asked again (it adopted
    /// the sandbox the runtime listed, as cri-driver does on containerd
    /// 2.1, whose RunPodSandbox lists the sandbox READY while its NRI hook
    /// is still held; docs/lab.md). The finding stands on the reserved
    /// answer alone; told at the end, oldest first.
    fn finish_retries(&mut self, out: &mut Vec<Violation>) {
        let mut open: Vec<(Timestamp, Vec<CriCall>)> = self
            .retries
            .drain()
            .map(|(_, v)| v)
            .filter(|(_, calls)| calls.len() > 1 && calls.iter().any(|x| is_reserved(&x.outcome)))
            .collect();
        open.sort_by_key(|(first, _)| first.mono_ns);
        for (first, calls) in open {
            out.push(self.retry_violation(first, &calls));
        }
    }
}

fn is_reserved(o: &CriOutcome) -> bool {
    matches!(o, CriOutcome::Error { message, .. } if message.contains("reserve"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        capture::Loss,
        decode::{cri::message::PodMeta, nri::message::Event},
        engine::{record::Uncaused, test_calls::*},
        model::nri_call::PluginId,
    };

    const ALL: [&str; 3] = ["RUN_POD_SANDBOX", "STOP_POD_SANDBOX", "REMOVE_POD_SANDBOX"];

    fn plugin(name: &str, idx: &str, conn: u64, events: &[&'static str]) -> Record {
        Record::Observed(Observation::NriPlugin {
            conn: ConnId(conn),
            ts: ts(0).unwrap(),
            plugin: PluginId {
                name: Some(name.into()),
                index: Some(idx.into()),
                pid: None,
                comm: None,
                source: IdentitySource::RegisterPlugin,
                inferred: None,
            },
            events: Some(events.iter().map(ToString::to_string).collect()),
            nri_version: Default::default(),
        })
    }

    fn lifecycle(order: [(&str, Event); 3]) -> Vec<Record> {
        let mut v = vec![plugin("a", "10", 2, &ALL)];
        for (i, (method, event)) in order.into_iter().enumerate() {
            let t = 100 * (i as u64 + 1);
            v.push(span(
                cri(Some(method), "s1", t, t + 50),
                vec![to_plugin(
                    hook(Some(event), "a", "s1", t + 10, t + 20),
                    "a",
                    "10",
                    2,
                )],
            ));
        }
        v
    }

    fn check(records: &[Record]) -> Vec<Violation> {
        let mut c = ContractChecker::new(ContractConfig::default());
        let mut out = Vec::new();
        for r in records {
            c.on_record(r, &mut out);
        }
        c.finish(&mut out);
        out
    }

    fn rules(v: &[Violation]) -> Vec<&'static str> {
        v.iter().map(|v| v.rule).collect()
    }

    #[test]
    fn happy_lifecycle_breaks_nothing() {
        let v = check(&lifecycle([
            ("RunPodSandbox", Event::RunPodSandbox),
            ("StopPodSandbox", Event::StopPodSandbox),
            ("RemovePodSandbox", Event::RemovePodSandbox),
        ]));
        assert_eq!(rules(&v), Vec::<&str>::new());
    }

    #[test]
    fn remove_before_stop_is_out_of_order() {
        let v = check(&lifecycle([
            ("RunPodSandbox", Event::RunPodSandbox),
            ("RemovePodSandbox", Event::RemovePodSandbox),
            ("StopPodSandbox", Event::StopPodSandbox),
        ]));
        assert_eq!(rules(&v), vec![POD_EVENT_ORDER]);
        assert_eq!(v[0].certainty, Certainty::Certain);
        assert_eq!(
            v[0].detail,
            Detail::EventOrder {
                seen: vec![
                    "RUN_POD_SANDBOX".into(),
                    "REMOVE_POD_SANDBOX".into(),
                    "STOP_POD_SANDBOX".into()
                ]
            }
        );
    }

    #[test]
    fn after_capture_loss_it_is_uncertain() {
        let mut records = vec![Record::Observed(Observation::CaptureLoss(Loss {
            lost_records: 3,
            ..Default::default()
        }))];
        records.extend(lifecycle([
            ("RunPodSandbox", Event::RunPodSandbox),
            ("RemovePodSandbox", Event::RemovePodSandbox),
            ("StopPodSandbox", Event::StopPodSandbox),
        ]));
        let v = check(&records);
        assert_eq!(rules(&v), vec![POD_EVENT_ORDER]);
        assert!(matches!(v[0].certainty, Certainty::Uncertain { .. }));
    }

    #[test]
    fn unsubscribed_delivery_and_missed_delivery() {
        let records = vec![
            plugin("a", "10", 2, &["RUN_POD_SANDBOX"]),
            plugin("b", "20", 3, &["STOP_POD_SANDBOX"]),
            span(
                cri(Some("StopPodSandbox"), "s1", 100, 150),
                vec![to_plugin(
                    hook(Some(Event::StopPodSandbox), "a", "s1", 110, 120),
                    "a",
                    "10",
                    2,
                )],
            ),
        ];
        let v = check(&records);
        let mut r = rules(&v);
        r.sort_unstable();
        assert_eq!(r, vec![SUBSCRIBED_NOT_DELIVERED, UNSUBSCRIBED_DELIVERED]);
        let missed = v
            .iter()
            .find(|v| v.rule == SUBSCRIBED_NOT_DELIVERED)
            .unwrap();
        assert_eq!(missed.plugin.as_deref(), Some("20-b"));
    }

    #[test]
    fn unknown_subscription_is_not_judged() {
        let mut p = plugin("b", "20", 3, &[]);
        if let Record::Observed(Observation::NriPlugin { events, .. }) = &mut p {
            *events = None;
        }
        let records = vec![
            plugin("a", "10", 2, &ALL),
            p,
            span(
                cri(Some("StopPodSandbox"), "s1", 100, 150),
                vec![to_plugin(
                    hook(Some(Event::StopPodSandbox), "a", "s1", 110, 120),
                    "a",
                    "10",
                    2,
                )],
            ),
        ];
        assert_eq!(rules(&check(&records)), Vec::<&str>::new());
    }

    /// b registered before the capture (no Configure seen): it was
    /// delivered STOP_POD_SANDBOX of s1, so it is subscribed to it; when s2's
    /// goes to a only, the miss is reported, uncertain, saying why. An
    /// event it was never delivered is not judged, and no delivery can
    /// show as unsubscribed.
    #[test]
    fn learned_subscription_findings_are_uncertain() {
        let mut p = plugin("b", "20", 3, &[]);
        if let Record::Observed(Observation::NriPlugin { events, .. }) = &mut p {
            *events = None;
        }
        let stop = |pod: &str, t: u64, to: &[(&str, &str, u64)]| {
            span(
                cri(Some("StopPodSandbox"), pod, t, t + 50),
                to.iter()
                    .map(|(n, i, c)| {
                        to_plugin(
                            hook(Some(Event::StopPodSandbox), n, pod, t + 10, t + 20),
                            n,
                            i,
                            *c,
                        )
                    })
                    .collect(),
            )
        };
        let records = vec![
            plugin("a", "10", 2, &ALL),
            p,
            stop("s1", 100, &[("a", "10", 2), ("b", "20", 3)]),
            span(
                cri(Some("RemovePodSandbox"), "s1", 200, 250),
                vec![to_plugin(
                    hook(Some(Event::RemovePodSandbox), "a", "s1", 210, 220),
                    "a",
                    "10",
                    2,
                )],
            ),
            stop("s2", 300, &[("a", "10", 2)]),
        ];
        let v = check(&records);
        assert_eq!(rules(&v), vec![SUBSCRIBED_NOT_DELIVERED], "{v:?}");
        assert_eq!(v[0].plugin.as_deref(), Some("20-b"));
        assert_eq!(v[0].pod.as_deref(), Some("ns/p"));
        let Certainty::Uncertain { why } = &v[0].certainty else {
            panic!("certain: {:?}", v[0]);
        };
        assert!(
            why.contains("Configure was not seen") && why.contains("STOP_POD_SANDBOX"),
            "{why}"
        );
    }

    #[test]
    fn teardown_failure_that_stops_later_plugins_is_critical() {
        let mut failed = to_plugin(
            hook(Some(Event::StopPodSandbox), "a", "s1", 110, 120),
            "a",
            "10",
            2,
        );
        failed.call.outcome = Outcome::Error {
            code: 2,
            message: "no".into(),
        };
        let records = vec![
            plugin("a", "10", 2, &ALL),
            plugin("b", "20", 3, &ALL),
            span(cri(Some("StopPodSandbox"), "s1", 100, 150), vec![failed]),
        ];
        let v = check(&records);
        assert_eq!(rules(&v), vec![TEARDOWN_HOOK_FAILED]);
        assert_eq!(v[0].severity, Severity::Critical);
        assert!(
            matches!(&v[0].detail, Detail::TeardownHookFailed { not_called, .. } if not_called == &["20-b"]),
            "{:?}",
            v[0].detail
        );
    }

    /// containerd 2.3 calls a v0.8-stub plugin's StopPodSandbox method,
    /// the plugin answers Unimplemented, and the runtime delivers the
    /// event by StateChange (seen on the lab, 2026-11-28): the refusal is
    /// no teardown failure.
    #[test]
    fn a_refused_per_event_method_is_no_teardown_failure() {
        let mut refused = to_plugin(
            hook(Some(Event::StopPodSandbox), "a", "s1", 110, 111),
            "a",
            "10",
            2,
        );
        refused.call.method = Some("StopPodSandbox".into());
        refused.call.outcome = Outcome::Error {
            code: crate::decode::nri::message::CODE_UNIMPLEMENTED,
            message: "method StopPodSandbox not implemented".into(),
        };
        assert!(refused.call.is_fallback_refusal());
        let fallback = to_plugin(
            hook(Some(Event::StopPodSandbox), "a", "s1", 112, 120),
            "a",
            "10",
            2,
        );
        let records = vec![
            plugin("a", "10", 2, &ALL),
            span(
                cri(Some("StopPodSandbox"), "s1", 100, 150),
                vec![refused.clone(), fallback],
            ),
        ];
        assert_eq!(rules(&check(&records)), Vec::<&str>::new());
        // The same code from a method with no fallback is a failure.
        refused.call.method = Some("StopContainer".into());
        assert!(!refused.call.is_fallback_refusal());
    }

    #[test]
    fn hook_over_half_its_timeout() {
        let mut slow = to_plugin(
            hook(Some(Event::RunPodSandbox), "a", "s1", 100, 1700),
            "a",
            "10",
            2,
        );
        slow.call.timeout_nano = Some(2_000_000_000);
        let mut ok = to_plugin(
            hook(Some(Event::RunPodSandbox), "a", "s2", 2000, 2900),
            "a",
            "10",
            2,
        );
        ok.call.timeout_nano = Some(2_000_000_000);
        let records = vec![
            plugin("a", "10", 2, &ALL),
            span(cri(Some("RunPodSandbox"), "s1", 90, 1800), vec![slow]),
            span(cri(Some("RunPodSandbox"), "s2", 1990, 3000), vec![ok]),
        ];
        let v = check(&records);
        assert_eq!(rules(&v), vec![HOOK_OVER_BUDGET]);
        assert!(
            matches!(
                v[0].detail,
                Detail::HookOverBudget {
                    own_ns: 1_600_000_000,
                    ..
                }
            ),
            "{:?}",
            v[0].detail
        );
    }

    fn synchronize(label: &str, idx: &str, conn: u64, pods: &[&str]) -> Record {
        let mut h = to_plugin(hook(None, label, "", 1, 2), label, idx, conn);
        h.call.method = Some("Synchronize".into());
        h.call.synchronized_pods = pods.iter().map(ToString::to_string).collect();
        Record::NriUncaused(Uncaused {
            span: h,
            no_cri_cause: NoCause::PluginLifecycle,
            exit: None,
            rolls_back: None,
        })
    }

    #[test]
    fn pod_never_announced_to_a_plugin() {
        let stop = |pod: &str, t: u64| {
            span(
                cri(Some("StopPodSandbox"), pod, t, t + 50),
                vec![to_plugin(
                    hook(Some(Event::StopPodSandbox), "late", pod, t + 10, t + 20),
                    "late",
                    "20",
                    3,
                )],
            )
        };
        let records = vec![
            plugin("late", "20", 3, &ALL),
            // s0 was in its Synchronize; s1 was never announced.
            synchronize("late", "20", 3, &["s0"]),
            stop("s0", 100),
            stop("s1", 200),
        ];
        let v = check(&records);
        assert_eq!(rules(&v), vec![POD_UNKNOWN_TO_PLUGIN]);
        assert_eq!(v[0].plugin.as_deref(), Some("20-late"));
        // Not subscribed to RunPodSandbox: Synchronize is the only news of
        // pods it gets, so a newer pod is news in any other event.
        let v = check(&[
            plugin("late", "20", 3, &["STOP_POD_SANDBOX"]),
            synchronize("late", "20", 3, &["s0"]),
            stop("s0", 100),
            stop("s1", 200),
        ]);
        assert_eq!(rules(&v), Vec::<&str>::new());
        // Without its Synchronize seen (registered before the trace):
        // nothing to judge.
        let v = check(&[plugin("late", "20", 3, &ALL), stop("s1", 200)]);
        assert_eq!(rules(&v), Vec::<&str>::new());
        // A RunPodSandbox delivery that began before the stop but answered
        // after it (its record settles later): the plugin was told.
        let late_run = Record::NriUncaused(Uncaused {
            span: to_plugin(
                hook(Some(Event::RunPodSandbox), "late", "s1", 150, 3150),
                "late",
                "20",
                3,
            ),
            no_cri_cause: NoCause::NoCriCallInFlight,
            exit: None,
            rolls_back: None,
        });
        let v = check(&[
            plugin("late", "20", 3, &ALL),
            synchronize("late", "20", 3, &["s0"]),
            stop("s1", 200),
            late_run,
        ]);
        assert_eq!(rules(&v), Vec::<&str>::new());
        // Held no longer than UNKNOWN_POD_HOLD_NS of capture time: a record
        // 31 s later releases it, before the end.
        let mut c = ContractChecker::new(ContractConfig::default());
        let mut out = Vec::new();
        for r in [
            plugin("late", "20", 3, &ALL),
            synchronize("late", "20", 3, &["s0"]),
            stop("s1", 200),
        ] {
            c.on_record(&r, &mut out);
        }
        assert!(out.is_empty());
        c.on_record(&stop("s0", 31_300), &mut out);
        assert_eq!(rules(&out), vec![POD_UNKNOWN_TO_PLUGIN]);
    }

    /// A container event of container `ctr` in pod `pod`, to plugin a.
    fn ctr_hook(event: Event, pod: &str, ctr: &str, start: u64) -> HookSpan {
        let mut h = to_plugin(hook(Some(event), "a", pod, start, start + 5), "a", "10", 2);
        h.call.container = Some(crate::model::nri_call::ContainerRef {
            id: ctr.into(),
            name: "c0".into(),
            ..Default::default()
        });
        h
    }

    #[test]
    fn container_events_out_of_order() {
        let records = vec![
            plugin("a", "10", 2, &[]),
            span(
                cri(Some("StartContainer"), "s1", 100, 150),
                vec![ctr_hook(Event::StartContainer, "s1", "c1", 110)],
            ),
            span(
                cri(Some("CreateContainer"), "s1", 200, 250),
                vec![ctr_hook(Event::CreateContainer, "s1", "c1", 210)],
            ),
        ];
        let v = check(&records);
        // (plugin a subscribed to nothing: the deliveries are also
        // unsubscribed ones.)
        assert!(
            rules(&v).contains(&CONTAINER_EVENT_ORDER),
            "{:?}",
            rules(&v)
        );
        // In order: nothing about the order.
        let ok = vec![
            plugin("a", "10", 2, &["CREATE_CONTAINER", "START_CONTAINER"]),
            span(
                cri(Some("CreateContainer"), "s1", 100, 150),
                vec![ctr_hook(Event::CreateContainer, "s1", "c1", 110)],
            ),
            span(
                cri(Some("StartContainer"), "s1", 200, 250),
                vec![ctr_hook(Event::StartContainer, "s1", "c1", 210)],
            ),
        ];
        assert_eq!(rules(&check(&ok)), Vec::<&str>::new());
    }

    #[test]
    fn container_before_the_pod_is_ready_or_after_it_stopped() {
        let all = [
            "RUN_POD_SANDBOX",
            "STOP_POD_SANDBOX",
            "CREATE_CONTAINER",
            "START_CONTAINER",
        ];
        let run = |end: u64| {
            span(
                cri(Some("RunPodSandbox"), "s1", 0, end + 10),
                vec![to_plugin(
                    hook(Some(Event::RunPodSandbox), "a", "s1", 10, end),
                    "a",
                    "10",
                    2,
                )],
            )
        };
        // The RunPodSandbox hook ends at 300; a CreateContainer at 200.
        let early = vec![
            plugin("a", "10", 2, &all),
            run(300),
            span(
                cri(Some("CreateContainer"), "s1", 190, 260),
                vec![ctr_hook(Event::CreateContainer, "s1", "c1", 200)],
            ),
        ];
        assert_eq!(rules(&check(&early)), vec![CONTAINER_BEFORE_POD_READY]);
        let stopped = vec![
            plugin("a", "10", 2, &all),
            run(100),
            span(
                cri(Some("StopPodSandbox"), "s1", 200, 260),
                vec![to_plugin(
                    hook(Some(Event::StopPodSandbox), "a", "s1", 210, 220),
                    "a",
                    "10",
                    2,
                )],
            ),
            span(
                cri(Some("CreateContainer"), "s1", 300, 360),
                vec![ctr_hook(Event::CreateContainer, "s1", "c1", 310)],
            ),
        ];
        assert_eq!(rules(&check(&stopped)), vec![CONTAINER_IN_STOPPED_POD]);
        // Ready, then a container: nothing.
        let fine = vec![
            plugin("a", "10", 2, &all),
            run(100),
            span(
                cri(Some("CreateContainer"), "s1", 200, 260),
                vec![ctr_hook(Event::CreateContainer, "s1", "c1", 210)],
            ),
        ];
        assert_eq!(rules(&check(&fine)), Vec::<&str>::new());
    }

    #[test]
    fn plugin_timeout_and_what_it_missed() {
        let mut hung = to_plugin(
            hook(Some(Event::RunPodSandbox), "hang", "s1", 10, 1010),
            "hang",
            "10",
            2,
        );
        // As the NRI stage reports one: no end, no own time.
        hung.call.outcome = Outcome::TimedOut;
        hung.call.timeout_nano = Some(1_000_000_000);
        hung.call.end = None;
        hung.own_ns = None;
        // The event it missed went to two other plugins: one missed event.
        let later = |t: u64| {
            span(
                cri(Some("StopPodSandbox"), "s1", t, t + 50),
                vec![
                    to_plugin(
                        hook(Some(Event::StopPodSandbox), "b", "s1", t + 10, t + 20),
                        "b",
                        "20",
                        3,
                    ),
                    to_plugin(
                        hook(Some(Event::StopPodSandbox), "c", "s1", t + 20, t + 30),
                        "c",
                        "30",
                        4,
                    ),
                ],
            )
        };
        let records = vec![
            plugin("hang", "10", 2, &ALL),
            plugin("b", "20", 3, &ALL),
            plugin("c", "30", 4, &ALL),
            span(cri(Some("RunPodSandbox"), "s1", 0, 1100), vec![hung]),
            Record::Observed(Observation::NriPluginGone {
                conn: ConnId(2),
                ts: ts(1010).unwrap(),
                plugin: PluginId {
                    name: Some("hang".into()),
                    index: Some("10".into()),
                    pid: None,
                    comm: None,
                    source: IdentitySource::RegisterPlugin,
                    inferred: None,
                },
            }),
            later(2000),
        ];
        let v = check(&records);
        assert_eq!(rules(&v), vec![PLUGIN_TIMEOUT, PLUGIN_TIMEOUT]);
        assert!(
            matches!(
                v[0].detail,
                Detail::PluginTimeout {
                    timeout_ns: Some(1_000_000_000),
                    ..
                }
            ),
            "{:?}",
            v[0].detail
        );
        assert_eq!(v[1].detail, Detail::MissedAfterDisconnect { missed: 1 });
        // Gone plugins are not "subscribed but not delivered".
        assert!(!rules(&v).contains(&SUBSCRIBED_NOT_DELIVERED));
    }

    #[test]
    fn retry_after_client_deadline_is_found_with_hold_up() {
        let pod = PodMeta {
            name: "web".into(),
            namespace: "ns".into(),
            uid: "u".into(),
            attempt: 0,
        };
        let mut first = cri(Some("RunPodSandbox"), "", 0, 1000);
        first.sandbox_id = None;
        first.pod = Some(pod);
        first.outcome = CriOutcome::DeadlineExceeded;
        let mut reserved = first.clone();
        (reserved.start, reserved.end) = (ts(1200), ts(1201));
        reserved.outcome = CriOutcome::Error {
            code: 2,
            status: "UNKNOWN".into(),
            message: "failed to reserve sandbox name".into(),
        };
        let mut ok = first.clone();
        (ok.start, ok.end) = (ts(1500), ts(3100));
        ok.outcome = CriOutcome::Ok;
        // Another attempt is a new request, not a retry.
        let mut other = ok.clone();
        other.pod.as_mut().unwrap().attempt = 1;
        let records: Vec<Record> = [first, reserved, ok, other]
            .into_iter()
            .map(|c| span(c, vec![]))
            .collect();
        let v = check(&records);
        assert_eq!(rules(&v), vec![NAME_RESERVATION_RETRY]);
        assert!(
            matches!(
                v[0].detail,
                Detail::NameReservationRetry {
                    requests: 3,
                    reserved: 1,
                    held_ns: 3_100_000_000,
                    ..
                }
            ),
            "{:?}",
            v[0].detail
        );
        assert_eq!(v[0].evidence.len(), 3);
    }

    /// CRI-O (1.33, 1.36) holds a retry for the name reservation until the
    /// request's context ends, then answers DEADLINE_EXCEEDED with "name is
    /// reserved" in its message; that status can reach the socket before
    /// the client's own expiry, on the first try too: still the deadline
    /// running out, so it starts the streak as the client's expiry does.
    #[test]
    fn server_deadline_exceeded_status_starts_a_retry_streak() {
        let pod = PodMeta {
            name: "web".into(),
            namespace: "ns".into(),
            uid: "u".into(),
            attempt: 0,
        };
        let mut first = cri(Some("RunPodSandbox"), "", 0, 1000);
        first.sandbox_id = None;
        first.pod = Some(pod);
        first.outcome = CriOutcome::Error {
            code: crate::model::cri_call::GRPC_DEADLINE_EXCEEDED,
            status: "DEADLINE_EXCEEDED".into(),
            message: "kubelet may be retrying requests that are timing out in CRI-O due to \
                      system load: context deadline exceeded: error reserving pod name \
                      k8s_web_ns_u_0 for id x: name is reserved"
                .into(),
        };
        let mut ok = first.clone();
        (ok.start, ok.end) = (ts(1250), ts(1300));
        ok.outcome = CriOutcome::Ok;
        let v = check(&[span(first, vec![]), span(ok, vec![])]);
        assert_eq!(rules(&v), vec![NAME_RESERVATION_RETRY]);
        assert!(
            matches!(
                v[0].detail,
                Detail::NameReservationRetry {
                    requests: 2,
                    reserved: 1,
                    ..
                }
            ),
            "{:?}",
            v[0].detail
        );
    }

    /// containerd 2.1: the retry is answered "name is reserved" and the
    /// client adopts the listed sandbox instead of asking again: the streak
    /// never closes, the finding is told at the end. A streak of deadlines
    /// alone that never closes is not (the client may have given up).
    #[test]
    fn retry_answered_reserved_then_abandoned_is_found_at_the_end() {
        let pod = |name: &str| PodMeta {
            name: name.into(),
            namespace: "ns".into(),
            uid: "u".into(),
            attempt: 0,
        };
        let mut first = cri(Some("RunPodSandbox"), "", 0, 1000);
        first.sandbox_id = None;
        first.pod = Some(pod("web"));
        first.outcome = CriOutcome::DeadlineExceeded;
        let mut reserved = first.clone();
        (reserved.start, reserved.end) = (ts(1200), ts(1201));
        reserved.outcome = CriOutcome::Error {
            code: 9,
            status: "FAILED_PRECONDITION".into(),
            message: "failed to reserve sandbox name \"web_ns_u_0\": name is reserved".into(),
        };
        let mut lone = first.clone();
        lone.pod = Some(pod("db"));
        let mut again = lone.clone();
        (again.start, again.end) = (ts(1100), ts(2100));
        let records: Vec<Record> = [first, lone, reserved, again]
            .into_iter()
            .map(|c| span(c, vec![]))
            .collect();
        let v = check(&records);
        assert_eq!(rules(&v), vec![NAME_RESERVATION_RETRY]);
        assert_eq!(v[0].pod.as_deref(), Some("ns/web"));
        assert!(
            matches!(
                v[0].detail,
                Detail::NameReservationRetry {
                    requests: 2,
                    reserved: 1,
                    held_ns: 1_201_000_000,
                    ..
                }
            ),
            "{:?}",
            v[0].detail
        );
    }

    fn plugin_at(conn: u64, ms: u64, source: IdentitySource) -> Record {
        Record::Observed(Observation::NriPlugin {
            conn: ConnId(conn),
            ts: ts(ms).unwrap(),
            plugin: PluginId {
                name: Some("a".into()),
                index: Some("10".into()),
                pid: None,
                comm: None,
                source,
                inferred: None,
            },
            events: Some(ALL.iter().map(ToString::to_string).collect()),
            nri_version: Default::default(),
        })
    }

    fn restart_at(ms: u64) -> Record {
        Record::Observed(Observation::RuntimeStarted {
            ts: ts(ms).unwrap(),
            pid: 4242,
        })
    }

    /// Pod s1 made before a restart at 200; plugin a connects again on
    /// connection 3 at 250.
    fn before_restart(source: IdentitySource) -> Vec<Record> {
        vec![
            plugin("a", "10", 2, &ALL),
            span(
                cri(Some("RunPodSandbox"), "s1", 100, 150),
                vec![to_plugin(
                    hook(Some(Event::RunPodSandbox), "a", "s1", 110, 120),
                    "a",
                    "10",
                    2,
                )],
            ),
            restart_at(200),
            plugin_at(3, 250, source),
        ]
    }

    fn stop_s1_on(conn: u64) -> Record {
        span(
            cri(Some("StopPodSandbox"), "s1", 300, 350),
            vec![to_plugin(
                hook(Some(Event::StopPodSandbox), "a", "s1", 310, 320),
                "a",
                "10",
                conn,
            )],
        )
    }

    #[test]
    fn old_pod_never_told_after_a_restart_is_unexplained() {
        // Like containerd 1.7's pre-launched plugins: no Synchronize.
        let mut r = before_restart(IdentitySource::RegisterPlugin);
        r.push(stop_s1_on(3));
        let v = check(&r);
        assert_eq!(rules(&v), vec![UNEXPLAINED_AFTER_RESTART]);
        assert_eq!(v[0].certainty, Certainty::Certain);
        assert!(
            matches!(
                v[0].detail,
                Detail::UnannouncedAfterRestart {
                    synchronized: false,
                    ..
                }
            ),
            "{:?}",
            v[0].detail
        );
        // Without the restart the same delivery is unremarkable.
        let mut r = before_restart(IdentitySource::RegisterPlugin);
        r.remove(2);
        r.push(stop_s1_on(3));
        assert_eq!(rules(&check(&r)), Vec::<&str>::new());
    }

    #[test]
    fn synchronized_or_new_pods_after_a_restart_are_explained() {
        let mut r = before_restart(IdentitySource::RegisterPlugin);
        r.push(synchronize("a", "10", 3, &["s1"]));
        r.push(stop_s1_on(3));
        // A pod made after the restart.
        r.push(span(
            cri(Some("RunPodSandbox"), "s2", 400, 450),
            vec![to_plugin(
                hook(Some(Event::RunPodSandbox), "a", "s2", 410, 420),
                "a",
                "10",
                3,
            )],
        ));
        r.push(span(
            cri(Some("StopPodSandbox"), "s2", 500, 550),
            vec![to_plugin(
                hook(Some(Event::StopPodSandbox), "a", "s2", 510, 520),
                "a",
                "10",
                3,
            )],
        ));
        assert_eq!(rules(&check(&r)), Vec::<&str>::new());
    }

    #[test]
    fn unseen_registration_after_a_restart_is_uncertain() {
        let mut r = before_restart(IdentitySource::PeerProcess);
        r.push(stop_s1_on(3));
        let v = check(&r);
        assert_eq!(rules(&v), vec![UNEXPLAINED_AFTER_RESTART]);
        assert!(matches!(v[0].certainty, Certainty::Uncertain { .. }));
    }

    #[test]
    fn teardown_event_missing_after_a_restart() {
        let mut r = before_restart(IdentitySource::RegisterPlugin);
        r.push(synchronize("a", "10", 3, &["s1"]));
        r.push(stop_s1_on(3));
        r.push(span(cri(Some("RemovePodSandbox"), "s1", 400, 450), vec![]));
        let v = check(&r);
        assert_eq!(rules(&v), vec![UNEXPLAINED_AFTER_RESTART]);
        assert!(
            matches!(
                &v[0].detail,
                Detail::UndeliveredAfterRestart { event, subscribed, .. }
                    if event == "REMOVE_POD_SANDBOX" && subscribed == &["10-a"]
            ),
            "{:?}",
            v[0].detail
        );
        // A failed RemovePodSandbox, or one with the event, is not it.
        let mut r = before_restart(IdentitySource::RegisterPlugin);
        r.push(synchronize("a", "10", 3, &["s1"]));
        let mut failed = cri(Some("RemovePodSandbox"), "s1", 400, 450);
        failed.outcome = CriOutcome::Error {
            code: 2,
            status: "UNKNOWN".into(),
            message: "boom".into(),
        };
        r.push(span(failed, vec![]));
        assert_eq!(rules(&check(&r)), Vec::<&str>::new());
    }
}
