//! `-o text`: the story of each pod for a person at a terminal.
//!
//! Each CRI call is one line naming its pod (from its own metadata, or
//! from the ids earlier records showed: `engine::pod_index`) and its client
//! (`by crictl[4242] (session-3.scope)`: `cri_lines::client_words`), with the NRI
//! hooks it caused indented under it, one line each; a finding is one line
//! where it happened; a pod gets a closing line with its totals when it is
//! removed. Records come out of
//! the engine as they settle (a long call after the short ones begun after
//! it): a small reorder buffer prints them in start order, each once the
//! engine says nothing that started before it is still to come
//! (`TraceEngine::settled_before`), or after [`HOLD_NS`] of capture time
//! (a hung call does not hold the others back), or when more than
//! [`MAX_HELD`] are held. Kernel events are
//! shown where they explain something (`engine::contract::sandbox::explains`)
//! unless `--kernel all`, on the line of the CRI call they happened during
//! when one was about their container or pod (a StopContainer's SIGTERM,
//! SIGKILL and the exit), else on a line of their own. A plugin shows as its registration
//! (RegisterPlugin, Configure with what it subscribed to, Synchronize) and
//! in its hooks; a plugin going gets a line (unless a plugin-timeout
//! finding said it, or the runtime exited with it: its line names them). Plugin identities and CRI
//! connections are left out (`-o json`, the TUI and `debug` show them).
//! The latency tables close the output.

use crate::model::cri_call::CriMethod;
use std::{
    collections::{BTreeMap, HashSet},
    io::{self, BufWriter, Write},
};

use super::{
    cri_lines,
    finding_message::{finding_message, is_disconnect},
    lines,
    nri_lines::{self, plugin_name},
    polls::{is_poll, PollSummary, PollWindow},
};
use crate::{
    capture::{
        sandbox::{ids_in, status_text, SandboxEvent, SandboxOp},
        Timestamp,
    },
    engine::{
        contract::sandbox,
        correlate::{CriSpan, NoCause},
        findings::{Certainty, Violation},
        hook_latency::HookSpan,
        pod_index::{PodIndex, PodName},
        pods::PodModel,
        record::Record,
    },
    human::{clock, duration, duration_opt, sanitize, short_id},
    model::{cri_call::Identified, nri_call::PluginId, observation::Observation},
    pipeline::{Ending, Progress, Sink},
};

/// Longest a record is held (capture time) for records that started
/// before it and settle after it.
pub(crate) const HOLD_NS: u64 = 10_000_000_000;
/// Most records held at once; past it the oldest is printed.
pub(crate) const MAX_HELD: usize = 512;
/// Kernel events this long after a CRI call's end still go on its line
/// (an exit reaped just after the runtime answered).
const KERNEL_SLACK_NS: u64 = 50_000_000;

/// Records as text lines on `W`.
pub struct TextSink<W: Write> {
    out: BufWriter<W>,
    /// Print the latency tables at the end.
    tables: bool,
    /// Every kernel event, not only those that explain something.
    all_kernel: bool,
    pods: PodIndex,
    /// Per-pod totals for the closing line.
    model: PodModel,
    /// The reorder buffer: (start, arrival) -> record.
    held: BTreeMap<(u64, u64), Record>,
    arrivals: u64,
    /// The latest capture time a record showed.
    latest_ns: u64,
    /// Nothing that started before this is still to come.
    settled_ns: u64,
    /// Plugins whose connection closed as the runtime exited, for its line.
    gone_with_runtime: Vec<String>,
    /// Plugins a plugin-timeout finding was printed for: their
    /// connection's close is told by it.
    timed_out: HashSet<String>,
    /// The last line's kernel event, when the last line was one: its
    /// repeats (a retry loop) are not printed again.
    last_kernel: Option<(u32, SandboxOp)>,
    /// kubelet's steady-state polls, counted per window instead of a line
    /// each (sinks/polls.rs); `None` with `--calls all`.
    polls: Option<PollWindow>,
}

impl<W: Write> TextSink<W> {
    /// `summarize_polls`: the steady-state polls as one line per client
    /// per window (`--calls summary`, the default), not one per call.
    pub fn new(w: W, tables: bool, all_kernel: bool, summarize_polls: bool) -> Self {
        TextSink {
            out: BufWriter::new(w),
            tables,
            all_kernel,
            pods: PodIndex::new(),
            model: PodModel::new(),
            held: BTreeMap::new(),
            arrivals: 0,
            latest_ns: 0,
            settled_ns: 0,
            gone_with_runtime: Vec::new(),
            timed_out: HashSet::new(),
            last_kernel: None,
            polls: summarize_polls.then(PollWindow::default),
        }
    }

    /// The poll window, told once a record or the clock is
    /// [`super::polls::POLL_WINDOW_NS`] past its first poll.
    fn polls_before(&mut self, now_ns: u64) -> io::Result<()> {
        match self.polls.as_mut().and_then(|w| w.close_before(now_ns)) {
            Some(done) => self.poll_lines(&done),
            None => Ok(()),
        }
    }

    /// One line per client, at the window's last poll: `12:00:09.981
    /// .. 43 polls since 12:00:00.012 by kubelet[812] (kubelet.service):
    /// ListContainers 10, ... (slowest 3.1ms)`.
    fn poll_lines(&mut self, done: &PollSummary) -> io::Result<()> {
        for c in done.clients() {
            writeln!(
                self.out,
                "{}  .. {} polls since {} by {}: {}",
                clock(&done.last),
                c.calls,
                clock(&done.first),
                c.client,
                c.text
            )?;
        }
        self.last_kernel = None;
        Ok(())
    }

    /// Print the held records that started before everything still to
    /// come, or [`HOLD_NS`] before `now_ns`, and the oldest while more
    /// than [`MAX_HELD`] are held.
    fn release(&mut self, now_ns: u64) -> io::Result<()> {
        while let Some((&(start, _), _)) = self.held.first_key_value() {
            let due = start < self.settled_ns || start.saturating_add(HOLD_NS) <= now_ns;
            if !due && self.held.len() <= MAX_HELD {
                break;
            }
            let (_, r) = self.held.pop_first().expect("a first entry");
            self.polls_before(start)?;
            self.print(&r)?;
        }
        Ok(())
    }

    /// Whether `r` is told by other lines or left to other outputs: a
    /// plugin's identity (its hook lines name it), a teardown hook or
    /// CRI call still waiting (its line comes when it ends), a CRI connection, the
    /// runtime's lists of its pods (the calls' lines name the pods from
    /// them); a plugin gone with the runtime (the runtime's line names it).
    fn told_elsewhere(&mut self, r: &Record) -> bool {
        match r {
            Record::Observed(
                Observation::NriPlugin { .. }
                | Observation::NriPending(_)
                | Observation::CriPending(_)
                | Observation::CriConnection { .. }
                | Observation::CriConnectionGone { .. }
                | Observation::CriState(_),
            ) => true,
            Record::Observed(Observation::NriPluginGone { ts, plugin, .. }) => {
                let label = plugin.label();
                // A plugin-timeout finding said the runtime closed it.
                if self.timed_out.remove(&label) {
                    return true;
                }
                let with_runtime = self.held.values().any(|h| {
                    matches!(h, Record::Observed(Observation::RuntimeExited { ts: t, .. }) if t == ts)
                });
                if with_runtime {
                    self.gone_with_runtime.push(plugin_name(plugin));
                }
                with_runtime
            }
            _ => false,
        }
    }

    fn print(&mut self, r: &Record) -> io::Result<()> {
        self.model.on_record(r);
        if self.told_elsewhere(r) {
            return Ok(());
        }
        let pod = self.pods.pod_of(r);
        if let Record::Observed(Observation::Sandbox(e)) = r {
            return self.kernel_line(e, pod.as_ref());
        }
        self.last_kernel = None;
        if let Record::Observed(Observation::NriPluginGone { ts, plugin, .. }) = r {
            return self.gone_line(ts, plugin);
        }
        match r {
            Record::CriSpan(s) if self.polls.is_some() && is_poll(s) => {
                let closed = self.polls.as_mut().and_then(|w| w.add(s));
                match closed {
                    Some(done) => self.poll_lines(&done),
                    None => Ok(()),
                }
            }
            Record::CriSpan(s) => {
                self.span(s, pod.as_ref())?;
                if let Some(p) = pod {
                    if s.call.is(CriMethod::RemovePodSandbox) && s.call.outcome.is_ok() {
                        self.closing(&p)?;
                    }
                }
                Ok(())
            }
            Record::NriUncaused(u) => {
                write!(self.out, "{}  ", when(&u.span))?;
                hook_line(&mut self.out, &u.span, pod.as_ref())?;
                match u.no_cri_cause {
                    // What the plugin said (its name, what it subscribed
                    // to, the pods it was told of).
                    NoCause::PluginLifecycle => {
                        writeln!(self.out, "  {}", sanitize(&u.span.call.summary))
                    }
                    NoCause::NoCriCallInFlight => writeln!(self.out, "  (no CRI call in flight)"),
                    NoCause::CaptureLoss => writeln!(
                        self.out,
                        "  (no CRI call seen: the capture lost records then; its call may be one of them)"
                    ),
                    NoCause::ContainerExited => match &u.exit {
                        Some(x) => writeln!(
                            self.out,
                            "  (the container exited: {}[{}]{})",
                            sanitize(&x.comm),
                            x.pid,
                            x.status
                                .map_or_else(String::new, |s| format!(", {}", status_text(s)))
                        ),
                        None => writeln!(self.out, "  (the container exited)"),
                    },
                    NoCause::Rollback => match &u.rolls_back {
                        Some(r) => writeln!(
                            self.out,
                            "  (the runtime undoing the sandbox of RunPodSandbox stream {} ({}), which kubelet never got)",
                            r.stream_id,
                            sanitize(&r.outcome.describe())
                        ),
                        None => writeln!(
                            self.out,
                            "  (the runtime undoing a failed RunPodSandbox)"
                        ),
                    },
                }
            }
            Record::Violation(v) => {
                // The finding says whether the runtime closed the plugin's
                // connection (contract/plugin_timeout.rs report_timeout).
                if is_disconnect(v) {
                    if let Some(p) = &v.plugin {
                        if self.timed_out.len() < 1024 {
                            self.timed_out.insert(p.clone());
                        }
                    }
                }
                finding_line(&mut self.out, v)
            }
            Record::Observed(Observation::RuntimeExited { ts, pid }) => {
                let gone = std::mem::take(&mut self.gone_with_runtime);
                write!(self.out, "{} == runtime pid {pid} exited", clock(ts))?;
                if !gone.is_empty() {
                    write!(
                        self.out,
                        " (its plugins' connections closed: {})",
                        gone.join(", ")
                    )?;
                }
                writeln!(self.out)
            }
            Record::Observed(o) => lines::observation_text(&mut self.out, o),
        }
    }

    fn span(&mut self, s: &CriSpan, pod: Option<&PodName>) -> io::Result<()> {
        let c = &s.call;
        let when = c.start.or(c.end).map(|t| clock(&t)).unwrap_or_default();
        let method = match (&c.method, &c.identified) {
            (Some(m), _) => sanitize(m.name()),
            // Hidden by HPACK and not recovered: the candidates are in
            // `-o json`.
            (None, _) => "?".into(),
        };
        let mut subject = pod.map_or_else(
            || {
                c.sandbox_id
                    .as_deref()
                    .map(|id| format!("sandbox {}", short_id(id)))
                    .unwrap_or_default()
            },
            |p| sanitize(&p.to_string()),
        );
        if let Some(k) = &c.container {
            subject.push('/');
            subject.push_str(&sanitize(&k.name));
        } else if let Some(id) = &c.container_id {
            subject.push_str(&format!(" container {}", short_id(id)));
        }
        write!(
            self.out,
            "{when}  {method:<24} {subject:<44} {:>8}  {}",
            duration_opt(c.duration_ns),
            cri_lines::outcome(c)
        )?;
        if let Some(p) = s.nri_permille {
            write!(
                self.out,
                "  NRI {} ({}.{}%)",
                duration(s.nri_ns),
                p / 10,
                p % 10
            )?;
        }
        if c.partial {
            write!(self.out, "  [began before the trace]")?;
        }
        if let Identified::Inferred { evidence } = &c.identified {
            write!(self.out, "  [method inferred: {}]", sanitize(evidence))?;
        }
        if let Some(client) = &c.client {
            write!(self.out, "  by {}", cri_lines::client_words(client))?;
        }
        let kernel = self.take_kernel(s, pod);
        if !kernel.is_empty() {
            write!(self.out, "  [kernel: {}]", kernel.join("; "))?;
        }
        writeln!(self.out)?;
        for h in &s.hooks {
            write!(self.out, "{:17}", "")?;
            hook_line(&mut self.out, h, None)?;
            writeln!(self.out)?;
        }
        Ok(())
    }

    /// The kernel events held that happened during `s` to its container
    /// (or, for a call on the pod, to any of the pod's): taken out of the
    /// buffer, as text for the call's line.
    fn take_kernel(&mut self, s: &CriSpan, pod: Option<&PodName>) -> Vec<String> {
        let c = &s.call;
        let (Some(start), Some(end)) = (c.start, c.end.or(c.start)) else {
            return Vec::new();
        };
        // Only the teardown makes kernel events of a pod's processes and
        // paths (a status call in the same moment does not).
        if !matches!(
            c.cri_method(),
            Some(
                CriMethod::StopContainer
                    | CriMethod::RemoveContainer
                    | CriMethod::StopPodSandbox
                    | CriMethod::RemovePodSandbox
            )
        ) {
            return Vec::new();
        }
        let until = end.mono_ns.saturating_add(KERNEL_SLACK_NS);
        let about_call = |id: &str| {
            c.container_id.as_deref() == Some(id)
                || (c.container_id.is_none()
                    && (c.sandbox_id.as_deref() == Some(id)
                        || pod.is_some_and(|p| self.pods.by_id(id) == Some(p))))
        };
        let window = (start.mono_ns, 0)..=(until, u64::MAX);
        let mut taken: Vec<(u64, u64)> = Vec::new();
        let mut pids: Vec<u32> = Vec::new();
        for (k, r) in self.held.range(window.clone()) {
            if let Record::Observed(Observation::Sandbox(e)) = r {
                if kernel_ids(e).any(about_call) {
                    taken.push(*k);
                    pids.push(match e.op {
                        SandboxOp::Signal { target, .. } => target,
                        _ => e.tgid,
                    });
                }
            }
        }
        // A signal whose target was gone before its cgroup could be read:
        // the call's if its target is one of the call's processes.
        for (k, r) in self.held.range(window) {
            if let Record::Observed(Observation::Sandbox(e)) = r {
                if let SandboxOp::Signal {
                    target,
                    target_cgroup: None,
                    ..
                } = e.op
                {
                    if pids.contains(&target) && !taken.contains(k) {
                        taken.push(*k);
                    }
                }
            }
        }
        taken.sort_unstable();
        taken
            .into_iter()
            .filter_map(|k| match self.held.remove(&k) {
                Some(Record::Observed(Observation::Sandbox(e))) => Some(sanitize(&e.describe())),
                _ => None,
            })
            .collect()
    }

    /// Kernel events of `pod` not on a CRI call's line: this one and those
    /// held right after it, on one line; an event repeated right after
    /// itself (a retry loop: the shim retries a busy unmount every 50 ms)
    /// once, with how often and until when.
    fn kernel_line(&mut self, first: &SandboxEvent, pod: Option<&PodName>) -> io::Result<()> {
        let mut group: Vec<(SandboxEvent, u32)> = vec![(first.clone(), 0)];
        let mut pod = pod.cloned();
        while let Some((&k, Record::Observed(Observation::Sandbox(e)))) =
            self.held.first_key_value()
        {
            // The same pod's, or one whose pod cannot be told (a signal
            // to a process gone before its cgroup was read).
            let of = self
                .pods
                .pod_of(&Record::Observed(Observation::Sandbox(e.clone())));
            match (&pod, of) {
                (Some(p), Some(o)) if *p != o => break,
                (None, Some(o)) => pod = Some(o),
                _ => {}
            }
            let e = e.clone();
            self.held.remove(&k);
            match group.last_mut() {
                Some((last, n)) if last.tgid == e.tgid && last.op == e.op => {
                    *n += 1;
                    last.ts = e.ts;
                }
                _ => group.push((e, 0)),
            }
        }
        // The same call as the last kernel line's, nothing printed since:
        // more of that retry loop.
        if let (Some((tgid, op)), [(e, _)]) = (&self.last_kernel, &group[..]) {
            if *tgid == e.tgid && *op == e.op {
                return Ok(());
            }
        }
        let text: Vec<String> = group
            .iter()
            .map(|(e, n)| {
                let mut t = sanitize(&e.describe());
                if *n > 0 {
                    t.push_str(&format!(" (again {n} times, until {})", clock(&e.ts)));
                }
                t
            })
            .collect();
        let last = group.last().map(|(e, _)| (e.tgid, e.op.clone()));
        write!(self.out, "{} ~~ ", clock(&first.ts))?;
        if let Some(p) = &pod {
            write!(self.out, "{}: ", sanitize(&p.to_string()))?;
        }
        writeln!(self.out, "{}", text.join("; "))?;
        self.last_kernel = last;
        Ok(())
    }

    /// Plugins whose connections closed: this one and those held right
    /// after it, on one line.
    fn gone_line(&mut self, ts: &Timestamp, plugin: &PluginId) -> io::Result<()> {
        let mut names = vec![plugin_name(plugin)];
        while let Some((&k, Record::Observed(Observation::NriPluginGone { plugin, .. }))) =
            self.held.first_key_value()
        {
            if self.timed_out.contains(&plugin.label()) {
                break;
            }
            names.push(plugin_name(plugin));
            self.held.remove(&k);
        }
        let (what, verb) = if names.len() == 1 {
            ("plugin", "its connection")
        } else {
            ("plugins", "their connections")
        };
        writeln!(
            self.out,
            "{} ** {what} {} disconnected ({verb} closed)",
            clock(ts),
            names.join(", ")
        )
    }

    /// The pod's closing line: its totals.
    fn closing(&mut self, p: &PodName) -> io::Result<()> {
        // The pod of that name seen last (a pod recreated under its name
        // is another pod).
        let Some(v) = self
            .model
            .pods()
            .filter(|v| v.namespace == p.namespace && v.name == p.name)
            .max_by_key(|v| v.last_seen.map(|t| t.mono_ns))
        else {
            return Ok(());
        };
        writeln!(
            self.out,
            "── pod {} removed: {} CRI calls, {} in CRI, {} in NRI hooks, {} findings",
            sanitize(&p.to_string()),
            v.timeline.len(),
            duration(v.cri_ns),
            duration(v.nri_ns),
            v.findings
        )
    }
}

/// The container and sandbox ids a kernel event names: its target's
/// cgroup for a signal, its own cgroup, and its path.
fn kernel_ids(e: &SandboxEvent) -> impl Iterator<Item = &str> {
    let target = match &e.op {
        SandboxOp::Signal { target_cgroup, .. } => target_cgroup.as_deref(),
        _ => None,
    };
    let own = match &e.op {
        // A signal's sender is not the pod's.
        SandboxOp::Signal { .. } => None,
        _ => e.cgroup.as_deref(),
    };
    target
        .into_iter()
        .chain(own)
        .chain(e.op.path_result().map(|(p, _)| p))
        .flat_map(ids_in)
}

fn when(h: &HookSpan) -> String {
    h.call
        .start
        .or(h.call.end)
        .map(|t| clock(&t))
        .unwrap_or_default()
}

/// An NRI hook: `NRI HOOK PLUGIN [POD] OWN OUTCOME [queued]` (no newline).
fn hook_line(w: &mut impl Write, h: &HookSpan, pod: Option<&PodName>) -> io::Result<()> {
    let hook = if h.call.partial {
        "(response only)".to_string()
    } else {
        sanitize(h.hook.as_str())
    };
    write!(w, "NRI {hook:<26} {:<20}", plugin_name(&h.call.plugin))?;
    if let Some(p) = pod {
        write!(w, " {:<32}", sanitize(&p.to_string()))?;
    }
    write!(
        w,
        " {:>8}  {}",
        duration_opt(h.own_ns),
        nri_lines::outcome_text(&h.call.outcome)
    )?;
    if let Some(q) = h.queued_ns.filter(|q| *q > 0) {
        write!(w, "  [queued {}]", duration(q))?;
    }
    Ok(())
}

/// A finding on one line: severity, rule, pod, plugin, what, and why it
/// is uncertain (the evidence is in `-o json`, the report and the TUI).
fn finding_line(w: &mut impl Write, v: &Violation) -> io::Result<()> {
    write!(
        w,
        "{}  !! {:?} {} [{}",
        clock(&v.ts),
        v.severity,
        v.rule,
        sanitize(v.pod.as_deref().unwrap_or("-"))
    )?;
    if let Some(p) = &v.plugin {
        write!(w, ", {}", sanitize(p))?;
    }
    write!(w, "]: {}", sanitize(&finding_message(v)))?;
    if let Certainty::Uncertain { why } = &v.certainty {
        write!(w, " (uncertain: {})", sanitize(why))?;
    }
    writeln!(w)
}

impl<W: Write> Sink for TextSink<W> {
    fn record(&mut self, r: &Record) -> io::Result<()> {
        self.pods.learn(r);
        if let Record::Observed(Observation::Sandbox(e)) = r {
            if !self.all_kernel && !sandbox::explains(e) {
                return Ok(());
            }
        }
        let start = match r {
            Record::CriSpan(s) => s.call.start.or(s.call.end),
            Record::NriUncaused(u) => u.span.call.start.or(u.span.call.end),
            _ => r.ts(),
        }
        .map_or(self.latest_ns, |t| t.mono_ns);
        if let Some(t) = r.ts() {
            self.latest_ns = self.latest_ns.max(t.mono_ns);
        }
        self.arrivals += 1;
        self.held.insert((start, self.arrivals), r.clone());
        self.release(self.latest_ns)
    }

    fn settled(&mut self, before_ns: u64) -> io::Result<()> {
        self.settled_ns = before_ns;
        self.release(self.latest_ns)
    }

    fn idle(&mut self, p: &Progress<'_>) -> io::Result<()> {
        let now = p.now_ns.unwrap_or(0).max(self.latest_ns);
        self.release(now)?;
        // Nothing else held: the clock alone closes a window.
        if self.held.is_empty() {
            self.polls_before(now)?;
        }
        self.out.flush()
    }

    fn finish(&mut self, end: &Ending<'_>) -> io::Result<()> {
        self.release(u64::MAX)?;
        if let Some(done) = self.polls.as_mut().and_then(PollWindow::take) {
            self.poll_lines(&done)?;
        }
        if self.tables {
            writeln!(self.out)?;
            lines::summary_text(&mut self.out, &end.tables.hooks, &end.tables.methods)?;
        }
        self.out.flush()
    }
}
