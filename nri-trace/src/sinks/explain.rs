//! `nri-trace explain`: each pod's teardown collected from the records
//! ([`TeardownSink`]), then the blocker in one sentence, the evidence, the
//! expected next step, the teardown steps, the findings and what this
//! node's /proc shows of the pod's containers ([`node_facts`]).

use std::{
    cell::RefCell,
    io::{self, Write},
    rc::Rc,
};

use serde::Serialize;

use crate::{
    capture::{
        holders::{self, Holder},
        sandbox::{errno_text, SandboxEvent},
    },
    engine::{
        record::Record,
        teardown::{
            Blocker, Explanation, KernelEntry, NextStep, PodFinding, Removal, StepHook,
            TeardownLog, TeardownProgress, TeardownStep, Verdict,
        },
    },
    human::{clock, duration, duration_opt, sanitize, short_id},
    pipeline::{Ending, Sink},
    sinks::finding_message,
};

/// A finding against the explained pod, in words.
fn finding_sentence(e: &Explanation, f: &PodFinding) -> String {
    finding_message::sentence(&f.detail, f.plugin.as_deref(), Some(&e.pod))
}

/// Collects every pod's teardown; the caller explains a pod from it once
/// the input ended.
pub struct TeardownSink {
    log: Rc<RefCell<TeardownLog>>,
}

impl TeardownSink {
    /// The sink, and the log it fills.
    pub fn new() -> (Self, Rc<RefCell<TeardownLog>>) {
        let log = Rc::new(RefCell::new(TeardownLog::new()));
        (
            TeardownSink {
                log: Rc::clone(&log),
            },
            log,
        )
    }
}

impl Sink for TeardownSink {
    fn record(&mut self, r: &Record) -> io::Result<()> {
        self.log.borrow_mut().on_record(r);
        Ok(())
    }

    fn finish(&mut self, _: &Ending<'_>) -> io::Result<()> {
        Ok(())
    }
}

/// What this node shows now of the pod `e` explains: each container's
/// rootfs mounts and who holds them, its cgroup and the processes in it,
/// the processes sent SIGKILL that are still there, and the pod's volumes
/// kubelet still has mounted, with who holds them.
pub fn node_facts(e: &Explanation) -> NodeFacts {
    let volumes = e
        .uid
        .as_deref()
        .map(holders::pod_volume_mounts)
        .unwrap_or_default()
        .into_iter()
        .map(|m| VolumeFacts {
            holders: holders::holding(&m),
            mount: m.display().to_string(),
        })
        .collect();
    NodeFacts {
        containers: container_facts(e),
        volumes,
        pod_cgroup: e
            .uid
            .as_deref()
            .and_then(holders::pod_cgroup)
            .map(|p| p.display().to_string()),
    }
}

fn container_facts(e: &Explanation) -> Vec<ContainerFacts> {
    let signalled = |name: &str| -> Vec<Holder> {
        e.alive_after_kill
            .iter()
            .filter(|(_, c)| c == name)
            .filter_map(|(pid, _)| holders::process(*pid, "sent SIGKILL"))
            .collect()
    };
    let mut facts: Vec<ContainerFacts> = e
        .containers
        .iter()
        .map(|(id, name)| {
            let rootfs = holders::rootfs_mounts(id);
            let held = rootfs.iter().flat_map(|r| holders::holding(r)).collect();
            let (cgroup, processes) = holders::in_cgroup(id);
            ContainerFacts {
                id: id.clone(),
                name: name.clone(),
                rootfs: rootfs.iter().map(|p| p.display().to_string()).collect(),
                holders: held,
                cgroup: cgroup.map(|p| p.display().to_string()),
                processes,
                signalled: signalled(name),
            }
        })
        .collect();
    // Signalled processes of no known container (the sandbox's).
    for (_, c) in &e.alive_after_kill {
        if !e.containers.iter().any(|(_, n)| n == c) && !facts.iter().any(|f| &f.name == c) {
            facts.push(ContainerFacts {
                id: String::new(),
                name: c.clone(),
                rootfs: vec![],
                holders: vec![],
                cgroup: None,
                processes: vec![],
                signalled: signalled(c),
            });
        }
    }
    facts
}

/// The explanation as one JSON line: its data, the node's facts, and
/// the words: the sentence (completed with the node's facts) and the
/// evidence lines.
pub fn json(w: &mut impl Write, e: &Explanation, node: Option<&NodeFacts>) -> io::Result<()> {
    let line = Explained {
        kind: "explanation",
        explanation: e,
        node: node.map(|n| n.containers.as_slice()),
        node_volumes: node.map(|n| n.volumes.as_slice()),
        node_pod_cgroup: node.and_then(|n| n.pod_cgroup.as_deref()),
        sentence: sentence(e, node),
        evidence: evidence(e),
        finding_lines: e.findings.iter().map(|f| finding_sentence(e, f)).collect(),
        kernel_lines: e.kernel.iter().map(kernel_line).collect(),
    };
    crate::store::ndjson::LineWriter::new(&mut *w).write_record(&line, true)
}

/// What the node shows now of a pod.
#[derive(Debug, Clone, Default, Serialize)]
pub struct NodeFacts {
    pub containers: Vec<ContainerFacts>,
    pub volumes: Vec<VolumeFacts>,
    /// The pod cgroup kubelet made, while it exists.
    pub pod_cgroup: Option<String>,
}

impl NodeFacts {
    /// What of the pod is still on this node, in words (empty: nothing).
    fn left(&self) -> Vec<String> {
        let mut v = Vec::new();
        for c in &self.containers {
            let name = sanitize(&c.name);
            if let Some(r) = c.rootfs.first() {
                v.push(format!("container {name}'s rootfs {}", sanitize(r)));
            }
            if let Some(g) = &c.cgroup {
                v.push(format!(
                    "container {name}'s cgroup {} ({} processes)",
                    sanitize(g),
                    c.processes.len()
                ));
            }
        }
        v.extend(
            self.volumes
                .iter()
                .map(|m| format!("the volume mount {}", sanitize(&m.mount))),
        );
        v.extend(
            self.pod_cgroup
                .iter()
                .map(|g| format!("the pod cgroup {}", sanitize(g))),
        );
        v
    }
}

/// A volume of the pod still mounted under kubelet's pod directory.
#[derive(Debug, Clone, Serialize)]
pub struct VolumeFacts {
    pub mount: String,
    /// Processes holding it (cwd, root, open files).
    pub holders: Vec<Holder>,
}

/// What the node shows of one container of the pod.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ContainerFacts {
    pub id: String,
    pub name: String,
    /// Its rootfs mount points still mounted.
    pub rootfs: Vec<String>,
    /// Host processes holding the rootfs (cwd, root, open files).
    pub holders: Vec<Holder>,
    /// Its cgroup directory, if it still exists.
    pub cgroup: Option<String>,
    /// Processes still in that cgroup.
    pub processes: Vec<Holder>,
    /// Its processes the kernel saw sent SIGKILL and not exit, as /proc
    /// shows them now (gone ones are left out).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub signalled: Vec<Holder>,
}

/// The explanation with the node's facts and its words, as `-o json`
/// prints it.
#[derive(Debug, Clone, Serialize)]
pub struct Explained<'a> {
    #[serde(rename = "type")]
    pub kind: &'static str,
    #[serde(flatten)]
    pub explanation: &'a Explanation,
    /// `None`: the node was not inspected (`--no-proc`).
    pub node: Option<&'a [ContainerFacts]>,
    /// The pod's volumes still mounted (`None` as `node`).
    pub node_volumes: Option<&'a [VolumeFacts]>,
    /// The pod cgroup, while it exists (`None` too when not inspected).
    pub node_pod_cgroup: Option<&'a str>,
    pub sentence: String,
    pub evidence: Vec<String>,
    /// The findings' sentences, in the order of `findings`.
    pub finding_lines: Vec<String>,
    /// The kernel events as lines.
    pub kernel_lines: Vec<String>,
}

/// " waiting in <wchan>", or nothing for a running process.
fn waiting_in(p: &Holder) -> String {
    if p.wchan.is_empty() || p.wchan == "0" {
        String::new()
    } else {
        format!(" waiting in {}", sanitize(&p.wchan))
    }
}

/// " (c0)" for a container step.
fn of_container(s: &TeardownStep) -> String {
    s.container
        .as_ref()
        .map(|c| format!(" ({})", sanitize(c)))
        .unwrap_or_default()
}

/// "CRI StopPodSandbox at 12:00:01.123456 took 35.0ms: ok".
fn step_line(s: &TeardownStep) -> String {
    format!(
        "CRI {}{} at {} took {}: {}",
        sanitize(&s.method),
        of_container(s),
        s.start.map(|t| clock(&t)).unwrap_or_default(),
        duration_opt(s.duration_ns),
        sanitize(&s.outcome.describe())
    )
}

/// "10-slow STOP_POD_SANDBOX 502ms" (and its outcome when not ok).
fn hook_line(h: &StepHook) -> String {
    let mut l = format!(
        "{} {} {}",
        sanitize(&h.plugin),
        sanitize(&h.hook),
        duration_opt(h.own_ns)
    );
    if !h.outcome.is_ok() {
        l.push_str(&format!(" {}", sanitize(&h.outcome.describe())));
    }
    l
}

/// "05-failer STOP_POD_SANDBOX: error 2: refused".
fn failed_hook(h: &StepHook) -> String {
    format!(
        "{} {}: {}",
        sanitize(&h.plugin),
        sanitize(&h.hook),
        sanitize(&h.outcome.describe())
    )
}

/// A kernel event as a line: "12:00:01.123456 runc[9] rmdir ...: EBUSY",
/// and its repeats.
fn kernel_line(k: &KernelEntry) -> String {
    let again = if k.again > 0 {
        format!(" (again {} times, until {})", k.again, clock(&k.until))
    } else {
        String::new()
    };
    format!(
        "{} {}{again}",
        clock(&k.event.ts),
        sanitize(&k.event.describe())
    )
}

/// A kernel event as an evidence line.
fn kernel_evidence(e: &SandboxEvent) -> String {
    format!("kernel: {} {}", clock(&e.ts), sanitize(&e.describe()))
}

/// Where the CRI calls stand, in one sentence.
fn progress_sentence(e: &Explanation) -> String {
    let pod = sanitize(&e.pod);
    match &e.progress {
        TeardownProgress::Removed { took_ns } => {
            let per_step: Vec<String> = e
                .steps
                .iter()
                .map(|s| {
                    format!(
                        "{}{} {}",
                        sanitize(&s.method),
                        of_container(s),
                        duration_opt(s.duration_ns)
                    )
                })
                .collect();
            // Hooks that failed on the way did not keep it (the runtime
            // went on), but the SRE should know.
            let failed: Vec<String> = e
                .steps
                .iter()
                .flat_map(|s| {
                    s.failed_hooks()
                        .map(move |h| format!("{} during {}", failed_hook(h), sanitize(&s.method)))
                })
                .collect();
            format!(
                "{pod} is gone: RemovePodSandbox succeeded; the teardown took {} ({}){}",
                duration(*took_ns),
                per_step.join(", "),
                if failed.is_empty() {
                    String::new()
                } else {
                    format!(
                        "; on the way, plugin hook {} (the runtime went on)",
                        failed.join(", ")
                    )
                }
            )
        }
        TeardownProgress::NotStarted { last_call, at } => format!(
            "no teardown call of {pod} was seen (no StopContainer, StopPodSandbox or \
             RemovePodSandbox); {}",
            match last_call {
                Some(m) => format!(
                    "its last call was {}{}",
                    sanitize(m),
                    at.map(|t| format!(" at {}", clock(&t))).unwrap_or_default()
                ),
                // Known from the runtime's own list only.
                None => "no call of it at all since the attach".into(),
            }
        ),
        TeardownProgress::HookFailed { step, hook } => {
            let s = &e.steps[*step];
            format!(
                "{pod}: plugin hook {} during {}{}",
                failed_hook(&s.hooks[*hook]),
                sanitize(&s.method),
                if s.ok() {
                    format!(
                        " (the CRI call still succeeded: {})",
                        sanitize(&s.outcome.describe())
                    )
                } else {
                    format!(
                        ", and {} failed: {}",
                        sanitize(&s.method),
                        sanitize(&s.outcome.describe())
                    )
                }
            )
        }
        TeardownProgress::CallFailed { step } => {
            let s = &e.steps[*step];
            format!(
                "{pod}: {}{} did not complete: {} after {}",
                sanitize(&s.method),
                s.container
                    .as_ref()
                    .map(|c| format!(" of container {}", sanitize(c)))
                    .unwrap_or_default(),
                sanitize(&s.outcome.describe()),
                duration_opt(s.duration_ns)
            )
        }
        TeardownProgress::NextNotCalled { step } => {
            let s = &e.steps[*step];
            // The sandbox stopped: what is left is kubelet's garbage
            // collection, each minute, which stops it again and removes it
            // (k8s.io/kubernetes v1.37.2 pkg/kubelet/kubelet.go
            // ContainerGCPeriod, kuberuntime/kuberuntime_gc.go
            // removeSandbox). Said, so that a wait under a minute or so
            // reads as the normal one it is.
            let stopped = e
                .steps
                .iter()
                .any(|s| s.method == "StopPodSandbox" && s.ok());
            format!(
                "{pod}: {} succeeded{}, but kubelet has not called {} since{}{}",
                sanitize(&s.method),
                s.start
                    .map(|t| format!(" at {}", clock(&t)))
                    .unwrap_or_default(),
                e.expected_next
                    .as_ref()
                    .map_or_else(|| "?".into(), |n| sanitize(&n.method)),
                e.waited_ns
                    .map(|w| format!(" ({} ago)", duration(w)))
                    .unwrap_or_default(),
                if stopped {
                    "; kubelet removes a stopped sandbox at its garbage collection, each \
                     minute (StopPodSandbox again, then RemovePodSandbox)"
                } else {
                    ""
                }
            )
        }
        TeardownProgress::CallPending {
            method,
            container,
            waited_ns,
            grace_period_ns,
            grace_left_ns,
            deadline_ns,
            ..
        } => {
            let call = format!(
                "{}{}",
                sanitize(method),
                container
                    .as_ref()
                    .map(|c| format!(" of container {}", sanitize(c)))
                    .unwrap_or_default()
            );
            let waited = duration(*waited_ns);
            match (grace_period_ns, grace_left_ns) {
                (Some(g), Some(left)) if *left > 0 && e.verdict == Verdict::Waiting => format!(
                    "{pod} is not stuck: it waits out its grace period: kubelet's {call} has \
                     run {waited} of the {} it gave the container to exit after SIGTERM; the \
                     runtime sends SIGKILL in {}",
                    duration(*g),
                    duration(*left)
                ),
                (Some(g), Some(left)) if *left > 0 => format!(
                    "{pod}: kubelet's {call} has run {waited} of the {} grace period it gave \
                     the container to exit after SIGTERM (SIGKILL in {})",
                    duration(*g),
                    duration(*left)
                ),
                (Some(g), _) => format!(
                    "{pod}: kubelet's {call} has run {waited}, past the {} grace period it \
                     gave: the runtime sends SIGKILL when it ends",
                    duration(*g)
                ),
                (None, _) => match deadline_ns {
                    Some(d) if waited_ns > d => format!(
                        "{pod}: kubelet's {call} has run {waited} without an answer, past its \
                         {} deadline",
                        duration(*d)
                    ),
                    _ => format!("{pod}: kubelet's {call} has run {waited} and not returned yet"),
                },
            }
        }
    }
}

/// "CRI StopContainer (main) called at 12:00:01.123456, timeout 600 s, no
/// answer since".
fn pending_line(e: &Explanation) -> Option<String> {
    let TeardownProgress::CallPending {
        method,
        container,
        since,
        grace_period_ns,
        ..
    } = &e.progress
    else {
        return None;
    };
    Some(format!(
        "CRI {}{} called at {}{}, no answer since",
        sanitize(method),
        container
            .as_ref()
            .map(|c| format!(" ({})", sanitize(c)))
            .unwrap_or_default(),
        clock(since),
        grace_period_ns
            .map(|g| format!(", timeout {}", duration(g)))
            .unwrap_or_default()
    ))
}

/// What holds the pod below its CRI calls, in one sentence.
fn blocker_sentence(b: &Blocker) -> String {
    match b {
        Blocker::ClientGone { client, ago_ns, .. } => format!(
            "the CRI connection of its last call{} closed {} ago and no CRI client has \
             connected since: nobody asks the runtime to tear it down (is kubelet running?)",
            client
                .as_ref()
                .map(|c| format!(" ({})", sanitize(c)))
                .unwrap_or_default(),
            duration(*ago_ns)
        ),
        Blocker::HookPending {
            plugin,
            event,
            waited_ns,
            timeout_ns,
            ..
        } => format!(
            "NRI plugin {}'s {} hook has not returned for {}{}",
            sanitize(plugin),
            sanitize(event),
            duration(*waited_ns),
            timeout_ns
                .map(|t| format!(" (the runtime's timeout for it: {})", duration(t)))
                .unwrap_or_default()
        ),
        Blocker::AliveAfterKill {
            pid,
            comm,
            container,
            signal,
            by_kernel,
            ago_ns,
            alive,
            ..
        } => {
            let from = if *by_kernel {
                format!(
                    "sent by the kernel as its pid namespace's init {}[{}] exited",
                    sanitize(&signal.comm),
                    signal.tgid
                )
            } else {
                format!("from {}[{}]", sanitize(&signal.comm), signal.tgid)
            };
            format!(
                "pid {pid}{} of container {} is still alive {} after SIGKILL {from}{}",
                comm.as_ref()
                    .map(|c| format!(" ({})", sanitize(c)))
                    .unwrap_or_default(),
                sanitize(container),
                duration(*ago_ns),
                if *alive > 1 {
                    format!(" ({alive} processes in all)")
                } else {
                    String::new()
                }
            )
        }
        Blocker::PendingSigkill {
            pid,
            comm,
            container,
            state,
            wchan,
        } => format!(
            "pid {pid} ({}) of container {} has SIGKILL pending and has not exited: it is in \
             state {}{} (killed before the trace began; a process in state D waits in the \
             kernel, e.g. for a FUSE or NFS answer)",
            sanitize(comm),
            sanitize(container),
            sanitize(state),
            if wchan.is_empty() || wchan == "0" {
                String::new()
            } else {
                format!(" waiting in {}", sanitize(wchan))
            }
        ),
        Blocker::UnmountFailed {
            path,
            errno,
            event,
            ago_ns,
        } => failed(
            &format!("unmounting {}", sanitize(path)),
            event,
            *errno,
            *ago_ns,
        ),
        Blocker::RemoveFailed {
            what,
            path,
            errno,
            event,
            ago_ns,
        } => {
            let what = match what {
                Removal::Cgroup => "the cgroup",
                Removal::NetnsFile => "the network namespace file",
                Removal::Directory => "the directory",
                Removal::File => "the file",
            };
            failed(
                &format!("removing {what} {}", sanitize(path)),
                event,
                *errno,
                *ago_ns,
            )
        }
    }
}

/// "`what` failed with EBUSY (...) (runc[9], 3.00s ago)".
fn failed(what: &str, e: &SandboxEvent, errno: i32, ago_ns: u64) -> String {
    format!(
        "{what} failed with {} ({}[{}], {} ago)",
        errno_text(errno),
        sanitize(&e.comm),
        e.tgid,
        duration(ago_ns)
    )
}

/// The sentence of `e`: where the teardown stands, and what holds it.
pub fn base_sentence(e: &Explanation) -> String {
    let mut s = progress_sentence(e);
    if let Some(b) = &e.blocker {
        s.push_str("; ");
        s.push_str(&blocker_sentence(b));
    }
    s
}

/// The calls and kernel events that show it, one per line.
pub fn evidence(e: &Explanation) -> Vec<String> {
    let mut v: Vec<String> = match &e.progress {
        TeardownProgress::Removed { .. } | TeardownProgress::NextNotCalled { .. } => {
            e.steps.iter().map(step_line).collect()
        }
        TeardownProgress::NotStarted { .. } => Vec::new(),
        TeardownProgress::HookFailed { step, .. } => {
            let s = &e.steps[*step];
            std::iter::once(step_line(s))
                .chain(s.failed_hooks().map(|h| format!("NRI {}", failed_hook(h))))
                .collect()
        }
        TeardownProgress::CallFailed { step } => vec![step_line(&e.steps[*step])],
        TeardownProgress::CallPending { .. } => e
            .steps
            .iter()
            .map(step_line)
            .chain(pending_line(e))
            .collect(),
    };
    match &e.blocker {
        None => {}
        Some(Blocker::HookPending {
            plugin,
            event,
            since,
            ..
        }) => v.push(format!(
            "{} NRI {} {} called, no response since",
            clock(since),
            sanitize(plugin),
            sanitize(event)
        )),
        Some(Blocker::AliveAfterKill { signals, .. }) => {
            v.extend(signals.iter().map(kernel_evidence))
        }
        Some(Blocker::PendingSigkill { pid, .. }) => v.push(format!(
            "on this node now: /proc/{pid}/status shows SIGKILL pending"
        )),
        Some(Blocker::ClientGone { client, closed, .. }) => v.push(format!(
            "{} CRI connection{} closed",
            clock(closed),
            client
                .as_ref()
                .map(|c| format!(" of {}", sanitize(c)))
                .unwrap_or_default()
        )),
        Some(Blocker::UnmountFailed { event, .. } | Blocker::RemoveFailed { event, .. }) => {
            v.push(kernel_evidence(event))
        }
    }
    v
}

/// A process the node shows holding or running in something of the pod.
fn holder_line(w: &mut impl Write, h: &Holder) -> io::Result<()> {
    writeln!(
        w,
        "      pid {} ({}) {} {} state {} wchan {}{}",
        h.pid,
        sanitize(&h.comm),
        h.what,
        sanitize(&h.path),
        h.state,
        sanitize(&h.wchan),
        if h.sigkill_pending {
            ", SIGKILL pending"
        } else {
            ""
        }
    )
}

/// The step kubelet makes next, in words.
fn next_text(n: &NextStep) -> String {
    if n.retry {
        format!("{} again (kubelet retries)", sanitize(&n.method))
    } else {
        sanitize(&n.method)
    }
}

/// The sentence, completed with what the node shows when the teardown is
/// blocked or waiting: a process holding a rootfs, or still alive in a
/// container's cgroup.
pub fn sentence(e: &Explanation, node: Option<&NodeFacts>) -> String {
    let mut s = base_sentence(e);
    if e.verdict == Verdict::Gone {
        // The node's part is done; what still shows the pod Terminating
        // is the API's (kubelet deletes the pod object once it is done,
        // unless a finalizer holds it: pod-stuck-terminating-zh.txt).
        match node.map(NodeFacts::left) {
            Some(left) if left.is_empty() => s.push_str(
                "; nothing of it is left on this node (no container, rootfs, volume mount or \
                 pod cgroup): if `kubectl get pod` still shows it Terminating, what holds it is \
                 not on this node (a finalizer on the pod, or the API server not told yet)",
            ),
            Some(left) => {
                s.push_str("; yet on this node: ");
                s.push_str(&left.join(", "));
            }
            None => {}
        }
        return s;
    }
    for v in node.map(|n| n.volumes.as_slice()).unwrap_or_default() {
        if let Some(h) = v.holders.first() {
            s.push_str(&format!(
                "; on this node pid {} ({}) holds the pod's volume {} (its {}, state {})",
                h.pid,
                sanitize(&h.comm),
                sanitize(&v.mount),
                h.what,
                h.state
            ));
        }
    }
    for c in node.map(|n| n.containers.as_slice()).unwrap_or_default() {
        for p in &c.signalled {
            s.push_str(&format!(
                "; on this node pid {} ({}) is in state {}{}",
                p.pid,
                sanitize(&p.comm),
                p.state,
                waiting_in(p)
            ));
        }
        if let Some(h) = c.holders.first() {
            s.push_str(&format!(
                "; on this node pid {} ({}) holds container {}'s rootfs {} (its {}, state {})",
                h.pid,
                sanitize(&h.comm),
                sanitize(&c.name),
                sanitize(c.rootfs.first().map_or(&h.path, |r| r)),
                h.what,
                h.state
            ));
        }
        if let Some(p) = c.processes.first() {
            s.push_str(&format!(
                "; container {} still has {} process(es) in its cgroup, e.g. pid {} ({}) in state {}{}",
                sanitize(&c.name),
                c.processes.len(),
                p.pid,
                sanitize(&p.comm),
                p.state,
                waiting_in(p)
            ));
        }
    }
    s
}

pub fn text(w: &mut impl Write, e: &Explanation, node: Option<&NodeFacts>) -> io::Result<()> {
    writeln!(w, "{}", sentence(e, node))?;
    writeln!(
        w,
        "  verdict: {}",
        match e.verdict {
            Verdict::Gone => "gone",
            Verdict::Blocked => "blocked",
            Verdict::Waiting => "waiting",
            Verdict::NotTornDown => "not torn down",
        }
    )?;
    if let Some(n) = &e.expected_next {
        write!(w, "  next: {}", next_text(n))?;
        if let Some(t) = e.waited_ns {
            write!(w, ", waited for {}", duration(t))?;
        }
        writeln!(w)?;
    }
    let evidence = evidence(e);
    if !evidence.is_empty() {
        writeln!(w, "  evidence:")?;
        for l in &evidence {
            writeln!(w, "    {l}")?;
        }
    }
    if !e.steps.is_empty() {
        writeln!(w, "  teardown steps:")?;
        for s in &e.steps {
            writeln!(
                w,
                "    {:<17} {:<12} {:>9}  {}",
                sanitize(&s.method),
                sanitize(s.container.as_deref().unwrap_or("")),
                duration_opt(s.duration_ns),
                sanitize(&s.outcome.describe())
            )?;
            for h in &s.hooks {
                writeln!(w, "      NRI {}", hook_line(h))?;
            }
        }
    }
    if !e.kernel.is_empty() {
        writeln!(w, "  kernel (signals, exits, unmounts, removals):")?;
        for k in &e.kernel {
            writeln!(w, "    {}", kernel_line(k))?;
        }
    }
    if !e.findings.is_empty() {
        writeln!(w, "  findings:")?;
        for f in &e.findings {
            writeln!(w, "    {}: {}", f.rule, sanitize(&finding_sentence(e, f)))?;
        }
    }
    if let Some(n) = node {
        for v in &n.volumes {
            writeln!(
                w,
                "  on this node: volume {} still mounted",
                sanitize(&v.mount)
            )?;
            for h in &v.holders {
                holder_line(w, h)?;
            }
        }
    }
    match node.map(|n| n.containers.as_slice()) {
        None => {}
        Some([]) => writeln!(w, "  on this node: no container of the pod known")?,
        Some(cs) => {
            writeln!(w, "  on this node:")?;
            for c in cs {
                let mounted = if c.rootfs.is_empty() {
                    "rootfs not mounted".to_string()
                } else {
                    format!("rootfs {}", sanitize(&c.rootfs.join(", ")))
                };
                let cgroup = match &c.cgroup {
                    Some(g) => format!("cgroup {} ({} processes)", sanitize(g), c.processes.len()),
                    None => "no cgroup".into(),
                };
                writeln!(
                    w,
                    "    container {} ({}): {mounted}; {cgroup}",
                    sanitize(&c.name),
                    sanitize(short_id(&c.id))
                )?;
                for h in c.signalled.iter().chain(&c.holders).chain(&c.processes) {
                    holder_line(w, h)?;
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
