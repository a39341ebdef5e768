use super::*;

#[test]
fn the_sandbox_cgroup_is_named_by_its_last_component() {
    assert!(cgroup_names("/kubepods/podu1/abc123", "abc123"));
    assert!(cgroup_names(
        "/kubepods.slice/kubepods-podu1.slice/cri-containerd-abc123.scope",
        "abc123"
    ));
    // CRI-O, systemd and cgroupfs cgroup managers.
    assert!(cgroup_names(
        "/kubepods.slice/kubepods-podu1.slice/crio-abc123.scope",
        "abc123"
    ));
    assert!(cgroup_names("/crio/crio-abc123", "abc123"));
    // CRI-O's conmon of the pod's infra container (same id): runc and
    // its helpers run there, not the sandbox's program.
    assert!(!cgroup_names("/crio/crio-conmon-abc123", "abc123"));
    assert!(!cgroup_names(
        "/kubepods.slice/kubepods-podu1.slice/crio-conmon-abc123.scope",
        "abc123"
    ));
    // Only the whole id: not a longer one that ends with it.
    assert!(!cgroup_names("/crio/crio-xabc123", "abc123"));
    // A container of the pod: its own id is last.
    assert!(!cgroup_names("/kubepods/podu1/def456", "abc123"));
    assert!(!cgroup_names("/kubepods/abc123/def456", "abc123"));
}

/// A pod's netns clause: told before the unmount holds; a netns gone
/// before the StopPodSandbox delivery (CRI-O's order) breaks it; the
/// netns comes with RunPodSandbox only, as containerd sends it.
#[test]
fn netns_clause_in_either_order() {
    use crate::decode::nri::message::Event;
    use crate::engine::test_calls::{hook, ts};
    let netns = |id: &str| format!("/run/netns/cni-{id}");
    let run = |id: &str| {
        let mut h = hook(Some(Event::RunPodSandbox), "a", id, 1, 2);
        if let Some(p) = h.call.pod.as_mut() {
            p.netns = Some(netns(id));
        }
        Record::NriUncaused(super::super::record::Uncaused {
            span: h,
            no_cri_cause: super::super::correlate::NoCause::NoCriCallInFlight,
            exit: None,
            rolls_back: None,
        })
    };
    let stop = |id: &str, at: u64| {
        Record::NriUncaused(super::super::record::Uncaused {
            span: hook(Some(Event::StopPodSandbox), "a", id, at, at + 1),
            no_cri_cause: super::super::correlate::NoCause::NoCriCallInFlight,
            exit: None,
            rolls_back: None,
        })
    };
    let umount = |id: &str, at: u64| {
        Record::Observed(Observation::Sandbox(SandboxEvent {
            ts: ts(at).unwrap(),
            tgid: 7,
            tid: 7,
            comm: "containerd".into(),
            cgroup_id: 1,
            cgroup: None,
            op: SandboxOp::Umount {
                path: netns(id),
                flags: 0,
                errno: 0,
            },
            truncated: false,
        }))
    };
    let mut c = Conformance::new();
    for r in [
        run("p1"),
        run("p2"),
        stop("p1", 10),
        umount("p1", 20),
        umount("p2", 30),
        stop("p2", 40),
        // A host-network pod: never decided.
        stop("p3", 50),
    ] {
        c.on_record(&r);
    }
    let t = c.tallies();
    assert_eq!(t.len(), 1, "{t:?}");
    assert_eq!(t[0].clause, STOP_POD_SANDBOX_BEFORE_NETNS_TEARDOWN);
    assert_eq!((t[0].held, t[0].broken), (1, 1));
    assert_eq!(t[0].held_case.as_ref().unwrap().sandbox_id, "p1");
    let broken = t[0].broken_case.as_ref().unwrap();
    assert_eq!(
        (
            broken.sandbox_id.as_str(),
            broken.kernel.as_ref().unwrap().op
        ),
        ("p2", "umount")
    );
}

/// A netns configured under a symlink (containerd's default
/// `/var/run/netns`, `/var/run` -> `/run`; or a node whose state dir
/// sits under one): NRI names the path as configured, containerd binds
/// the netns there but unmounts and removes it at the resolved path
/// (`unmountNS` follows symlinks first). The bind's `resolved` ties the
/// two, whichever of the bind and the pod's first delivery comes first.
#[test]
fn netns_clause_follows_the_resolved_path() {
    use crate::decode::nri::message::Event;
    use crate::engine::test_calls::{hook, ts};
    let given = |id: &str| format!("/var/run/netns/cni-{id}");
    let real = |id: &str| format!("/run/netns/cni-{id}");
    let uncaused = |span| {
        Record::NriUncaused(super::super::record::Uncaused {
            span,
            no_cri_cause: super::super::correlate::NoCause::NoCriCallInFlight,
            exit: None,
            rolls_back: None,
        })
    };
    // containerd 1.7: the netns with RunPodSandbox only.
    let run = |id: &str| {
        let mut h = hook(Some(Event::RunPodSandbox), "a", id, 2, 3);
        if let Some(p) = h.call.pod.as_mut() {
            p.netns = Some(given(id));
        }
        uncaused(h)
    };
    let stop = |id: &str, at: u64| uncaused(hook(Some(Event::StopPodSandbox), "a", id, at, at + 1));
    let kernel = |at: u64, op: SandboxOp| {
        Record::Observed(Observation::Sandbox(SandboxEvent {
            ts: ts(at).unwrap(),
            tgid: 7,
            tid: 8,
            comm: "containerd".into(),
            cgroup_id: 1,
            cgroup: None,
            op,
            truncated: false,
        }))
    };
    let bind = |id: &str, resolved: Option<String>| {
        kernel(
            1,
            SandboxOp::NsBind {
                target: given(id),
                source: "/proc/7/task/8/ns/net".into(),
                errno: 0,
                resolved,
            },
        )
    };
    let umount = |id: &str, at: u64| {
        kernel(
            at,
            SandboxOp::Umount {
                path: real(id),
                flags: 2,
                errno: 0,
            },
        )
    };
    let unlink = |id: &str, at: u64| {
        kernel(
            at,
            SandboxOp::Unlink {
                path: real(id),
                dir: false,
                errno: 0,
            },
        )
    };
    let mut c = Conformance::new();
    for r in [
        // The bind before the pod's first delivery (the runtime binds
        // the netns while RunPodSandbox runs).
        bind("p1", Some(real("p1"))),
        run("p1"),
        stop("p1", 10),
        umount("p1", 11),
        unlink("p1", 12),
        // The pod's first delivery before its bind; the netns gone
        // (its unlink only: the unmount was not needed) before
        // StopPodSandbox.
        run("p2"),
        bind("p2", Some(real("p2"))),
        unlink("p2", 20),
        stop("p2", 21),
        // No symlink resolved (a capture without it): the netns is
        // never seen to go under the name NRI gave.
        bind("p3", None),
        run("p3"),
        stop("p3", 30),
        umount("p3", 31),
    ] {
        c.on_record(&r);
    }
    let t = c.tallies();
    assert_eq!(t.len(), 1, "{t:?}");
    assert_eq!(t[0].clause, STOP_POD_SANDBOX_BEFORE_NETNS_TEARDOWN);
    assert_eq!((t[0].held, t[0].broken), (1, 1), "{t:?}");
    let held = t[0].held_case.as_ref().unwrap();
    let k = held.kernel.as_ref().unwrap();
    assert_eq!(
        (held.sandbox_id.as_str(), k.op, k.path.as_str()),
        ("p1", "umount", real("p1").as_str())
    );
    let broken = t[0].broken_case.as_ref().unwrap();
    let k = broken.kernel.as_ref().unwrap();
    assert_eq!(
        (broken.sandbox_id.as_str(), k.op, k.path.as_str()),
        ("p2", "unlink", real("p2").as_str())
    );
    // Decided pods leave nothing behind.
    assert!(c.netns.keys().eq(["p3"]), "{:?}", c.netns.keys());
    assert_eq!(c.by_netns_path.len(), 1);
}

/// The sandbox's program may start after the runtime answered
/// RunPodSandbox (`runc start` returns before runc's init execs it;
/// containerd 1.7 and 2.1 in the lab: up to 14 ms after the response,
/// 165 ms with both cores busy):
/// the clause waits for that exec instead of leaving the pod
/// undecided. The OCI runtime's own exec there does not count; a pod
/// torn down before any exec stays undecided.
#[test]
fn sandbox_running_decided_at_an_exec_after_the_call() {
    use crate::decode::nri::message::Event;
    use crate::engine::test_calls::{cri, hook, span, ts};
    let id = |n: u32| format!("{n:064x}");
    let run_call = |n: u32, start: u64| {
        let delivery = hook(
            Some(Event::RunPodSandbox),
            "a",
            &id(n),
            start + 2,
            start + 3,
        );
        span(
            cri(Some("RunPodSandbox"), &id(n), start, start + 5),
            vec![delivery],
        )
    };
    let exec = |n: u32, at: u64, path: &str, comm: &str| {
        Record::Observed(Observation::Sandbox(SandboxEvent {
            ts: ts(at).unwrap(),
            tgid: 100 + n,
            tid: 100 + n,
            comm: comm.into(),
            cgroup_id: 0,
            cgroup: Some(format!("/k8s.io/{}", id(n))),
            op: SandboxOp::Exec { path: path.into() },
            truncated: false,
        }))
    };
    let mut c = Conformance::new();
    for r in [
        // Started before the first delivery, seen before the call
        // settled: held, as before.
        exec(1, 11, "/pause", "pause"),
        run_call(1, 10),
        // Started after the call settled: broken, at that exec.
        run_call(2, 20),
        exec(2, 29, "/dev/fd/6", "runc"),
        exec(2, 30, "/pause", "pause"),
        // Never started before its teardown: not decided, and a later
        // exec in its cgroup (an id reused by nothing) changes nothing.
        run_call(3, 40),
        span(cri(Some("StopPodSandbox"), &id(3), 50, 51), vec![]),
        exec(3, 60, "/pause", "pause"),
    ] {
        c.on_record(&r);
    }
    let t = c.tallies();
    assert_eq!(t.len(), 1, "{t:?}");
    assert_eq!(t[0].clause, SANDBOX_RUNNING_AT_RUN_POD_SANDBOX);
    assert_eq!((t[0].held, t[0].broken), (1, 1), "{t:?}");
    let broken = t[0].broken_case.as_ref().unwrap();
    let k = broken.kernel.as_ref().unwrap();
    assert_eq!(
        (
            broken.sandbox_id.clone(),
            k.path.as_str(),
            k.at,
            broken.delivered
        ),
        (id(2), "/pause", ts(30).unwrap(), ts(22).unwrap())
    );
    assert!(c.pending_runs.is_empty());
}

/// Told once at the exit and not again at the CRI StopContainer:
/// held; told again under the CRI call: broken.
#[test]
fn stop_container_once_per_exit() {
    use crate::engine::{
        correlate::{ContainerExit, NoCause},
        test_calls::{cri, stop_container_hook, ts},
    };
    let stop_hook = |ctr: &str, at| stop_container_hook(ctr, at, at + 1);
    let at_exit = |ctr: &str, at| {
        Record::NriUncaused(super::super::record::Uncaused {
            span: stop_hook(ctr, at),
            no_cri_cause: NoCause::ContainerExited,
            exit: Some(ContainerExit {
                pid: 9,
                comm: "sh".into(),
                status: Some(3 << 8),
                cgroup: format!("/k8s.io/{ctr}"),
                at: ts(at - 1).unwrap(),
            }),
            rolls_back: None,
        })
    };
    let cri_stop = |ctr: &str, at, again: bool| {
        let mut call = cri(Some("StopContainer"), "s1", at, at + 5);
        call.container_id = Some(ctr.into());
        Record::CriSpan(CriSpan {
            call,
            hooks: if again {
                vec![stop_hook(ctr, at + 1)]
            } else {
                vec![]
            },
            nri_ns: 0,
            nri_permille: None,
        })
    };
    let mut c = Conformance::new();
    for r in [
        at_exit("c1", 10),
        cri_stop("c1", 100, false),
        at_exit("c2", 20),
        cri_stop("c2", 200, true),
        // No exit seen: not decided.
        cri_stop("c3", 300, true),
    ] {
        c.on_record(&r);
    }
    let t = c.tallies();
    assert_eq!(t.len(), 1, "{t:?}");
    assert_eq!(t[0].clause, STOP_CONTAINER_ONCE_PER_EXIT);
    assert_eq!((t[0].held, t[0].broken), (1, 1));
    let broken = t[0].broken_case.as_ref().unwrap();
    assert_eq!(
        {
            let k = broken.kernel.as_ref().unwrap();
            (k.op, k.pid)
        },
        ("exit", 9)
    );
    assert_eq!(broken.delivered, ts(201).unwrap());
}

/// CRI-O: the netns goes before StopPodSandbox, and every delivery of
/// every plugin names the pod's netns (seen in the lab, CRI-O 1.33.13):
/// the pod is counted once, not once per plugin.
#[test]
fn netns_clause_counts_a_pod_once() {
    use crate::decode::nri::message::Event;
    use crate::engine::test_calls::{hook, ts};
    let netns = "/var/lib/crio/netns/netns/7c47";
    let with_netns = |ev: Event, plugin: &str, at: u64| {
        let mut h = hook(Some(ev), plugin, "p1", at, at + 1);
        if let Some(p) = h.call.pod.as_mut() {
            p.netns = Some(netns.into());
        }
        Record::NriUncaused(super::super::record::Uncaused {
            span: h,
            no_cri_cause: super::super::correlate::NoCause::NoCriCallInFlight,
            exit: None,
            rolls_back: None,
        })
    };
    let umount = Record::Observed(Observation::Sandbox(SandboxEvent {
        ts: ts(20).unwrap(),
        tgid: 7,
        tid: 7,
        comm: "crio".into(),
        cgroup_id: 1,
        cgroup: None,
        op: SandboxOp::Umount {
            path: netns.into(),
            flags: 0,
            errno: 0,
        },
        truncated: false,
    }));
    let mut c = Conformance::new();
    let mut records = vec![];
    for p in ["a", "b", "c"] {
        records.push(with_netns(Event::RunPodSandbox, p, 1));
    }
    records.push(umount);
    for (i, p) in ["a", "b", "c"].into_iter().enumerate() {
        records.push(with_netns(Event::StopPodSandbox, p, 30 + i as u64));
    }
    for p in ["a", "b", "c"] {
        records.push(with_netns(Event::RemovePodSandbox, p, 40));
    }
    for r in &records {
        c.on_record(r);
    }
    let t = c.tallies();
    assert_eq!(t.len(), 1, "{t:?}");
    assert_eq!((t[0].held, t[0].broken), (0, 1), "{t:?}");
    let case = t[0].broken_case.as_ref().unwrap();
    assert_eq!(
        (case.plugin.as_str(), case.kernel.as_ref().unwrap().op),
        ("10-a", "umount")
    );
}

#[test]
fn tallies_held_and_broken_with_one_case_each() {
    let mut c = Conformance::new();
    c.runtime = Some("containerd 1.7.24".into());
    for (i, held) in [(1, false), (2, true), (3, false)] {
        let case = ClauseCase {
            pod: format!("ns/p{i}"),
            sandbox_id: format!("s{i}"),
            plugin: "10-a".into(),
            hook: "RUN_POD_SANDBOX",
            delivered: Timestamp {
                mono_ns: 10,
                wall_ns: 10,
            },
            kernel: Some(KernelStep {
                op: "exec",
                path: "/pause".into(),
                pid: i,
                comm: "pause".into(),
                at: Timestamp {
                    mono_ns: if held { 5 } else { 15 },
                    wall_ns: 0,
                },
            }),
            sync: None,
        };
        c.tally(SANDBOX_RUNNING_AT_RUN_POD_SANDBOX, held, case);
    }
    let t = c.tallies();
    assert_eq!(t.len(), 1);
    assert_eq!((t[0].held, t[0].broken), (1, 2));
    assert_eq!(t[0].runtime.as_deref(), Some("containerd 1.7.24"));
    assert_eq!(t[0].broken_case.as_ref().unwrap().pod, "ns/p1");
    assert_eq!(t[0].held_case.as_ref().unwrap().pod, "ns/p2");
}
