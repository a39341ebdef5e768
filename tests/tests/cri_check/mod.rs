//! Checks nri-trace's CRI records against the lab's ground truth: every
//! CRI call the driver made (method, pod, container, deadline, outcome),
//! written by the driver at the moment it made it. Shared by the live lab
//! tests (trace_lab/, on every runtime) and the replay of committed
//! recordings (cri_replay.rs).
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use nri_trace::{
    capture::CaptureEvent,
    engine::Record,
    model::{CriCall, CriOutcome, Identified},
    pipeline::replay::{records_of_events, Collected},
};
use nri_trace_lab::truth::{self, ContainerRef, Outcome, PodRef, Truth};

/// Recorded events through the pipeline, as `nri-trace replay` runs a raw
/// capture.
pub(crate) fn replay(events: &[CaptureEvent]) -> Collected {
    records_of_events(events, Default::default())
}

/// The CRI calls among the records.
pub(crate) fn calls(records: &[Record]) -> Vec<&CriCall> {
    records
        .iter()
        .filter_map(|r| match r {
            Record::CriSpan(s) => Some(&s.call),
            _ => None,
        })
        .collect()
}

/// One truth CRI call.
pub(crate) struct TruthCall<'a> {
    pub method: &'a str,
    pub pod: Option<&'a PodRef>,
    pub container: Option<&'a ContainerRef>,
    pub start: u64,
    pub end: u64,
    pub deadline_ms: Option<u64>,
    pub outcome: &'a Outcome,
    pub retry: u32,
}

pub(crate) fn truth_calls(truth: &[Truth], since: u64) -> Vec<TruthCall<'_>> {
    truth
        .iter()
        .filter_map(|t| match t {
            Truth::Cri {
                method,
                pod,
                container,
                start_mono_ns,
                end_mono_ns,
                deadline_ms,
                outcome,
                retry,
                ..
            } if *start_mono_ns >= since => Some(TruthCall {
                method,
                pod: pod.as_ref(),
                container: container.as_ref(),
                start: *start_mono_ns,
                end: *end_mono_ns,
                deadline_ms: *deadline_ms,
                outcome,
                retry: *retry,
            }),
            _ => None,
        })
        .collect()
}

/// What a comparison found.
#[derive(Debug, Default)]
pub(crate) struct CriReport {
    /// Truth calls made after the attach.
    pub compared: usize,
    /// Of those, found among the decoded calls.
    pub matched: usize,
    pub known: usize,
    pub inferred: usize,
    pub unknown: usize,
    /// Decoded with a method other than the one the driver called.
    pub mislabeled: usize,
    pub problems: Vec<String>,
}

impl CriReport {
    pub(crate) fn line(&self) -> String {
        format!(
            "{}/{} CRI calls found; method known {}, inferred {}, unknown {}; {} mislabeled",
            self.matched, self.compared, self.known, self.inferred, self.unknown, self.mislabeled
        )
    }
}

/// `truth` with only the driver's calls during which a plugin recorded an
/// NRI event delivery for the pod the call was about (by sandbox id, or by
/// uid and name before RunPodSandbox answered): "calls during which the
/// runtime delivers an NRI event".
pub(crate) fn with_nri_during(truth: &[Truth]) -> Vec<Truth> {
    let delivered = |pod: &PodRef, start: u64, end: u64| {
        truth.iter().any(|n| match n {
            Truth::Nri {
                event: Some(_),
                pod: Some(np),
                recv_mono_ns,
                ..
            } => {
                (start..=end).contains(recv_mono_ns)
                    && (pod.sandbox_id.as_deref() == Some(np.id.as_str())
                        || (pod.uid == np.uid && pod.name == np.name))
            }
            _ => false,
        })
    };
    truth
        .iter()
        .filter(|t| match t {
            Truth::Cri {
                pod: Some(pod),
                start_mono_ns,
                end_mono_ns,
                ..
            } => delivered(pod, *start_mono_ns, *end_mono_ns),
            Truth::Cri { .. } => false,
            _ => true,
        })
        .cloned()
        .collect()
}

fn id_of(c: &CriCall) -> (Option<&str>, Option<&str>) {
    (c.sandbox_id.as_deref(), c.container_id.as_deref())
}

/// How well decoded call `c` matches truth call `t` by identity (higher is
/// better); the method is not used, so that a mislabel shows.
fn affinity(t: &TruthCall<'_>, c: &CriCall) -> u32 {
    let mut a = 0;
    let (sid, cid) = id_of(c);
    if let (Some(p), Some(cp)) = (t.pod, c.pod.as_ref()) {
        if p.name == cp.name && p.uid == cp.uid {
            a += 2;
        }
    }
    if let (Some(x), Some(y)) = (t.pod.and_then(|p| p.sandbox_id.as_deref()), sid) {
        if x == y {
            a += 2;
        }
    }
    if let (Some(x), Some(y)) = (t.container.and_then(|k| k.id.as_deref()), cid) {
        if x == y {
            a += 2;
        }
    }
    a
}

fn outcome_agrees(t: &Outcome, c: &CriCall, allow: Allow) -> bool {
    match (t, &c.outcome) {
        // A failure whose grpc-status sits in a pre-attach HPACK slot and
        // that sent no message: the trace says it failed, its status
        // hidden (Failed), or, when it cannot tell that either (the
        // request not seen), Unknown; an OK answer is told by its
        // response message, never either.
        (Outcome::Ok, CriOutcome::Unknown | CriOutcome::Failed) => false,
        (_, CriOutcome::Unknown | CriOutcome::Failed) => allow.deadline_hidden,
        (Outcome::Ok, CriOutcome::Ok) => true,
        (Outcome::Error { code, .. }, CriOutcome::Error { code: c, .. }) => *code as u32 == *c,
        // The client gave up: its reset, or the server's own expiry.
        (Outcome::DeadlineExceeded, CriOutcome::DeadlineExceeded | CriOutcome::Cancelled) => true,
        (Outcome::DeadlineExceeded, CriOutcome::Error { code: 4, .. }) => true,
        (Outcome::DeadlineExceeded, CriOutcome::Error { .. }) => answered_at_deadline(c),
        // The server's own reset at the deadline (grpc-go >= 1.71 servers:
        // containerd 2.1+, CRI-O 1.36) with the deadline hidden in a
        // pre-attach HPACK slot (h2 indexes a repeated grpc-timeout): the
        // trace cannot tell it from another cancel, and says so.
        (
            Outcome::DeadlineExceeded,
            CriOutcome::Reset {
                by, error_code: 8, ..
            },
        ) => by == "server" && c.deadline_ns.is_none(),
        _ => false,
    }
}

/// The server's error answer came once the call's deadline had run out
/// (within 1 ms of it): CRI-O answers a retry it held for the name
/// reservation when the request's context ends (`server/utils.go`
/// getResourceOrWait, "... is now ready and will be provided to the
/// kubelet on next retry"), the same instant the client's own timer
/// fires; the client reports its expiry when that won the race on its
/// side, while the capture has the answer on the socket.
pub(crate) fn answered_at_deadline(c: &CriCall) -> bool {
    matches!(c.outcome, CriOutcome::Error { .. })
        && c.deadline_ns
            .zip(c.duration_ns)
            .is_some_and(|(d, took)| took + 1_000_000 >= d)
}

/// Compare the driver's calls made at or after `since` with the decoded
/// ones. A decoded call answers a truth call when the runtime read its
/// headers while the driver waited (`t.start <= c.start <= t.end`).
///
/// What a trace attached to a running connection may not know (what it
/// reports must still agree).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Allow {
    /// A repeated grpc-timeout value, or a failure's grpc-status, may sit
    /// in a pre-attach HPACK slot.
    pub deadline_hidden: bool,
    /// Pods and containers created before the attach are known by id only.
    pub identity_missing: bool,
}

pub(crate) fn compare(truth: &[Truth], calls: &[&CriCall], since: u64, allow: Allow) -> CriReport {
    let mut r = CriReport::default();
    let mut used = vec![false; calls.len()];
    for t in truth_calls(truth, since) {
        r.compared += 1;
        let best = calls
            .iter()
            .enumerate()
            .filter(|(i, c)| {
                !used[*i]
                    && c.start
                        .is_some_and(|s| s.mono_ns >= t.start && s.mono_ns <= t.end)
            })
            .max_by_key(|(i, c)| (affinity(&t, c), std::cmp::Reverse(*i)));
        let Some((i, c)) = best else {
            r.problems.push(format!(
                "{} of {:?} at {} not decoded",
                t.method,
                t.pod.map(|p| &p.name),
                t.start
            ));
            continue;
        };
        used[i] = true;
        r.matched += 1;
        match &c.identified {
            Identified::Known => r.known += 1,
            Identified::Inferred { .. } => r.inferred += 1,
            Identified::Unknown { candidates } => {
                r.unknown += 1;
                if !candidates.is_empty() && !candidates.iter().any(|c| c.name() == t.method) {
                    r.mislabeled += 1;
                    r.problems.push(format!(
                        "{} of {:?}: unknown, but its candidates {candidates:?} leave it out",
                        t.method,
                        t.pod.map(|p| &p.name)
                    ));
                }
            }
        }
        let what = format!("{} of {:?}", t.method, t.pod.map(|p| &p.name));
        if let Some(m) = &c.method {
            if m != t.method {
                r.mislabeled += 1;
                r.problems
                    .push(format!("{what}: decoded as {m} ({:?})", c.identified));
                continue;
            }
        }
        if !outcome_agrees(t.outcome, c, allow) {
            r.problems.push(format!(
                "{what}: outcome {:?}, driver got {:?}",
                c.outcome, t.outcome
            ));
        }
        if c.method.is_none() {
            continue;
        }
        // The driver names the pod it lists for; the request may not (an
        // unfiltered list), so a list call is checked only if it names one.
        let list = t.method.starts_with("List");
        let may_miss = allow.identity_missing;
        if let Some(p) = t.pod.filter(|_| !(list || may_miss) || c.pod.is_some()) {
            match &c.pod {
                Some(cp)
                    if cp.name == p.name
                        && cp.namespace == p.namespace
                        && cp.uid == p.uid
                        && cp.attempt == p.attempt => {}
                other => r
                    .problems
                    .push(format!("{what}: pod {other:?}, driver named {p:?}")),
            }
            if let (Some(x), Some(y)) = (p.sandbox_id.as_deref(), c.sandbox_id.as_deref()) {
                if x != y {
                    r.problems
                        .push(format!("{what}: sandbox {y}, driver's {x}"));
                }
            }
        }
        if let Some(k) = t.container.filter(|_| !may_miss || c.container.is_some()) {
            match &c.container {
                Some(ck) if ck.name == k.name && ck.attempt == k.attempt => {}
                other => r
                    .problems
                    .push(format!("{what}: container {other:?}, driver named {k:?}")),
            }
            if let (Some(x), Some(y)) = (k.id.as_deref(), c.container_id.as_deref()) {
                if x != y {
                    r.problems
                        .push(format!("{what}: container id {y}, driver's {x}"));
                }
            }
        }
        if let Some(ms) = t.deadline_ms {
            let want = ms * 1_000_000;
            // grpc-timeout is the time left when the headers were written.
            let ok = match c.deadline_ns {
                Some(d) => d <= want && d + 100_000_000 >= want,
                None => allow.deadline_hidden,
            };
            if !ok {
                r.problems.push(format!(
                    "{what}: deadline {:?} ns, driver set {ms} ms",
                    c.deadline_ns
                ));
            }
        }
    }
    r
}

/// Every CRI call the driver made after the observer attached (the
/// truth's attach note) is among `records` and agrees ([`compare`] with
/// `allow`), none mislabeled. Prints the figures; fails on any problem.
/// The report.
pub(crate) fn assert_every_call(
    scenario: &str,
    truth: &[Truth],
    records: &[Record],
    allow: Allow,
) -> CriReport {
    let since = truth::observer_attached_ns(truth).expect("attach note in the truth");
    let report = compare(truth, &calls(records), since, allow);
    eprintln!("{scenario}: {}", report.line());
    assert!(report.compared > 0, "{scenario}: no truth to compare");
    assert!(
        report.problems.is_empty(),
        "{scenario}: {} problems:\n{}",
        report.problems.len(),
        report.problems.join("\n")
    );
    assert_eq!(report.matched, report.compared, "{scenario}");
    assert_eq!(report.mislabeled, 0, "{scenario}");
    report
}

/// Committed fixtures: `tests/fixtures/cri/<name>/`.
pub(crate) fn fixture_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/cri")
        .join(name)
}
