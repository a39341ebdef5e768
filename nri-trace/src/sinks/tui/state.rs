//! What the TUI shows, as a model apart from how it is drawn (the
//! tokio-console split): fed only with the engine's records
//! ([`TuiState::on_record`]), its latency tables ([`TuiState::set_summaries`]),
//! what the caller knows of the capture ([`TuiState::set_status`]) and the
//! capture clock ([`TuiState::set_now`]).
//!
//! Ages and rates are taken against the capture clock, never the wall
//! clock, so a replay renders the same screen every time. Every collection
//! is bounded; what falls off is counted and shown.

use std::collections::{BTreeMap, VecDeque};

use serde::Serialize;

use crate::human::{clock, sanitize, short_id};
use crate::sinks::{
    cri_lines::client_words,
    nri_lines::plugin_name,
    polls::{is_poll, PollSummary, PollWindow},
};
use crate::{
    basic_types::{ConnId, Timestamp},
    capture::Loss,
    engine::{
        conformance::ClauseTally,
        cri_latency::MethodSummary,
        findings::Violation,
        hook_latency::{HookSpan, HookSummary},
        pods::{PodModel, PodPhase, PodView},
        record::Record,
    },
    model::{
        cri_call::CriOutcome,
        nri_call::{Event, NriOutcome, NriVersions},
        observation::Observation,
    },
};

/// Findings kept (the oldest go first).
pub(crate) const MAX_FINDINGS: usize = 4096;
/// Rows of the call log kept.
pub(crate) const MAX_CALLS: usize = 8192;
/// Records held while paused, applied on resume.
pub(crate) const MAX_PENDING: usize = 50_000;
/// Records kept for a whole-session export.
pub(crate) const MAX_SESSION: usize = 20_000;
/// CRI calls whose hook timings are kept for the timeline.
pub(crate) const MAX_SPANS: usize = 20_000;
/// Recent own times kept per (plugin, hook) for the sparkline.
pub(crate) const SPARK_POINTS: usize = 48;
/// (plugin, hook) pairs and plugin connections tracked.
pub(crate) const MAX_KEYS: usize = 1024;
/// A pod whose last call took at least this long is marked slow.
pub(crate) const SLOW_NS: u64 = 1_000_000_000;
/// The call rate is taken over this many seconds of capture time.
pub(crate) const RATE_WINDOW_S: u64 = 10;

/// What the caller knows about the capture (not in the records).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct StatusInfo {
    /// The attached runtime and its version, e.g. "containerd 1.7.24 pid 812".
    pub runtime: Option<String>,
    pub cri_sockets: Vec<String>,
    pub nri_sockets: Vec<String>,
    /// "live" or "replay FILE".
    pub source: String,
    /// Where the capture is being recorded, if it is.
    pub recording: Option<String>,
    /// Capture events per second as the feeder counts them, if it does.
    pub events_per_s: Option<u64>,
}

/// A contract finding, numbered in arrival order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub seq: u64,
    #[serde(flatten)]
    pub violation: Violation,
    /// Its sentence (`sinks::finding_message`), worded once.
    pub message: String,
}

/// What a call-log row is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CallKind {
    /// A CRI call (kubelet to the runtime).
    Cri,
    /// An NRI call (runtime and plugin).
    Nri,
    /// A plugin connection, a CRI connection, a resync.
    Conn,
    /// Capture loss.
    Loss,
    /// A contract finding.
    Finding,
    /// A window of one client's steady-state polls, counted
    /// (sinks/polls.rs).
    Poll,
}

impl CallKind {
    pub fn label(self) -> &'static str {
        match self {
            CallKind::Cri => "CRI",
            CallKind::Nri => "NRI",
            CallKind::Conn => "CONN",
            CallKind::Loss => "LOSS",
            CallKind::Finding => "FIND",
            CallKind::Poll => "POLL",
        }
    }
}

/// One row of the call log; its text is already sanitized.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CallRow {
    pub seq: u64,
    pub ts: Option<Timestamp>,
    pub kind: CallKind,
    /// Method, hook or event.
    pub what: String,
    pub plugin: String,
    /// A CRI call's or connection's client (`cri_lines::client_words`:
    /// `crictl[4242] (session-3.scope)`); empty for other rows.
    pub client: String,
    /// "namespace/name" and container, or a sandbox id.
    pub subject: String,
    pub duration_ns: Option<u64>,
    pub queued_ns: Option<u64>,
    pub outcome: String,
    pub ok: bool,
    /// An NRI hook listed under the CRI call that caused it.
    pub nested: bool,
}

/// One NRI delivery inside a CRI call, for the timeline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HookBar {
    pub plugin: String,
    pub hook: String,
    pub start_ns: Option<u64>,
    pub duration_ns: Option<u64>,
    pub own_ns: Option<u64>,
    pub queued_ns: Option<u64>,
    pub ok: bool,
    pub outcome: String,
}

/// A CRI call's timing and its hooks, for the timeline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SpanDetail {
    pub method: String,
    pub start_ns: u64,
    pub end_ns: Option<u64>,
    pub ok: bool,
    pub outcome: String,
    pub hooks: Vec<HookBar>,
}

/// A plugin connection as the records show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PluginConn {
    pub label: String,
    pub connected: bool,
    /// The events it subscribed to, when seen.
    #[serde(serialize_with = "crate::model::nri_call::subscribed_events::serialize")]
    pub events: Option<Vec<Event>>,
    /// The NRI versions its ends announced (plugin, runtime), when seen.
    pub nri_version: NriVersions,
}

/// What fell off a bound.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Dropped {
    pub findings: u64,
    pub calls: u64,
    pub pending: u64,
    pub session: u64,
    pub spans: u64,
}

/// Record counts by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    pub records: u64,
    pub cri_calls: u64,
    pub nri_calls: u64,
    pub uncaused: u64,
    pub findings: u64,
}

/// How a pod looks at a glance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum PodFlag {
    /// Its sandbox failed, or its last call did not end well (error,
    /// client deadline, no response): stuck until a call succeeds.
    Stuck,
    /// Its last call took at least [`SLOW_NS`].
    Slow,
}

/// The flag of pod `p`, if any.
pub(crate) fn pod_flag(p: &PodView) -> Option<PodFlag> {
    let last = p.timeline.last();
    if p.phase == PodPhase::Failed || last.is_some_and(|e| !e.ok) {
        Some(PodFlag::Stuck)
    } else if last
        .and_then(|e| e.duration_ns)
        .is_some_and(|d| d >= SLOW_NS)
    {
        Some(PodFlag::Slow)
    } else {
        None
    }
}

/// The TUI's model.
#[derive(Debug, Default, Clone)]
pub struct TuiState {
    /// Each pod's teardown, for the timeline's verdict (`explain`).
    teardown: crate::engine::teardown::TeardownLog,
    /// "containerd v1.7.24", from the runtime's last Configure request.
    runtime_version: Option<String>,
    /// The runtime's by-design clauses, held and broken over the pods.
    conformance: Vec<ClauseTally>,
    pods: PodModel,
    findings: VecDeque<Finding>,
    calls: VecDeque<CallRow>,
    session: VecDeque<Record>,
    spans: BTreeMap<(u64, String), SpanDetail>,
    spark: BTreeMap<(String, String), VecDeque<u64>>,
    plugins: BTreeMap<ConnId, PluginConn>,
    hooks: Vec<HookSummary>,
    methods: Vec<MethodSummary>,
    status: StatusInfo,
    loss: Loss,
    now_ns: u64,
    /// Calls per capture second, the last [`RATE_WINDOW_S`] seconds.
    rate: VecDeque<(u64, u64)>,
    counts: Counts,
    dropped: Dropped,
    seq: u64,
    paused: bool,
    pending: VecDeque<Record>,
    pending_summaries: Option<(Vec<HookSummary>, Vec<MethodSummary>)>,
    pending_status: Option<StatusInfo>,
    pending_now: Option<u64>,
    /// kubelet's polls, counted per window instead of a row each (so they
    /// do not push the calls that matter out of the log); `None` with
    /// `--calls all`.
    polls: Option<PollWindow>,
}

fn cri_outcome(o: &CriOutcome) -> String {
    match o {
        CriOutcome::Ok => "ok".into(),
        CriOutcome::Error {
            code,
            status,
            message,
        } => format!("{status} ({code}): {}", sanitize(message)),
        CriOutcome::DeadlineExceeded => "DEADLINE EXCEEDED (client)".into(),
        CriOutcome::Cancelled => "CANCELLED".into(),
        CriOutcome::Reset { by, error, .. } => format!("RESET by {by}: {error}"),
        CriOutcome::ConnectionClosed => "CONNECTION CLOSED".into(),
        CriOutcome::NoResponse => "NO RESPONSE".into(),
        CriOutcome::Unknown => "status unknown".into(),
        CriOutcome::Failed => "FAILED (status hidden)".into(),
    }
}

/// An NRI outcome, short.
pub(crate) fn nri_outcome(o: &NriOutcome) -> String {
    match o {
        NriOutcome::Ok => "ok".into(),
        NriOutcome::Error { code, message } => format!("ERROR {code}: {}", sanitize(message)),
        NriOutcome::TimedOut => "TIMED OUT".into(),
        NriOutcome::ConnectionClosed => "CONNECTION CLOSED".into(),
        NriOutcome::NoResponse => "NO RESPONSE".into(),
    }
}

fn hook_subject(h: &HookSpan) -> String {
    let mut s = match &h.call.pod {
        Some(p) if p.namespace.is_empty() => p.name.clone(),
        Some(p) => format!("{}/{}", p.namespace, p.name),
        None => String::new(),
    };
    if let Some(c) = &h.call.container {
        if !c.name.is_empty() {
            s.push('/');
            s.push_str(&c.name);
        }
    }
    sanitize(&s)
}

fn push_bounded<T>(q: &mut VecDeque<T>, v: T, max: usize, dropped: &mut u64) {
    if q.len() >= max {
        q.pop_front();
        *dropped += 1;
    }
    q.push_back(v);
}

impl TuiState {
    /// A state that counts the steady-state polls per window.
    pub fn new() -> Self {
        TuiState {
            polls: Some(PollWindow::default()),
            ..Self::default()
        }
    }

    /// Every call a row of its own (`--calls all`).
    #[must_use]
    pub fn with_all_calls(mut self) -> Self {
        self.polls = None;
        self
    }

    /// One row per client for a closed window of polls.
    fn poll_rows(&mut self, done: &PollSummary) {
        for c in done.clients() {
            let seq = self.next_seq();
            self.push_call(CallRow {
                seq,
                ts: Some(done.last),
                kind: CallKind::Poll,
                what: format!("{} polls", c.calls),
                plugin: String::new(),
                client: c.client.to_owned(),
                subject: format!("since {}", clock(&done.first)),
                duration_ns: Some(c.slowest_ns),
                queued_ns: None,
                outcome: c.text,
                ok: true,
                nested: false,
            });
        }
    }

    /// The open window of polls, whatever its age (the end of a replay).
    pub fn close_polls(&mut self) {
        if self.paused {
            return;
        }
        if let Some(done) = self.polls.as_mut().and_then(PollWindow::take) {
            self.poll_rows(&done);
        }
    }

    /// Take one engine record (held while paused).
    pub fn on_record(&mut self, r: &Record) {
        if self.paused {
            push_bounded(
                &mut self.pending,
                r.clone(),
                MAX_PENDING,
                &mut self.dropped.pending,
            );
            return;
        }
        self.apply(r);
    }

    /// The latest latency tables (per (plugin, hook), per CRI method).
    /// The conformance clauses decided so far (the Findings view's title).
    pub fn set_conformance(&mut self, clauses: Vec<ClauseTally>) {
        self.conformance = clauses;
    }

    pub fn conformance(&self) -> &[ClauseTally] {
        &self.conformance
    }

    pub fn set_summaries(&mut self, hooks: Vec<HookSummary>, methods: Vec<MethodSummary>) {
        if self.paused {
            self.pending_summaries = Some((hooks, methods));
        } else {
            self.hooks = hooks;
            self.methods = methods;
        }
    }

    /// What the caller knows of the capture.
    pub fn set_status(&mut self, status: StatusInfo) {
        if self.paused {
            self.pending_status = Some(status);
        } else {
            self.status = status;
        }
    }

    /// The capture clock (kernel monotonic ns): ages and rates are taken
    /// against it.
    pub fn set_now(&mut self, mono_ns: u64) {
        if self.paused {
            self.pending_now = Some(mono_ns);
        } else {
            self.now_ns = self.now_ns.max(mono_ns);
            if let Some(done) = self.polls.as_mut().and_then(|w| w.close_before(mono_ns)) {
                self.poll_rows(&done);
            }
        }
    }

    /// Freeze what is shown (records keep arriving into a bounded queue),
    /// or apply what came meanwhile and go on.
    pub fn set_paused(&mut self, paused: bool) {
        if self.paused == paused {
            return;
        }
        self.paused = paused;
        if !paused {
            let pending = std::mem::take(&mut self.pending);
            for r in &pending {
                self.apply(r);
            }
            if let Some((h, m)) = self.pending_summaries.take() {
                self.set_summaries(h, m);
            }
            if let Some(s) = self.pending_status.take() {
                self.set_status(s);
            }
            if let Some(n) = self.pending_now.take() {
                self.set_now(n);
            }
        }
    }

    pub fn paused(&self) -> bool {
        self.paused
    }

    /// Records waiting for the resume.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    pub fn pods(&self) -> &PodModel {
        &self.pods
    }

    /// Each pod's teardown (what `nri-trace explain` says of it).
    pub fn teardown(&self) -> &crate::engine::teardown::TeardownLog {
        &self.teardown
    }

    /// Findings, oldest first.
    pub fn findings(&self) -> &VecDeque<Finding> {
        &self.findings
    }

    /// The call log, oldest first.
    pub fn calls(&self) -> &VecDeque<CallRow> {
        &self.calls
    }

    /// The records kept for a session export, oldest first.
    pub fn session(&self) -> &VecDeque<Record> {
        &self.session
    }

    /// Hook timings of the CRI call of `method` that started at `start_ns`.
    pub fn span(&self, start_ns: u64, method: &str) -> Option<&SpanDetail> {
        self.spans.get(&(start_ns, method.to_string()))
    }

    /// Recent own times of (plugin, hook), oldest first.
    pub fn spark(&self, plugin: &str, hook: &str) -> Option<&VecDeque<u64>> {
        self.spark.get(&(plugin.to_string(), hook.to_string()))
    }

    /// Plugin connections seen.
    pub fn plugins(&self) -> impl Iterator<Item = &PluginConn> {
        self.plugins.values()
    }

    pub fn hook_summaries(&self) -> &[HookSummary] {
        &self.hooks
    }

    pub fn method_summaries(&self) -> &[MethodSummary] {
        &self.methods
    }

    /// The runtime's name and version as its Configure request gave them.
    pub fn runtime_version(&self) -> Option<&str> {
        self.runtime_version.as_deref()
    }

    pub fn status(&self) -> &StatusInfo {
        &self.status
    }

    /// The last capture loss counters.
    pub fn loss(&self) -> Loss {
        self.loss
    }

    pub fn now_ns(&self) -> u64 {
        self.now_ns
    }

    pub fn counts(&self) -> Counts {
        self.counts
    }

    pub fn dropped(&self) -> Dropped {
        self.dropped
    }

    /// CRI and NRI calls per second over the last [`RATE_WINDOW_S`]
    /// seconds of capture time.
    pub fn calls_per_s(&self) -> u64 {
        let now_s = self.now_ns / 1_000_000_000;
        let n: u64 = self
            .rate
            .iter()
            .filter(|(s, _)| s + RATE_WINDOW_S > now_s)
            .map(|(_, c)| c)
            .sum();
        n / RATE_WINDOW_S
    }

    /// `now` minus `ts`, in capture time (0 for a future or missing time).
    pub fn age_ns(&self, ts: Option<Timestamp>) -> u64 {
        ts.map_or(0, |t| self.now_ns.saturating_sub(t.mono_ns))
    }

    fn count_call(&mut self, ts: Option<Timestamp>, n: u64) {
        let Some(ts) = ts else { return };
        let s = ts.mono_ns / 1_000_000_000;
        if let Some((_, c)) = self.rate.iter_mut().find(|(x, _)| *x == s) {
            *c += n
        } else {
            self.rate.push_back((s, n));
            self.rate.make_contiguous().sort_unstable();
        }
        while self.rate.len() > RATE_WINDOW_S as usize + 1 {
            self.rate.pop_front();
        }
    }

    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    fn push_call(&mut self, row: CallRow) {
        push_bounded(&mut self.calls, row, MAX_CALLS, &mut self.dropped.calls);
    }

    fn hook_row(&mut self, h: &HookSpan, nested: bool) {
        let seq = self.next_seq();
        let plugin = plugin_name(&h.call.plugin);
        let hook = sanitize(h.hook.as_str());
        if let Some(own) = h.own_ns {
            let key = (plugin.clone(), hook.clone());
            if self.spark.contains_key(&key) || self.spark.len() < MAX_KEYS {
                let q = self.spark.entry(key).or_default();
                if q.len() >= SPARK_POINTS {
                    q.pop_front();
                }
                q.push_back(own);
            }
        }
        self.push_call(CallRow {
            seq,
            ts: h.call.start.or(h.call.end),
            kind: CallKind::Nri,
            what: hook,
            plugin,
            client: String::new(),
            subject: hook_subject(h),
            duration_ns: h.own_ns.or(h.call.duration_ns),
            queued_ns: h.queued_ns,
            outcome: nri_outcome(&h.call.outcome),
            ok: h.call.outcome.is_ok(),
            nested,
        });
    }

    fn conn_row(&mut self, ts: Option<Timestamp>, kind: CallKind, what: String, plugin: String) {
        self.conn_row_of(ts, kind, what, plugin, String::new());
    }

    /// A connection row with its plugin or its CRI client.
    fn conn_row_of(
        &mut self,
        ts: Option<Timestamp>,
        kind: CallKind,
        what: String,
        plugin: String,
        client: String,
    ) {
        let seq = self.next_seq();
        self.push_call(CallRow {
            seq,
            ts,
            kind,
            what,
            plugin,
            client,
            subject: String::new(),
            duration_ns: None,
            queued_ns: None,
            outcome: String::new(),
            ok: kind != CallKind::Loss,
            nested: false,
        });
    }

    fn on_loss(&mut self, l: &Loss) {
        if *l != self.loss {
            self.loss = *l;
            let what = format!("lost {} records, {} bytes", l.lost_records, l.lost_bytes);
            self.conn_row(None, CallKind::Loss, what, String::new());
        }
    }

    fn apply(&mut self, r: &Record) {
        self.counts.records += 1;
        self.pods.on_record(r);
        self.teardown.on_record(r);
        push_bounded(
            &mut self.session,
            r.clone(),
            MAX_SESSION,
            &mut self.dropped.session,
        );
        match r {
            Record::CriSpan(s) if self.polls.is_some() && is_poll(s) => {
                let c = &s.call;
                self.counts.cri_calls += 1;
                self.count_call(c.end.or(c.start), 1);
                if let Some(done) = self.polls.as_mut().and_then(|w| w.add(s)) {
                    self.poll_rows(&done);
                }
            }
            Record::CriSpan(s) => {
                let c = &s.call;
                self.counts.cri_calls += 1;
                self.counts.nri_calls += s.hooks.len() as u64;
                self.count_call(c.end.or(c.start), 1 + s.hooks.len() as u64);
                let method = c.method_name().unwrap_or("(unknown)").to_owned();
                let subject = match (&c.pod, &c.container) {
                    (Some(p), Some(k)) => format!("{p}/{k}"),
                    (Some(p), None) => p.to_string(),
                    (None, Some(k)) => k.name.clone(),
                    (None, None) => c
                        .container_id
                        .as_ref()
                        .or(c.sandbox_id.as_ref())
                        .map(|id| short_id(id).to_owned())
                        .unwrap_or_default(),
                };
                let outcome = cri_outcome(&c.outcome);
                let seq = self.next_seq();
                self.push_call(CallRow {
                    seq,
                    ts: c.start.or(c.end),
                    kind: CallKind::Cri,
                    what: sanitize(&method),
                    plugin: String::new(),
                    client: c.client.as_ref().map(client_words).unwrap_or_default(),
                    subject: sanitize(&subject),
                    duration_ns: c.duration_ns,
                    queued_ns: None,
                    outcome: outcome.clone(),
                    ok: c.outcome.is_ok(),
                    nested: false,
                });
                for h in &s.hooks {
                    self.hook_row(h, true);
                }
                if let Some(start) = c.start {
                    let detail = SpanDetail {
                        method: method.clone(),
                        start_ns: start.mono_ns,
                        end_ns: c.end.map(|t| t.mono_ns),
                        ok: c.outcome.is_ok(),
                        outcome,
                        hooks: s
                            .hooks
                            .iter()
                            .map(|h| HookBar {
                                plugin: plugin_name(&h.call.plugin),
                                hook: sanitize(h.hook.as_str()),
                                start_ns: h.call.start.map(|t| t.mono_ns),
                                duration_ns: h.call.duration_ns,
                                own_ns: h.own_ns,
                                queued_ns: h.queued_ns,
                                ok: h.call.outcome.is_ok(),
                                outcome: nri_outcome(&h.call.outcome),
                            })
                            .collect(),
                    };
                    self.spans.insert((start.mono_ns, method), detail);
                    while self.spans.len() > MAX_SPANS {
                        self.spans.pop_first();
                        self.dropped.spans += 1;
                    }
                }
            }
            Record::NriUncaused(u) => {
                let h = &u.span;
                if let Some(rt) = &h.call.configured_runtime {
                    self.runtime_version = Some(sanitize(&rt.to_string()));
                }
                self.counts.nri_calls += 1;
                self.counts.uncaused += 1;
                self.count_call(h.call.end.or(h.call.start), 1);
                self.hook_row(h, false);
            }
            Record::Violation(v) => {
                self.counts.findings += 1;
                let seq = self.next_seq();
                let message = crate::sinks::finding_message(v);
                let outcome = sanitize(&message);
                push_bounded(
                    &mut self.findings,
                    Finding {
                        seq,
                        violation: v.clone(),
                        message,
                    },
                    MAX_FINDINGS,
                    &mut self.dropped.findings,
                );
                let what = sanitize(v.rule);
                let plugin = v.plugin.as_deref().map(sanitize).unwrap_or_default();
                let seq = self.next_seq();
                self.push_call(CallRow {
                    seq,
                    ts: Some(v.ts),
                    kind: CallKind::Finding,
                    what,
                    plugin,
                    client: String::new(),
                    subject: v.pod.as_deref().map(sanitize).unwrap_or_default(),
                    duration_ns: None,
                    queued_ns: None,
                    outcome,
                    ok: false,
                    nested: false,
                });
            }
            Record::Observed(Observation::NriPlugin {
                conn,
                ts,
                plugin,
                events,
                nri_version,
            }) => {
                let label = plugin_name(plugin);
                if self.plugins.contains_key(conn) || self.plugins.len() < MAX_KEYS {
                    self.plugins.insert(
                        *conn,
                        PluginConn {
                            label: label.clone(),
                            connected: true,
                            events: events.clone(),
                            nri_version: nri_version.clone(),
                        },
                    );
                }
                self.conn_row(Some(*ts), CallKind::Conn, "plugin connected".into(), label);
            }
            Record::Observed(Observation::NriPluginGone { conn, ts, plugin }) => {
                let label = plugin_name(plugin);
                if let Some(p) = self.plugins.get_mut(conn) {
                    p.connected = false;
                }
                // Forget closed connections first when over the bound.
                if self.plugins.len() >= MAX_KEYS {
                    self.plugins.retain(|_, p| p.connected);
                }
                self.conn_row(Some(*ts), CallKind::Conn, "plugin gone".into(), label);
            }
            Record::Observed(Observation::NriResync { ts, skipped, .. }) => {
                self.conn_row(
                    Some(*ts),
                    CallKind::Conn,
                    format!("NRI resync, {skipped} bytes skipped"),
                    String::new(),
                );
            }
            Record::Observed(Observation::CriConnection {
                ts,
                client,
                client_process,
                ..
            }) => {
                // The label alone in a record file older than the client.
                let who = match client_process {
                    Some(c) => client_words(c),
                    None => client.as_deref().map(sanitize).unwrap_or_default(),
                };
                self.conn_row_of(
                    Some(*ts),
                    CallKind::Conn,
                    "CRI connection".into(),
                    String::new(),
                    who,
                );
            }
            Record::Observed(Observation::CriResync { ts, skipped, .. }) => {
                self.conn_row(
                    Some(*ts),
                    CallKind::Conn,
                    format!("CRI resync, {skipped} bytes skipped"),
                    String::new(),
                );
            }
            // kubelet's connection going is why nobody asks for a
            // terminating pod any more (explain's `client_gone`).
            Record::Observed(Observation::CriConnectionGone { ts, client, .. }) => {
                self.conn_row_of(
                    Some(*ts),
                    CallKind::Conn,
                    "CRI connection closed".into(),
                    String::new(),
                    client.as_deref().map(sanitize).unwrap_or_default(),
                );
            }
            Record::Observed(Observation::CaptureLoss(l)) => self.on_loss(l),
            // A pending hook or call is shown when it ends (its span); the runtime
            // restarting by the findings it leads to; kernel events in the
            // pod's teardown (explain).
            Record::Observed(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loss(n: u64) -> Record {
        Record::Observed(Observation::CaptureLoss(Loss {
            lost_records: n,
            ..Loss::default()
        }))
    }

    #[test]
    fn call_log_is_bounded_and_counts_what_it_drops() {
        let mut st = TuiState::new();
        for n in 1..=(MAX_CALLS as u64 + 3) {
            st.on_record(&loss(n));
        }
        assert_eq!(st.calls().len(), MAX_CALLS);
        assert_eq!(st.dropped().calls, 3);
        assert_eq!(st.loss().lost_records, MAX_CALLS as u64 + 3);
        // The oldest went: the first row left is loss number 4.
        assert_eq!(st.calls()[0].what, "lost 4 records, 0 bytes");
        assert_eq!(st.counts().records, MAX_CALLS as u64 + 3);
    }

    /// kubelet's relists do not fill the call log: a window of polls is
    /// one row per client, when the clock closes it; `--calls all` keeps a
    /// row per call.
    #[test]
    fn polls_are_one_row_per_client_per_window() {
        let poll = |ms: u64| {
            let mut call = crate::engine::test_calls::cri(Some("ListPodSandbox"), "", ms, ms + 1);
            call.client = Some(crate::model::CriClient {
                pid: 812,
                comm: Some("kubelet".into()),
                cgroup: None,
                unit: None,
            });
            Record::CriSpan(crate::engine::CriSpan {
                call,
                hooks: vec![],
                nri_ns: 0,
                nri_permille: None,
            })
        };
        let mut st = TuiState::new();
        let mut all = TuiState::new().with_all_calls();
        for i in 0..1000 {
            st.on_record(&poll(i * 1000));
            all.on_record(&poll(i * 1000));
        }
        assert_eq!(all.calls().len(), 1000);
        // 1000 s of polls: 99 windows closed by the next poll, one open.
        assert_eq!(st.calls().len(), 99);
        st.set_now(2_000_000_000_000);
        assert_eq!(st.calls().len(), 100);
        let row = &st.calls()[0];
        assert_eq!(row.kind, CallKind::Poll);
        assert_eq!(row.what, "10 polls");
        assert_eq!(row.client, "kubelet[812]");
        assert!(row.outcome.starts_with("ListPodSandbox 10"), "{row:?}");
        assert_eq!(st.counts().cri_calls, 1000);
    }

    #[test]
    fn pause_holds_a_bounded_queue_and_resume_applies_it() {
        let mut st = TuiState::new();
        st.set_now(5);
        st.set_paused(true);
        for n in 1..=(MAX_PENDING as u64 + 5) {
            st.on_record(&loss(n));
        }
        st.set_now(99);
        st.set_status(StatusInfo {
            source: "live".into(),
            ..StatusInfo::default()
        });
        // Frozen: nothing applied yet.
        assert_eq!(st.pending(), MAX_PENDING);
        assert_eq!(st.dropped().pending, 5);
        assert_eq!(st.counts().records, 0);
        assert_eq!(st.now_ns(), 5);
        assert_eq!(st.status().source, "");
        st.set_paused(false);
        assert_eq!(st.pending(), 0);
        assert_eq!(st.counts().records, MAX_PENDING as u64);
        assert_eq!(st.loss().lost_records, MAX_PENDING as u64 + 5);
        assert_eq!(st.now_ns(), 99);
        assert_eq!(st.status().source, "live");
    }

    #[test]
    fn call_rate_uses_capture_time() {
        let mut st = TuiState::new();
        for s in 0..30u64 {
            st.count_call(
                Some(Timestamp {
                    mono_ns: s * 1_000_000_000,
                    wall_ns: 0,
                }),
                20,
            );
        }
        st.set_now(29_500_000_000);
        assert_eq!(st.calls_per_s(), 20);
        // Ten seconds of silence later, nothing.
        st.set_now(45_000_000_000);
        assert_eq!(st.calls_per_s(), 0);
    }
}
