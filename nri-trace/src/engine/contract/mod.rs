//! The NRI contract, checked: rules over the correlated stream (CRI spans
//! with their hooks, uncaused NRI calls, plugins coming and going, capture
//! loss), each finding a [`Violation`] with its rule, the calls that show
//! it, and whether the evidence is complete.
//!
//! One file per rule (a family of two where one check finds both): its
//! [`Rule`] (id, severity, statement, source), its detection and the
//! sentence a finding of it reads as; [`RULES`] lists them (docs/contract.md
//! is held to that table). This file holds what the rules share: the
//! [`ContractChecker`]'s state of plugins, pods and firings, and the walk
//! that hands each record to the rules.
//!
//! Timestamps, not arrival order, decide orderings, so a replay gives the
//! same findings as the live run. A rule that sees something wrong with
//! incomplete evidence (capture loss, a resync, a plugin whose
//! subscription was never seen) reports it [`Certainty::Uncertain`] with
//! the reason; where it cannot see enough to judge (a pod created before
//! the trace) it stays silent.

use crate::model::nri_call::{Event, NriMethod};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use super::{
    correlate::{CriSpan, NoCause},
    findings::{Certainty, Detail, Evidence, Violation},
    hook_latency::{Hook, HookSpan},
    record::Record,
};
use crate::{
    basic_types::{ConnId, Timestamp},
    model::{cri_call::CriCall, nri_call::IdentitySource, observation::Observation},
};

pub(crate) mod adjustment_rejected;
pub(crate) mod container_before_pod_ready;
pub(crate) mod container_in_stopped_pod;
pub(crate) mod event_order;
pub(crate) mod hook_over_budget;
pub(crate) mod name_reservation_retry;
pub(crate) mod plugin_timeout;
pub(crate) mod pod_unknown_to_plugin;
pub(crate) mod process_survives_sigkill;
pub(crate) mod rules;
pub(crate) mod sandbox;
pub(crate) mod split_synchronize_reply;
pub(crate) mod subscribed_not_delivered;
pub(crate) mod teardown_hook_failed;
pub(crate) mod teardown_path_failed;
#[cfg(test)]
mod test_records;
pub(crate) mod unexplained_after_restart;
pub(crate) mod unsubscribed_delivered;

use pod_unknown_to_plugin::UNKNOWN_POD_HOLD_NS;
pub use rules::{rule, Rule, RULES};
// Each rule by its name, for code that names one (the tests' expectations);
// its detection stays in its own file (issue 35).
pub use adjustment_rejected::RULE as ADJUSTMENT_REJECTED;
pub use container_before_pod_ready::RULE as CONTAINER_BEFORE_POD_READY;
pub use container_in_stopped_pod::RULE as CONTAINER_IN_STOPPED_POD;
pub use event_order::{CONTAINER as CONTAINER_EVENT_ORDER, POD as POD_EVENT_ORDER};
pub use hook_over_budget::RULE as HOOK_OVER_BUDGET;
pub use name_reservation_retry::RULE as NAME_RESERVATION_RETRY;
pub use plugin_timeout::RULE as PLUGIN_TIMEOUT;
pub use pod_unknown_to_plugin::RULE as POD_UNKNOWN_TO_PLUGIN;
pub use process_survives_sigkill::RULE as PROCESS_SURVIVES_SIGKILL;
use sandbox::SandboxRules;
pub use sandbox::SETTLE_NS;
pub use split_synchronize_reply::RULE as SPLIT_SYNCHRONIZE_REPLY;
pub use subscribed_not_delivered::RULE as SUBSCRIBED_NOT_DELIVERED;
pub use teardown_hook_failed::RULE as TEARDOWN_HOOK_FAILED;
pub use teardown_path_failed::{
    REMOVE as TEARDOWN_REMOVE_FAILED, UNMOUNT as TEARDOWN_UNMOUNT_FAILED,
};
pub use unexplained_after_restart::RULE as UNEXPLAINED_AFTER_RESTART;
pub use unsubscribed_delivered::RULE as UNSUBSCRIBED_DELIVERED;

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
        method: c.method_name().map(str::to_owned),
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

/// A CreateContainer or StartContainer delivery's pod id and start: what
/// the two container-in-pod rules judge.
fn container_made_in_pod(h: &HookSpan) -> Option<(&str, u64)> {
    if !matches!(h.hook.as_str(), "CREATE_CONTAINER" | "START_CONTAINER") {
        return None;
    }
    let pod = h.call.pod.as_ref()?;
    Some((pod.id.as_str(), h.call.start.map_or(0, |t| t.mono_ns)))
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
    events: Option<Vec<Event>>,
    /// Without `events`: the events it was delivered, which it is
    /// subscribed to (the runtime sends a plugin only what it subscribed
    /// to), the part of its mask the trace can know.
    learned: BTreeSet<Event>,
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

impl PluginState {
    /// Its Configure subscribed it to `hook`'s event (false for a method,
    /// and without its Configure seen).
    fn subscribed_to(&self, hook: &Hook) -> bool {
        hook.event()
            .is_some_and(|e| self.events.as_ref().is_some_and(|s| s.contains(&e)))
    }
}

/// Most objects (pod or container per plugin, pods, pending retries) the
/// checker remembers. Past it, the oldest state is dropped: memory stays
/// bounded on a node that runs for months, at the price of not seeing an
/// order violation across the forgotten part.
pub const MAX_TRACKED: usize = 16_384;
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
    seen: HashMap<(String, String), BTreeMap<Event, u64>>,
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
    fn mask_certainty(&self, p: &PluginState, hook: &Hook) -> Certainty {
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
            severity: rules::severity(rule_id),
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
                    if h.call.method == Some(NriMethod::Synchronize) {
                        self.announce(
                            &h.call.plugin.label(),
                            h.call.synchronized_pods.iter().cloned(),
                        );
                        if let Some(p) = self.plugins.get_mut(&h.call.conn) {
                            p.synced
                                .get_or_insert_with(BTreeSet::new)
                                .extend(h.call.synchronized_pods.iter().cloned());
                        }
                        self.check_split_reply(h, out);
                    }
                    self.check_timeout(h, out);
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
        self.finish_timeouts(out);
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
        self.count_missed_after_timeout(s);
        self.check_missed_after_restart(s, out);
        out.extend(adjustment_rejected::check(s, self.certainty(None)));
        self.note_pod_ready(s);
    }

    fn saw_pod(&mut self, id: &str) {
        if self.pods_seen.len() >= MAX_TRACKED {
            self.pods_seen.clear();
        }
        self.pods_seen.insert(id.to_owned());
    }

    /// One delivery, through every rule about deliveries, in the order
    /// their findings are told.
    fn on_hook(&mut self, h: &HookSpan, span: Option<&CriSpan>, out: &mut Vec<Violation>) {
        let label = h.call.plugin.label();
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
            if let (None, Some(e)) = (&p.events, h.hook.event()) {
                p.learned.insert(e);
            }
        }
        let after_restart = self.check_after_restart(h, &label, out);
        self.check_unsubscribed(h, &label, out);
        self.check_timeout(h, out);
        self.check_teardown(h, span, out);
        self.check_budget(h, &label, out);
        self.check_order(h, &label, out);
        self.check_pod_unknown(h, &label, after_restart);
        self.note_pod_stopped(h);
        self.check_before_pod_ready(h, &label, out);
        self.check_in_stopped_pod(h, &label, out);
    }
}
