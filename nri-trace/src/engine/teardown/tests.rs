use super::*;
use crate::{
    basic_types::ConnId,
    decode::{cri::message::PodMeta, nri::message::Event},
    engine::test_calls::*,
};

pub(crate) fn run_pod() -> Record {
    let mut c = cri(Some("RunPodSandbox"), "sb1", 100, 150);
    c.pod = Some(PodMeta {
        name: "web".into(),
        namespace: "ns".into(),
        uid: "u".into(),
        attempt: 0,
    });
    span(c, vec![])
}

pub(crate) fn log(records: &[Record]) -> TeardownLog {
    let mut l = TeardownLog::new();
    for r in records {
        l.on_record(r);
    }
    l
}

/// The pod's teardown: stopped in 35 ms, removed in 3 ms.
pub(crate) fn removed() -> Vec<Record> {
    vec![
        run_pod(),
        span(cri(Some("StopPodSandbox"), "sb1", 1000, 1035), vec![]),
        span(cri(Some("RemovePodSandbox"), "sb1", 1100, 1103), vec![]),
    ]
}

#[test]
fn removed_pod_is_gone_with_step_times() {
    let l = log(&removed());
    let e = l.explain("ns/web", 0).unwrap();
    assert_eq!(e.verdict, Verdict::Gone);
    assert_eq!(e.progress, TeardownProgress::Removed { took_ns: 103 * MS });
    assert_eq!(e.steps[0].method, "StopPodSandbox");
    assert_eq!(e.steps[0].duration_ns, Some(35 * MS));
    assert_eq!(e.blocker, None);
    // By name alone and by sandbox id prefix too.
    assert_eq!(l.explain("web", 0).unwrap().verdict, Verdict::Gone);
    assert_eq!(l.explain("sb1", 0).map(|e| e.pod), Some("ns/web".into()));
}

/// StopPodSandbox succeeded, 10-failer's hook under it failed.
pub(crate) fn failed_hook() -> Vec<Record> {
    let mut h = hook(Some(Event::StopPodSandbox), "failer", "sb1", 1010, 1011);
    h.call.outcome = NriOutcome::Error {
        code: 2,
        message: "refused".into(),
    };
    vec![
        run_pod(),
        span(cri(Some("StopPodSandbox"), "sb1", 1000, 1035), vec![h]),
    ]
}

/// containerd goes on past a failed StopPodSandbox hook: the call
/// succeeds, the hook is named, and the pod waits for kubelet's next call.
#[test]
fn failed_teardown_hook_the_runtime_went_past_is_named_while_waiting() {
    let e = log(&failed_hook()).explain("ns/web", 5000 * MS).unwrap();
    assert_eq!(e.verdict, Verdict::Waiting);
    assert_eq!(
        e.progress,
        TeardownProgress::HookFailed { step: 0, hook: 0 }
    );
    assert_eq!(
        e.expected_next,
        Some(NextStep {
            method: "RemovePodSandbox".into(),
            retry: false
        })
    );
    assert_eq!(e.waited_ns, Some((5000 - 1035) * MS));
}

/// CRI-O returns the plugin's error from StopPodSandbox: the failed hook
/// blocks the teardown.
#[test]
fn failed_teardown_hook_is_the_blocker() {
    let mut records = failed_hook();
    if let Some(Record::CriSpan(s)) = records.last_mut() {
        s.call.outcome = CriOutcome::Error {
            code: 2,
            status: "UNKNOWN".into(),
            message: "refused".into(),
        };
    }
    let e = log(&records).explain("ns/web", 5000 * MS).unwrap();
    assert_eq!(e.verdict, Verdict::Blocked);
    assert_eq!(
        e.progress,
        TeardownProgress::HookFailed { step: 0, hook: 0 }
    );
    let h = &e.steps[0].hooks[0];
    assert_eq!(
        (h.plugin.as_str(), h.hook.as_str()),
        ("10-failer", "STOP_POD_SANDBOX")
    );
    assert_eq!(
        h.outcome,
        NriOutcome::Error {
            code: 2,
            message: "refused".into()
        }
    );
    assert_eq!(
        e.expected_next,
        Some(NextStep {
            method: "StopPodSandbox".into(),
            retry: true
        })
    );
}

/// CreateContainer of `main` (container c1), and its StopContainer,
/// which ran into the client's deadline after 12 s.
pub(crate) fn failed_stop() -> Vec<Record> {
    let mut stop = cri(Some("StopContainer"), "sb1", 1000, 13000);
    stop.sandbox_id = None;
    stop.container_id = Some("c1".into());
    stop.outcome = CriOutcome::DeadlineExceeded;
    vec![
        run_pod(),
        span(create_main("c1"), vec![]),
        span(stop, vec![]),
    ]
}

fn create_main(id: &str) -> CriCall {
    let mut create = cri(Some("CreateContainer"), "sb1", 200, 250);
    create.container_id = Some(id.into());
    create.container = Some(crate::decode::cri::message::ContainerMeta {
        name: "main".into(),
        attempt: 0,
    });
    create
}

/// Stopped, never removed.
pub(crate) fn stopped() -> Vec<Record> {
    vec![
        run_pod(),
        span(create_main("c1"), vec![]),
        span(cri(Some("StopPodSandbox"), "sb1", 1000, 1035), vec![]),
    ]
}

#[test]
fn failed_call_and_missing_call() {
    let e = log(&failed_stop()).explain("ns/web", 0).unwrap();
    assert_eq!(e.verdict, Verdict::Blocked);
    assert_eq!(e.progress, TeardownProgress::CallFailed { step: 0 });
    assert_eq!(e.steps[0].container.as_deref(), Some("main"));
    assert_eq!(e.steps[0].outcome, CriOutcome::DeadlineExceeded);
    assert_eq!(e.steps[0].duration_ns, Some(12_000 * MS));
    assert_eq!(
        e.expected_next,
        Some(NextStep {
            method: "StopContainer".into(),
            retry: true
        })
    );
    assert_eq!(e.containers, vec![("c1".into(), "main".into())]);
    let e = log(&stopped()).explain("ns/web", 61_035 * MS).unwrap();
    assert_eq!(e.verdict, Verdict::Waiting);
    assert_eq!(e.progress, TeardownProgress::NextNotCalled { step: 0 });
    assert_eq!(
        e.expected_next.map(|n| n.method),
        Some("RemovePodSandbox".into())
    );
    assert_eq!(e.waited_ns, Some(60_000 * MS));
    // Never torn down.
    let e = log(&[run_pod()]).explain("web", 0).unwrap();
    assert_eq!(e.verdict, Verdict::NotTornDown);
    assert!(
        matches!(e.progress, TeardownProgress::NotStarted { last_call: Some(ref m), .. } if m == "RunPodSandbox")
    );
    assert!(log(&[run_pod()]).explain("other", 0).is_none());
}

pub(crate) const CID: &str = "c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1";

pub(crate) fn kernel(ms: u64, tgid: u32, comm: &str, op: SandboxOp) -> Record {
    Record::Observed(Observation::Sandbox(SandboxEvent {
        ts: Timestamp {
            mono_ns: ms * MS,
            wall_ns: ms * MS,
        },
        tgid,
        tid: tgid,
        comm: comm.into(),
        cgroup_id: 0,
        cgroup: (op == SandboxOp::Exit { status: Some(9) }).then(|| format!("/k8s.io/{CID}")),
        op,
        truncated: false,
    }))
}

/// StopContainer of `main` (container CID) ran into its 10 s deadline.
pub(crate) fn stuck_stop() -> Vec<Record> {
    let mut stop = cri(Some("StopContainer"), "sb1", 1000, 11000);
    stop.sandbox_id = None;
    stop.container_id = Some(CID.into());
    stop.outcome = CriOutcome::DeadlineExceeded;
    vec![
        run_pod(),
        span(create_main(CID), vec![]),
        span(stop, vec![]),
    ]
}

pub(crate) fn signal(ms: u64, sig: i32, target: u32) -> Record {
    kernel(
        ms,
        7,
        "containerd-shim",
        SandboxOp::Signal {
            sig,
            target,
            target_comm: Some("cat".into()),
            target_cgroup: Some(format!("/k8s.io/{CID}")),
            result: 0,
        },
    )
}

/// `cat` (pid 4242) of `main` sent SIGTERM, then SIGKILL at 3 s.
pub(crate) fn killed() -> Vec<Record> {
    let mut r = stuck_stop();
    r.push(signal(1001, 15, 4242));
    r.push(signal(3001, 9, 4242));
    r
}

#[test]
fn a_process_alive_after_sigkill_is_the_blocker() {
    let mut r = killed();
    let e = log(&r).explain("ns/web", 15_001 * MS).unwrap();
    assert_eq!(e.verdict, Verdict::Blocked);
    let Some(Blocker::AliveAfterKill {
        pid,
        comm,
        container,
        signal,
        by_kernel,
        ago_ns,
        alive,
        signals,
    }) = &e.blocker
    else {
        panic!("{:?}", e.blocker)
    };
    assert_eq!(
        (*pid, comm.as_deref(), container.as_str()),
        (4242, Some("cat"), "main")
    );
    assert_eq!((signal.tgid, signal.comm.as_str()), (7, "containerd-shim"));
    assert!(!by_kernel);
    assert_eq!((*ago_ns, *alive, signals.len()), (12_000 * MS, 1, 1));
    assert_eq!(e.alive_after_kill, vec![(4242, "main".to_string())]);
    assert_eq!(e.kernel.len(), 2);
    // Once it exits, the kernel names no blocker; the CRI call still does.
    r.push(kernel(
        12000,
        4242,
        "cat",
        SandboxOp::Exit { status: Some(9) },
    ));
    let e = log(&r).explain("ns/web", 15_001 * MS).unwrap();
    assert_eq!(e.blocker, None);
    assert_eq!(e.progress, TeardownProgress::CallFailed { step: 0 });
    assert_eq!(
        e.kernel.last().unwrap().event.op,
        SandboxOp::Exit { status: Some(9) }
    );
}

pub(crate) fn rootfs() -> String {
    format!("/run/containerd/io.containerd.runtime.v2.task/k8s.io/{CID}/rootfs")
}

pub(crate) fn umount(ms: u64, errno: i32) -> Record {
    kernel(
        ms,
        8,
        "containerd",
        SandboxOp::Umount {
            path: rootfs(),
            flags: 0,
            errno,
        },
    )
}

pub(crate) fn cgroup_busy() -> Record {
    kernel(
        1300,
        9,
        "runc",
        SandboxOp::Unlink {
            path: format!("/sys/fs/cgroup/memory/k8s.io/{CID}"),
            dir: true,
            errno: libc::EBUSY,
        },
    )
}

/// A pod made before the trace, known from the runtime's lists only:
/// found by name, and kubelet's failing unmount of its volume (a path
/// naming its uid) is the blocker.
#[test]
fn a_pod_from_the_runtime_state_and_kubelets_volume() {
    use crate::capture::cri_state::{CriState, StateContainer, StatePod};
    let uid = "0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b";
    let sb = "5b".repeat(32);
    let state = CriState {
        ts: Timestamp {
            mono_ns: 10 * MS,
            wall_ns: 0,
        },
        pods: vec![StatePod {
            id: sb.clone(),
            namespace: "ns".into(),
            name: "old".into(),
            uid: uid.into(),
            attempt: 0,
            state: "notready".into(),
            created_unix_ns: 0,
        }],
        containers: vec![StateContainer {
            id: CID.into(),
            sandbox_id: sb.clone(),
            name: "main".into(),
            attempt: 0,
            state: "exited".into(),
            created_unix_ns: 0,
        }],
        truncated: false,
        bytes: 0,
        took_ns: 0,
        runtime: None,
    };
    let volume = format!("/var/lib/kubelet/pods/{uid}/volumes/kubernetes.io~empty-dir/data");
    let r = vec![
        Record::Observed(Observation::CriState(state)),
        kernel(
            2000,
            77,
            "kubelet",
            SandboxOp::Umount {
                path: volume.clone(),
                flags: 0,
                errno: libc::EBUSY,
            },
        ),
    ];
    let log = log(&r);
    let e = log.explain("ns/old", 0).unwrap();
    assert_eq!(e.sandbox_id.as_deref(), Some(sb.as_str()));
    assert_eq!(e.containers, vec![(CID.to_string(), "main".to_string())]);
    assert!(
        matches!(&e.blocker, Some(Blocker::UnmountFailed { path, errno, .. }) if *path == volume && *errno == libc::EBUSY),
        "{:?}",
        e.blocker
    );
    // Nothing of its teardown was seen: no attempt yet.
    assert!(!log.attempt_seen("ns/old", 0, 0, u64::MAX));
}

#[test]
fn failed_unmounts_and_removals_are_named_unless_redone() {
    let mut r = stuck_stop();
    r.push(umount(1100, libc::EBUSY));
    let e = log(&r).explain("ns/web", 0).unwrap();
    assert!(
        matches!(&e.blocker, Some(Blocker::UnmountFailed { path, errno, .. }) if *path == rootfs() && *errno == libc::EBUSY),
        "{:?}",
        e.blocker
    );
    r.push(umount(1200, 0));
    assert_eq!(log(&r).explain("ns/web", 0).unwrap().blocker, None);
    let mut r = stuck_stop();
    r.push(cgroup_busy());
    let e = log(&r).explain("web", 0).unwrap();
    assert!(
        matches!(
            e.blocker,
            Some(Blocker::RemoveFailed {
                what: Removal::Cgroup,
                errno: libc::EBUSY,
                ..
            })
        ),
        "{:?}",
        e.blocker
    );
    // An event naming no pod of the log is not kept.
    let mut r = stuck_stop();
    r.push(kernel(
        1300,
        9,
        "runc",
        SandboxOp::Unlink {
            path: "/tmp/x".into(),
            dir: false,
            errno: libc::EPERM,
        },
    ));
    assert!(log(&r).explain("web", 0).unwrap().kernel.is_empty());
}

/// 10-hung's StopPodSandbox hook called at 1.01 s (30 s timeout), and
/// the CRI call's deadline at 6 s; the hook's end, timed out.
pub(crate) fn hung_hook() -> (Vec<Record>, Record) {
    let mut stop = cri(Some("StopPodSandbox"), "sb1", 1000, 6000);
    stop.outcome = CriOutcome::DeadlineExceeded;
    let h = hook(Some(Event::StopPodSandbox), "hung", "sb1", 1010, 31010);
    let mut pending = h.call.clone();
    pending.end = None;
    pending.duration_ns = None;
    pending.timeout_nano = Some(30_000_000_000);
    let ended = Record::NriUncaused(crate::engine::record::Uncaused {
        span: h,
        no_cri_cause: crate::engine::correlate::NoCause::NoCriCallInFlight,
        exit: None,
        rolls_back: None,
    });
    (
        vec![
            run_pod(),
            Record::Observed(Observation::NriPending(pending)),
            span(stop, vec![]),
        ],
        ended,
    )
}

#[test]
fn a_teardown_hook_not_returned_is_the_blocker_until_it_ends() {
    let (mut r, ended) = hung_hook();
    let e = log(&r).explain("ns/web", 21_010 * MS).unwrap();
    assert_eq!(e.verdict, Verdict::Blocked);
    assert!(
        matches!(&e.blocker, Some(Blocker::HookPending { plugin, event, waited_ns, timeout_ns, .. })
                if plugin == "10-hung" && event == "STOP_POD_SANDBOX"
                    && *waited_ns == 20_000 * MS && *timeout_ns == Some(30_000 * MS)),
        "{:?}",
        e.blocker
    );
    // It ended (timed out): no longer pending.
    r.push(ended);
    let e = log(&r).explain("ns/web", 40_000 * MS).unwrap();
    assert_eq!(e.blocker, None);
}

/// kubelet's StopContainer of `main` with a 600 s timeout, made at 1 s and
/// not answered: the pod's grace period.
pub(crate) fn stop_pending() -> (CriCall, Vec<Record>) {
    let mut stop = cri(Some("StopContainer"), "sb1", 1000, 1000);
    stop.sandbox_id = None;
    stop.container_id = Some("c1".into());
    stop.end = None;
    stop.duration_ns = None;
    stop.outcome = CriOutcome::NoResponse;
    stop.stop_timeout_s = Some(600);
    let records = vec![
        run_pod(),
        span(create_main("c1"), vec![]),
        Record::Observed(Observation::CriPending(stop.clone())),
    ];
    (stop, records)
}

#[test]
fn pending_stop_container_waits_out_its_grace_period() {
    let (_, records) = stop_pending();
    let l = log(&records);
    let e = l.explain("ns/web", 31_000 * MS).unwrap();
    assert_eq!(e.verdict, Verdict::Waiting);
    let TeardownProgress::CallPending {
        method,
        container,
        waited_ns,
        grace_period_ns,
        grace_left_ns,
        ..
    } = &e.progress
    else {
        panic!("{:?}", e.progress);
    };
    assert_eq!(method, "StopContainer");
    assert_eq!(container.as_deref(), Some("main"));
    assert_eq!(*waited_ns, 30_000 * MS);
    assert_eq!(*grace_period_ns, Some(600_000 * MS));
    assert_eq!(*grace_left_ns, Some(570_000 * MS));
    assert_eq!(e.expected_next, None);
    // The live explain's wait: a call pending past the settle time is an
    // attempt seen.
    assert!(l.attempt_seen("ns/web", 0, 5_000 * MS, 31_000 * MS));
    // Past the grace period and the slack: blocked.
    let late = l.explain("ns/web", (1_000 + 615_000) * MS).unwrap();
    assert_eq!(late.verdict, Verdict::Blocked);
}

#[test]
fn a_pending_call_ends_with_its_span() {
    let (mut stop, mut records) = stop_pending();
    stop.end = Some(Timestamp {
        mono_ns: 20_000 * MS,
        wall_ns: 0,
    });
    stop.duration_ns = Some(19_000 * MS);
    stop.outcome = CriOutcome::Ok;
    records.push(span(stop, vec![]));
    let e = log(&records).explain("ns/web", 21_000 * MS).unwrap();
    assert_eq!(e.progress, TeardownProgress::NextNotCalled { step: 0 });
    assert_eq!(e.verdict, Verdict::Waiting);
}

/// kubelet's connection closes after its StopContainer ran into the
/// deadline: nobody asks for the pod any more; once a client connects
/// again, that is no longer the blocker.
#[test]
fn the_connection_of_the_last_call_gone_is_the_blocker() {
    let mut records = failed_stop();
    let gone = |ms: u64| {
        Record::Observed(Observation::CriConnectionGone {
            conn: ConnId(1),
            ts: ts(ms).unwrap(),
            client: Some("kubelet[42]".into()),
        })
    };
    records.push(gone(14_000));
    // Another client connecting (nri-trace's own state query, crictl)
    // does not ask for the pod.
    records.push(Record::Observed(Observation::CriConnection {
        conn: ConnId(5),
        ts: ts(14_500).unwrap(),
        client: Some("crictl[9]".into()),
        client_process: None,
    }));
    let l = log(&records);
    let e = l.explain("ns/web", 20_000 * MS).unwrap();
    assert_eq!(e.verdict, Verdict::Blocked);
    assert_eq!(
        e.blocker,
        Some(Blocker::ClientGone {
            client: Some("kubelet[42]".into()),
            closed: ts(14_000).unwrap(),
            ago_ns: 6_000 * MS,
        })
    );
    records.push(Record::Observed(Observation::CriConnection {
        conn: ConnId(7),
        ts: ts(15_000).unwrap(),
        client: Some("kubelet[43]".into()),
        client_process: None,
    }));
    let e = log(&records).explain("ns/web", 20_000 * MS).unwrap();
    assert_eq!(e.blocker, None);
    assert_eq!(e.progress, TeardownProgress::CallFailed { step: 0 });
}
