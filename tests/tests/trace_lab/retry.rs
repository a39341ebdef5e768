//! cri-deadline-retry, with cri-driver (tonic) and grpc-go's client: the
//! tries as the driver made them and the name-reservation retry streak, on
//! the runtimes of the matrix (main.rs).

use super::*;

/// A RunPodSandbox held 3 s by a plugin, a 1 s client deadline, retries:
/// the name-reservation finding, certain; the slow hook over its budget
/// (containerd passes the CRI deadline left as the hook's timeout); when
/// containerd's own deadline fires first, plugin-timeout (a race). Nothing
/// else: in particular the plugin, which got the RunPodSandbox (still busy
/// with it when containerd gave up and sent StopPodSandbox), is not "never
/// told" of the pod.
///
/// Other runtimes answer the retries otherwise (docs/lab.md): containerd
/// 2.1 answers the second try "name is reserved" and the driver adopts the
/// sandbox it lists; CRI-O makes the retry wait for the first request, or
/// tears the timed-out sandbox down and makes a new one (its first try may
/// even succeed once NRI closed the slow plugin), or, its handler's context
/// canceled at the deadline (grpc/grpc-go#8961), keeps the slow plugin and
/// no try succeeds before the driver gives up (containerd 2.1 can too). So the finding is
/// expected exactly when the driver's own record shows a RunPodSandbox
/// requested again after a try ran into its deadline; and each try nri-trace
/// reports failed exactly when the driver saw it fail.
fn check_deadline_retry(rt: Option<Runtime>, scenario: &str) {
    let runtime = runtime_of(rt);
    let Some((out, records)) = traced_on(rt, scenario) else {
        return;
    };
    let truth = truth::read(&out.join("truth.ndjson")).expect("truth");
    let tries: Vec<&truth::Outcome> = truth
        .iter()
        .filter_map(|t| match t {
            Truth::Cri {
                method, outcome, ..
            } if method == "RunPodSandbox" => Some(outcome),
            _ => None,
        })
        .collect();
    eprintln!("{scenario}: the driver's RunPodSandbox tries: {tries:?}");
    let retried_after_deadline = tries
        .iter()
        .position(|o| matches!(o, truth::Outcome::DeadlineExceeded))
        .is_some_and(|i| i + 1 < tries.len());
    if runtime == Runtime::Containerd17 {
        // 1.7 holds the name until the first request ends: the driver
        // always retries (third try ok).
        assert!(retried_after_deadline, "{tries:?}");
    }
    failed_calls_traced_failed(scenario, &truth, &records);
    assert_rollbacks(scenario, runtime, &records);
    cri_check::assert_every_call(scenario, &truth, &records, cri_check::Allow::default());
    assert_expiry_and_retry(scenario, runtime, &truth, &records);
    let f = findings(&records);
    // A streak of tries that all ran into their deadline, which nothing
    // ended, met no name reservation: no finding (each try's
    // plugin-timeout tells what held it).
    assert_eq!(
        f.iter().any(|(r, _, c)| *r == NAME_RESERVATION_RETRY && *c),
        retried_after_deadline && !driver_gave_up(&truth),
        "{scenario} on {}: {f:?}",
        runtime.name()
    );
    assert!(
        f.iter().all(
            |(r, _, _)| [NAME_RESERVATION_RETRY, HOOK_OVER_BUDGET, PLUGIN_TIMEOUT].contains(r)
        ),
        "{scenario}: {f:?}"
    );
}

/// Whether the driver gave its retries up: CRI-O and containerd 2.x may
/// cancel the handler's context at the deadline (grpc/grpc-go#8961), NRI
/// then keeps the slow plugin and no try succeeds (the scenario's note,
/// allowed on those runtimes by its verify; on containerd 2.1 once in CI,
/// 2026-11-30).
fn driver_gave_up(truth: &[Truth]) -> bool {
    truth.iter().any(|t| {
        matches!(t, Truth::Note { text, .. } if text.starts_with(nri_trace_lab::scenario::RETRIES_SPENT))
    })
}

/// The runtime undoing a sandbox: every StopPodSandbox or
/// RemovePodSandbox delivery no CRI call made is labeled `rollback` and
/// names a traced RunPodSandbox of that pod that did not end OK, by its
/// connection and stream. On containerd 2.3 the first try's hook fails
/// with the client's deadline, so there is at least one, after that try
/// ended on the wire (internal/cri/nri/nri_api_linux.go `RunPodSandbox`).
fn assert_rollbacks(scenario: &str, runtime: Runtime, records: &[Record]) {
    let failed_runs: Vec<&CriCall> = cri_check::calls(records)
        .into_iter()
        .filter(|c| c.method_name() == Some("RunPodSandbox") && !c.outcome.is_ok())
        .collect();
    let mut rollbacks = 0;
    for r in records {
        let Record::NriUncaused(u) = r else { continue };
        if !matches!(
            u.span.hook.to_string().as_str(),
            "STOP_POD_SANDBOX" | "REMOVE_POD_SANDBOX"
        ) {
            continue;
        }
        assert_eq!(u.no_cri_cause, NoCause::Rollback, "{scenario}: {u:?}");
        let run = u.rolls_back.as_ref().expect("rolls_back of a rollback");
        let call = failed_runs
            .iter()
            .find(|c| c.conn == run.conn && c.stream_id == run.stream_id)
            .unwrap_or_else(|| panic!("{scenario}: {run:?} is no failed RunPodSandbox traced"));
        assert_eq!(
            call.pod.as_ref().map(|p| &p.uid),
            u.span.call.pod.as_ref().map(|p| &p.uid),
            "{scenario}: {u:?}"
        );
        if runtime == Runtime::Containerd23 {
            let (Some(end), Some(start)) = (call.end, u.span.call.start) else {
                panic!("{scenario}: {call:?} {u:?}");
            };
            assert!(end.mono_ns < start.mono_ns, "{scenario}: {call:?} {u:?}");
        }
        rollbacks += 1;
    }
    eprintln!("{scenario}: {rollbacks} deliveries of the runtime undoing a failed RunPodSandbox");
    if runtime == Runtime::Containerd23 {
        assert!(rollbacks >= 1, "{scenario}: no rollback traced");
    }
}

/// The traced RunPodSandbox calls are the driver's tries, one for one and
/// in order, each ending as the driver saw it: a try that ran into its
/// deadline as the client's expiry of about its 1 s deadline, the retries
/// asking for the first try's name, uid and attempt (the name reservation
/// kubelet runs into). The last try succeeds, or, where the driver's
/// record says it adopted the sandbox of the timed-out try, is the
/// runtime's "name is reserved" (containerd 2.1 lists the sandbox READY
/// while its NRI RunPodSandbox hook is still held: docs/lab.md, "Scenarios
/// on containerd 2.1"; the scenario's verify allows this on 2.x only).
/// On containerd (1.7 and 2.1) the plugin's 3 s hook always holds the
/// first try past its deadline, and the driver retries; CRI-O calls NRI
/// with the request's context and closes the slow plugin once the hook
/// outlives it, so its first try may yet succeed (docs/lab.md, "Scenarios
/// on CRI-O"): there the tries are whatever the driver's record shows.
fn assert_expiry_and_retry(scenario: &str, runtime: Runtime, truth: &[Truth], records: &[Record]) {
    let since = truth::observer_attached_ns(truth).expect("attach note");
    let tries: Vec<(&truth::Outcome, Option<u64>)> = truth
        .iter()
        .filter_map(|t| match t {
            Truth::Cri {
                method,
                outcome,
                deadline_ms,
                start_mono_ns,
                ..
            } if method == "RunPodSandbox" && *start_mono_ns >= since => {
                Some((outcome, *deadline_ms))
            }
            _ => None,
        })
        .collect();
    let runs: Vec<_> = cri_check::calls(records)
        .into_iter()
        .filter(|c| c.method_name() == Some("RunPodSandbox"))
        .collect();
    eprintln!(
        "{scenario} on {}: RunPodSandbox traced {:?}",
        runtime.name(),
        runs.iter().map(|r| &r.outcome).collect::<Vec<_>>()
    );
    assert_eq!(
        runs.len(),
        tries.len(),
        "{scenario}: the driver's tries {tries:?}"
    );
    if runtime != Runtime::CriO {
        assert!(
            runs.len() >= 2 && matches!(tries[0].0, truth::Outcome::DeadlineExceeded),
            "{scenario}: a timed-out try and a retry: {tries:?}"
        );
    }
    for (run, (outcome, deadline_ms)) in runs.iter().zip(&tries) {
        match outcome {
            truth::Outcome::DeadlineExceeded => {
                // The client's expiry, or the server's answer when it
                // reached the socket first (CRI-O answers a retry held for
                // the name reservation at the same deadline): the driver
                // reports its own expiry.
                assert!(
                    run.outcome.deadline_expired() || cri_check::answered_at_deadline(run),
                    "{run:?}"
                );
                let d = deadline_ms.expect("the try's deadline") * 1_000_000;
                assert!(
                    run.deadline_ns.is_some_and(|x| x > d - d / 10 && x <= d),
                    "{run:?}"
                );
            }
            truth::Outcome::Ok => assert_eq!(run.outcome, CriOutcome::Ok, "{run:?}"),
            truth::Outcome::Error { message, .. } => assert!(
                matches!(&run.outcome, CriOutcome::Error { message: m, .. } if m.contains(message.as_str())),
                "{run:?}: the driver got {message:?}"
            ),
        }
    }
    let last = runs.last().expect("a RunPodSandbox");
    let adopted = truth
        .iter()
        .any(|t| matches!(t, Truth::Note { text, .. } if text.starts_with("adopted sandbox")));
    if adopted {
        assert!(
            matches!(&last.outcome, CriOutcome::Error { message, .. } if message.contains("is reserved for")),
            "{last:?}"
        );
    } else if driver_gave_up(truth) {
        assert_ne!(
            runtime,
            Runtime::Containerd17,
            "{scenario}: the driver gave up"
        );
        assert!(
            last.outcome.deadline_expired() || cri_check::answered_at_deadline(last),
            "{last:?}"
        );
    } else {
        assert_eq!(last.outcome, CriOutcome::Ok, "{last:?}");
    }
    let first = runs[0].pod.as_ref().expect("pod of the first try");
    for r in &runs[1..] {
        let p = r.pod.as_ref().expect("pod of a retry");
        assert_eq!(
            (&p.name, &p.uid, p.attempt),
            (&first.name, &first.uid, first.attempt)
        );
    }
}

// Not on the default runtime, containerd 2.3, yet. It passes the CRI
// deadline left to the hook as its timeout, gives up on the slow plugin
// just before the client's deadline, and rolls the sandbox back after the
// client has gone (internal/cri/nri/nri_api_linux.go: StopPodSandbox and
// RemovePodSandbox to the plugins after a failed RunPodSandbox). nri-trace
// now labels those deliveries `rollback`, naming the RunPodSandbox
// (engine/correlate.rs; 2026-11-29: passed once, the two deliveries
// labeled, naming stream 3). But the scenario itself is not yet right for
// 2.3: in the next run every try of five ran into its deadline, and the
// last one's sandbox kept the name (containerd marks a sandbox whose
// cleanup failed SANDBOX_UNKNOWN and keeps its name for RemovePodSandbox:
// internal/cri/server/sandbox_run.go, `cleanupErr`; its cleanup uses the
// expired request context) without becoming READY, so the driver, which
// adopts only a READY sandbox, retried "name is reserved" until its budget
// ran out. Kubelet would list it NOTREADY, stop and remove it, and make
// the next sandbox with attempt + 1; the driver does not yet.

#[test]
fn ctrd21_trace_name_reservation_retry_found() {
    check_deadline_retry(Some(Runtime::Containerd21), "cri-deadline-retry");
}

#[test]
fn crio_trace_name_reservation_retry_found() {
    check_deadline_retry(Some(Runtime::CriO), "cri-deadline-retry");
}

#[test]
fn ctrd17_trace_name_reservation_retry_found() {
    check_deadline_retry(Some(Runtime::Containerd17), "cri-deadline-retry");
}

/// The same with grpc-go's client (kubelet's gRPC stack): the client
/// resets the stream when its context expires (containerd 2.1's server
/// resets it first, grpc/grpc-go#8071: docs/lab.md).
#[test]
fn ctrd17_trace_name_reservation_retry_found_go() {
    check_deadline_retry(Some(Runtime::Containerd17), "cri-deadline-retry-go");
}

#[test]
fn ctrd21_trace_name_reservation_retry_found_go() {
    check_deadline_retry(Some(Runtime::Containerd21), "cri-deadline-retry-go");
}

/// The seed's situation on CRI-O 1.33 and 1.36 (cri-o#4221): the sandbox is slow
/// for a reason the request's context does not cut short (the lab slows
/// crio's pinns 3 s), the client retries the same name after each 1 s
/// deadline, no NRI plugin. Every retry runs into the name reservation and,
/// since that fix, waits its own deadline out instead of failing
/// at once (crio's log: one "name is reserved" per retry, the scenario's
/// note); the retry after the sandbox is made takes it from the resource
/// cache. On the wire every try but the last ran into its deadline: the
/// client's expiry, or CRI-O's own DEADLINE_EXCEEDED answer carrying the
/// seed's "name is reserved" when it reached the socket first (a race per
/// retry). nri-trace: the name-reservation finding, certain, with every
/// try as a request and the reserved answers counted; each try traced as
/// the driver saw it, and nothing else found.
#[test]
fn crio_trace_name_reservation_storm() {
    let scenario = "cri-retry-slow-sandbox";
    let Some((out, records)) = traced_on(Some(Runtime::CriO), scenario) else {
        return;
    };
    let truth = truth::read(&out.join("truth.ndjson")).expect("truth");
    let tries = truth
        .iter()
        .filter(|t| matches!(t, Truth::Cri { method, .. } if method == "RunPodSandbox"))
        .count();
    let crio_log = note(&truth, "crio log:");
    eprintln!("{scenario}: {tries} RunPodSandbox tries; {crio_log}");
    assert_eq!(
        crio_log,
        format!(
            "crio log: {} name is reserved, 1 taken from the resource cache",
            tries - 1
        )
    );
    failed_calls_traced_failed(scenario, &truth, &records);
    assert_rollbacks(scenario, Runtime::CriO, &records);
    cri_check::assert_every_call(scenario, &truth, &records, cri_check::Allow::default());
    assert_expiry_and_retry(scenario, Runtime::CriO, &truth, &records);
    // The tries CRI-O's own answer reached the wire for, before the
    // client's expiry: DEADLINE_EXCEEDED, or "now ready ... on next
    // retry", with the seed's "name is reserved" in its message (the race
    // of each retry's deadline).
    let reserved_on_wire = cri_check::calls(&records)
        .iter()
        .filter(|c| {
            matches!(&c.outcome, CriOutcome::Error { message, .. } if message.contains("name is reserved"))
        })
        .count();
    eprintln!("{scenario}: {reserved_on_wire} tries answered \"name is reserved\" on the wire");
    assert!(reserved_on_wire < tries);
    let streaks: Vec<(usize, usize)> = finding_details(&records, NAME_RESERVATION_RETRY)
        .into_iter()
        .filter_map(|(_, d)| match d {
            Detail::NameReservationRetry {
                requests, reserved, ..
            } => Some((*requests, *reserved)),
            _ => None,
        })
        .collect();
    assert_eq!(streaks, vec![(tries, reserved_on_wire)]);
    let f = findings(&records);
    assert_eq!(f, vec![(NAME_RESERVATION_RETRY, None, true)], "{f:?}");
}
