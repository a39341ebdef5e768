use super::*;

/// The CRI spans of a correlator's output.
fn spans_of(out: &[Correlated]) -> Vec<&CriSpan> {
    out.iter()
        .filter_map(|o| match o {
            Correlated::Cri(s) => Some(s),
            Correlated::Uncaused { .. } | Correlated::Observed(_) => None,
        })
        .collect()
}
use crate::model::nri_call::NriOutcome;

use super::super::test_calls::*;

fn run(c: &mut Correlator, until: u64) -> Vec<Correlated> {
    let mut out = Vec::new();
    c.advance(until * MS, None, None, &mut out);
    out
}

#[test]
fn delivery_attached_to_its_cri_call() {
    let mut c = Correlator::new();
    let mut out = Vec::new();
    c.on_nri(
        hook(Some(Event::StopPodSandbox), "a", "s1", 10, 40),
        &mut out,
    );
    // A status poll of the same pod in flight at the same time claims
    // nothing; StopPodSandbox does.
    c.on_cri(cri(Some("PodSandboxStatus"), "s1", 5, 20));
    c.on_cri(cri(Some("StopPodSandbox"), "s1", 5, 50));
    out.extend(run(&mut c, 100));
    let spans = spans_of(&out);
    assert_eq!(spans.len(), 2);
    let stop = spans
        .iter()
        .find(|s| s.call.is(CriMethod::StopPodSandbox))
        .unwrap();
    assert_eq!(stop.hooks.len(), 1);
    assert_eq!(stop.nri_ns, 30 * MS);
    assert_eq!(stop.nri_permille, Some(666));
    let status = spans
        .iter()
        .find(|s| s.call.is(CriMethod::PodSandboxStatus))
        .unwrap();
    assert!(status.hooks.is_empty());
}

#[test]
fn a_stop_container_after_its_exit_is_the_exits() {
    let delivery = stop_container_hook;
    let exit = |cgroup: &str, at| ContainerExit {
        pid: 42,
        comm: "sh".into(),
        status: Some(3 << 8),
        cgroup: cgroup.into(),
        at: ts(at).unwrap(),
    };
    let mut c = Correlator::new();
    let mut out = Vec::new();
    // c1's process exits, then the runtime tells the plugins; c2's
    // delivery has no exit in its cgroup; c3 exited after its delivery.
    c.on_exit(exit("/kubepods/k8s.io/c1", 100));
    c.on_exit(exit("/kubepods.slice/cri-containerd-c3.scope", 400));
    c.on_nri(delivery("c1", 105, 106), &mut out);
    c.on_nri(delivery("c2", 200, 201), &mut out);
    c.on_nri(delivery("c3", 300, 301), &mut out);
    // c4: no exit seen, but the runtime says it had stopped.
    let mut stopped = delivery("c4", 310, 311);
    stopped.call.container.as_mut().unwrap().state = Some("stopped".into());
    c.on_nri(stopped, &mut out);
    out.extend(run(&mut c, 1000));
    let why: Vec<(String, NoCause, Option<u32>)> = out
        .iter()
        .filter_map(|o| match o {
            Correlated::Uncaused {
                span, why, exit, ..
            } => Some((
                span.call.container.as_ref().unwrap().id.clone(),
                *why,
                exit.as_ref().map(|x| x.pid),
            )),
            Correlated::Cri(_) | Correlated::Observed(_) => None,
        })
        .collect();
    assert_eq!(
        why,
        vec![
            ("c1".into(), NoCause::ContainerExited, Some(42)),
            ("c2".into(), NoCause::NoCriCallInFlight, None),
            ("c3".into(), NoCause::NoCriCallInFlight, None),
            ("c4".into(), NoCause::ContainerExited, None),
        ]
    );
}

#[test]
fn concurrent_calls_on_two_containers_of_a_pod_keep_their_own_events() {
    let stop = |ctr: &str, start, end| {
        let mut c = cri(Some("StopContainer"), "s1", start, end);
        c.container_id = Some(ctr.into());
        c
    };
    let delivery = stop_container_hook;
    let mut c = Correlator::new();
    let mut out = Vec::new();
    // c2's stop overlaps c1's and ends first: it must not take c1's event.
    c.on_nri(delivery("c1", 1900, 1910), &mut out);
    c.on_nri(delivery("c2", 1950, 1960), &mut out);
    c.on_cri(stop("c1", 0, 2000));
    c.on_cri(stop("c2", 10, 1970));
    out.extend(run(&mut c, 3000));
    for o in &out {
        let Correlated::Cri(s) = o else {
            panic!("uncaused: {o:?}")
        };
        let own = s.call.container_id.as_deref();
        assert_eq!(s.hooks.len(), 1, "{own:?}");
        assert_eq!(
            s.hooks[0].call.container.as_ref().map(|k| k.id.as_str()),
            own
        );
    }
}

#[test]
fn other_pod_or_no_call_is_uncaused() {
    let mut c = Correlator::new();
    let mut out = Vec::new();
    c.on_nri(
        hook(Some(Event::StopPodSandbox), "a", "s2", 10, 40),
        &mut out,
    );
    c.on_nri(hook(None, "a", "", 1, 2), &mut out);
    c.on_cri(cri(Some("StopPodSandbox"), "s1", 5, 50));
    out.extend(run(&mut c, 100));
    let whys: Vec<NoCause> = out
        .iter()
        .filter_map(|o| match o {
            Correlated::Uncaused { why, .. } => Some(*why),
            Correlated::Cri(_) | Correlated::Observed(_) => None,
        })
        .collect();
    assert_eq!(
        whys,
        vec![NoCause::PluginLifecycle, NoCause::NoCriCallInFlight]
    );
}

/// containerd 2.3 after a client's deadline (the lab's
/// `cri-deadline-retry`): the RunPodSandbox ends on the wire while
/// its slow hook runs on; the hook fails with the deadline and the
/// runtime then tells the plugins StopPodSandbox and RemovePodSandbox
/// of that sandbox, after the call ended: `rollback`, naming the call.
/// Not another sandbox's, not one past the bound, not after a
/// RunPodSandbox that succeeded.
#[test]
fn a_failed_run_pod_sandbox_is_undone_by_the_runtime() {
    let whys = |outcome: CriOutcome, pod: &str, at: u64| {
        let mut c = Correlator::new();
        let mut out = Vec::new();
        let mut call = cri(Some("RunPodSandbox"), "", 0, 1000);
        call.sandbox_id = None;
        call.stream_id = 7;
        call.pod = Some(PodMeta {
            name: "p".into(),
            namespace: "ns".into(),
            uid: "u".into(),
            attempt: 0,
        });
        call.outcome = outcome;
        c.on_cri(call);
        c.on_nri(
            hook(Some(Event::RunPodSandbox), "a", "s1", 10, 3000),
            &mut out,
        );
        c.on_nri(
            hook(Some(Event::StopPodSandbox), "a", pod, at, at + 1),
            &mut out,
        );
        c.on_nri(
            hook(Some(Event::RemovePodSandbox), "a", pod, at + 2, at + 3),
            &mut out,
        );
        out.extend(run(&mut c, u64::MAX / MS));
        out.iter()
            .filter_map(|o| match o {
                Correlated::Uncaused {
                    why, rolls_back, ..
                } => Some((*why, rolls_back.as_ref().map(|r| r.stream_id))),
                Correlated::Cri(s) => {
                    assert_eq!(s.hooks.len(), 1, "{s:?}");
                    None
                }
                Correlated::Observed(_) => None,
            })
            .collect::<Vec<_>>()
    };
    let undone = vec![(NoCause::Rollback, Some(7)); 2];
    let none = vec![(NoCause::NoCriCallInFlight, None); 2];
    assert_eq!(whys(CriOutcome::DeadlineExceeded, "s1", 3001), undone);
    let failed = CriOutcome::Error {
        code: 2,
        status: "UNKNOWN".into(),
        message: "NRI RunPodSandbox failed".into(),
    };
    assert_eq!(whys(failed, "s1", 3001), undone);
    assert_eq!(whys(CriOutcome::DeadlineExceeded, "s2", 3001), none);
    assert_eq!(
        whys(
            CriOutcome::DeadlineExceeded,
            "s1",
            1000 + ROLLBACK_NS / MS + 1
        ),
        none
    );
    assert_eq!(whys(CriOutcome::Ok, "s1", 3001), none);
}

/// A delivery whose CRI call a hole of the capture took is said to be
/// so (`capture_loss`), inside the hole, within the straddle after it,
/// and up to the end of a call whose response came without its
/// request; past those, "no CRI call in flight" again. Issue 30: a
/// flood's loss left STOP_CONTAINER deliveries said to have no call.
#[test]
fn a_hole_takes_the_cause_not_the_label() {
    let whys = |loss: Option<(u64, u64)>, orphan_end: Option<u64>, at: u64| {
        let mut c = Correlator::new();
        let mut out = Vec::new();
        if let Some((from, to)) = loss {
            c.on_loss(from * MS, to * MS);
        }
        if let Some(end) = orphan_end {
            let mut orphan = cri(None, "", 0, end);
            orphan.start = None;
            c.on_cri(orphan);
        }
        c.on_nri(
            hook(Some(Event::StopContainer), "a", "s1", at, at + 1),
            &mut out,
        );
        out.extend(run(&mut c, 1_000_000));
        out.iter()
            .filter_map(|o| match o {
                Correlated::Uncaused { why, .. } => Some(*why),
                Correlated::Cri(_) | Correlated::Observed(_) => None,
            })
            .collect::<Vec<_>>()
    };
    let straddle = LOSS_STRADDLE_NS / MS;
    assert_eq!(whys(None, None, 500), vec![NoCause::NoCriCallInFlight]);
    assert_eq!(
        whys(Some((100, 200)), None, 150),
        vec![NoCause::CaptureLoss]
    );
    assert_eq!(
        whys(Some((100, 200)), None, 200 + straddle),
        vec![NoCause::CaptureLoss]
    );
    assert_eq!(
        whys(Some((100, 200)), None, 201 + straddle),
        vec![NoCause::NoCriCallInFlight]
    );
    assert_eq!(
        whys(Some((100, 200)), None, 50),
        vec![NoCause::NoCriCallInFlight]
    );
    // A response without its request ending 5 s past the straddle: the
    // call it ends ran until then.
    let late = 200 + straddle + 5000;
    assert_eq!(
        whys(Some((100, 200)), Some(late), late - 1),
        vec![NoCause::CaptureLoss]
    );
}

#[test]
fn waits_for_cri_calls_still_unreported() {
    let mut c = Correlator::new();
    let mut out = Vec::new();
    c.on_nri(
        hook(Some(Event::RunPodSandbox), "a", "s1", 10, 40),
        &mut out,
    );
    // A CRI call begun at 5 ms is still in flight: the delivery waits.
    c.advance(1000 * MS, Some(5 * MS), None, &mut out);
    assert!(out.is_empty());
    let mut run_call = cri(Some("RunPodSandbox"), "s1", 5, 2000);
    run_call.sandbox_id = None;
    run_call.pod = Some(PodMeta {
        name: "p".into(),
        namespace: "ns".into(),
        uid: "u".into(),
        attempt: 0,
    });
    c.on_cri(run_call);
    c.advance(3000 * MS, None, None, &mut out);
    match &out[..] {
        [Correlated::Cri(s)] => assert_eq!(s.hooks.len(), 1, "matched by pod uid"),
        other => panic!("{other:?}"),
    }
}

/// A hook that hangs past the CRI call's end comes out of the NRI stage
/// only at its deadline: the call waits for it while it is open.
#[test]
fn waits_for_deliveries_still_open() {
    let mut c = Correlator::new();
    let mut out = Vec::new();
    c.on_cri(cri(Some("StopPodSandbox"), "s1", 5, 5000));
    // The delivery begun at 40 ms is open well past the call's end.
    c.advance(5200 * MS, None, Some(40 * MS), &mut out);
    assert!(out.is_empty(), "{out:?}");
    let mut hung = hook(Some(Event::StopPodSandbox), "a", "s1", 40, 40);
    hung.call.end = None;
    hung.call.duration_ns = Some(4960 * MS);
    hung.call.outcome = NriOutcome::TimedOut;
    c.on_nri(hung, &mut out);
    c.advance(5200 * MS, None, None, &mut out);
    match &out[..] {
        [Correlated::Cri(s)] => {
            assert_eq!(s.hooks.len(), 1);
            assert_eq!(s.hooks[0].call.outcome, NriOutcome::TimedOut);
        }
        other => panic!("{other:?}"),
    }
    // An open delivery begun after a call's end does not hold it.
    c.on_cri(cri(Some("StopPodSandbox"), "s2", 6000, 6010));
    c.advance(6100 * MS, None, Some(6050 * MS), &mut out);
    assert_eq!(out.len(), 2, "{out:?}");
}

/// The response of a call was lost in a hole: its deliveries, begun
/// before the hole, are still its (a faults_lab run labeled them "no
/// CRI call in flight").
#[test]
fn a_call_whose_end_a_hole_took_holds_its_deliveries() {
    let mut c = Correlator::new();
    let mut out = Vec::new();
    c.on_nri(
        hook(Some(Event::StartContainer), "a", "s1", 60, 61),
        &mut out,
    );
    // Three reports of one run of loss, then one much later.
    c.on_loss(70 * MS, 140 * MS);
    c.on_loss(140 * MS, 180 * MS);
    c.on_loss(180 * MS, 1200 * MS);
    c.on_loss(5000 * MS, 5100 * MS);
    let mut cut = cri(Some("StartContainer"), "s1", 5, 5);
    cut.end = None;
    cut.duration_ns = None;
    cut.outcome = CriOutcome::Unknown;
    assert_eq!(c.holds_until(&cut), 1200 * MS);
    c.on_cri(cut);
    // A delivery of the same container after the run of holes is not
    // that call's.
    c.on_nri(
        hook(Some(Event::StartContainer), "a", "s1", 1300, 1301),
        &mut out,
    );
    c.finish(&mut out);
    let spans = spans_of(&out);
    assert_eq!(spans.len(), 1, "{out:?}");
    assert_eq!(spans[0].hooks.len(), 1, "{out:?}");
    assert_eq!(
        spans[0].hooks[0].call.start.map(|t| t.mono_ns),
        Some(60 * MS)
    );
    // Open when the capture ended: until then.
    let mut open = cri(Some("StartContainer"), "s2", 6000, 6000);
    open.end = None;
    assert_eq!(c.holds_until(&open), u64::MAX);
}

/// containerd's undoing of a container it failed to create: its
/// StopContainer and RemoveContainer are the failed call's, and only
/// for the container the request named.
#[test]
fn a_failed_create_undoes_its_container() {
    let mut c = Correlator::new();
    let mut out = Vec::new();
    let named = |event, name: &str, start| {
        let mut h = hook(Some(event), "a", "s1", start, start + 1);
        h.call.container = Some(crate::model::nri_call::ContainerRef {
            id: format!("id-{name}"),
            name: name.into(),
            state: None,
            exit_code: None,
        });
        h
    };
    c.on_nri(named(Event::StopContainer, "main", 20), &mut out);
    c.on_nri(named(Event::RemoveContainer, "main", 22), &mut out);
    c.on_nri(named(Event::StopContainer, "other", 24), &mut out);
    let mut failed = cri(Some("CreateContainer"), "s1", 5, 40);
    failed.container = Some(crate::decode::cri::message::ContainerMeta {
        name: "main".into(),
        attempt: 0,
    });
    failed.outcome = CriOutcome::Error {
        code: 2,
        status: "Unknown".into(),
        message: "validator \"90-judge\" rejected container adjustment, reason: no".into(),
    };
    c.on_cri(failed);
    c.finish(&mut out);
    let spans = spans_of(&out);
    let hooks: Vec<String> = spans[0].hooks.iter().map(|h| h.hook.to_string()).collect();
    assert_eq!(hooks, ["STOP_CONTAINER", "REMOVE_CONTAINER"], "{out:?}");
    assert_eq!(
        out.len(),
        2,
        "the other container's stop is not its: {out:?}"
    );
}

#[test]
fn unknown_method_resolved_by_its_delivery() {
    let mut c = Correlator::new();
    let mut out = Vec::new();
    c.on_nri(
        hook(Some(Event::RemovePodSandbox), "a", "s1", 10, 20),
        &mut out,
    );
    let mut call = cri(None, "s1", 5, 30);
    call.identified = Identified::Unknown {
        candidates: vec![CriMethod::StopPodSandbox, CriMethod::RemovePodSandbox],
    };
    c.on_cri(call);
    out.extend(run(&mut c, 100));
    match &out[..] {
        [Correlated::Cri(s)] => {
            assert_eq!(s.call.method_name(), Some("RemovePodSandbox"));
            assert!(matches!(s.call.identified, Identified::Inferred { .. }));
        }
        other => panic!("{other:?}"),
    }
}

fn unknown(request_id: &str, start: u64, end: u64, candidates: &[&str]) -> CriCall {
    let mut call = cri(None, "", start, end);
    call.sandbox_id = None;
    call.request_id = Some(request_id.into());
    call.identified = Identified::Unknown {
        candidates: candidates
            .iter()
            .map(|c| CriMethod::from_name(c).expect("a CRI method"))
            .collect(),
    };
    call
}

const TEARDOWN: [&str; 5] = [
    "StartContainer",
    "StopContainer",
    "RemoveContainer",
    "StopPodSandbox",
    "RemovePodSandbox",
];

fn container_hook(event: Event, ctr: &str, start: u64, end: u64) -> HookSpan {
    let mut h = hook(Some(event), "a", "s1", start, end);
    h.call.container = Some(crate::model::nri_call::ContainerRef {
        id: ctr.into(),
        name: "c".into(),
        ..Default::default()
    });
    h
}

/// A pod made before the attach: its id is in the request of a hidden
/// call, which its STOP_POD_SANDBOX delivery names; the pod's removal
/// delivered after the call ended rules RemovePodSandbox out.
#[test]
fn request_id_names_the_pod_and_a_later_removal_decides_stop() {
    let mut c = Correlator::new();
    let mut out = Vec::new();
    c.on_nri(
        hook(Some(Event::StopPodSandbox), "a", "s1", 10, 20),
        &mut out,
    );
    c.on_nri(
        hook(Some(Event::RemovePodSandbox), "a", "s1", 50, 60),
        &mut out,
    );
    c.on_cri(unknown("s1", 5, 30, &TEARDOWN));
    let mut remove = unknown("s1", 45, 70, &TEARDOWN);
    remove.stream_id = 3;
    c.on_cri(remove);
    out.extend(run(&mut c, 100));
    let spans = spans_of(&out);
    assert_eq!(spans.len(), 2, "{out:?}");
    assert_eq!(spans[0].call.method_name(), Some("StopPodSandbox"));
    assert_eq!(spans[0].call.sandbox_id.as_deref(), Some("s1"));
    assert_eq!(spans[0].call.request_id, None);
    assert_eq!(spans[0].hooks.len(), 1);
    let Identified::Inferred { evidence } = &spans[0].call.identified else {
        panic!("{:?}", spans[0].call.identified);
    };
    assert!(evidence.contains("after it ended"), "{evidence}");
    assert_eq!(spans[1].call.method_name(), Some("RemovePodSandbox"));
}

/// Without a later event for the pod, STOP_POD_SANDBOX alone does not
/// tell StopPodSandbox from RemovePodSandbox (the removal's own
/// REMOVE_POD_SANDBOX may go to no plugin); neither does a failed call.
/// The delivery still sits under the call.
#[test]
fn stop_delivery_alone_leaves_stop_or_remove_unknown() {
    for (later, ok) in [(false, true), (true, false)] {
        let mut c = Correlator::new();
        let mut out = Vec::new();
        c.on_nri(
            hook(Some(Event::StopPodSandbox), "a", "s1", 10, 20),
            &mut out,
        );
        if later {
            c.on_nri(
                hook(Some(Event::RemovePodSandbox), "a", "s1", 50, 60),
                &mut out,
            );
        }
        let mut call = unknown("s1", 5, 30, &TEARDOWN);
        if !ok {
            call.outcome = CriOutcome::Unknown;
        }
        c.on_cri(call);
        out.extend(run(&mut c, 100));
        let Some(Correlated::Cri(s)) = out.first() else {
            panic!("{out:?}");
        };
        assert_eq!(s.call.method, None, "later {later} ok {ok}");
        assert_eq!(s.hooks.len(), 1);
        assert_eq!(s.call.sandbox_id.as_deref(), Some("s1"));
        // Only pod methods are left.
        match &s.call.identified {
            Identified::Unknown { candidates } => assert_eq!(
                candidates.len(),
                5,
                "the call's own candidates are kept: {candidates:?}"
            ),
            other => panic!("{other:?}"),
        }
    }
}

/// The same for a container: its id in the request, STOP_CONTAINER
/// during the call, REMOVE_CONTAINER after it: StopContainer. A
/// delivery for another container of the pod is not taken.
#[test]
fn request_id_names_the_container_and_a_later_removal_decides_stop() {
    let mut c = Correlator::new();
    let mut out = Vec::new();
    c.on_nri(container_hook(Event::StopContainer, "c1", 10, 20), &mut out);
    c.on_nri(container_hook(Event::StopContainer, "c2", 12, 22), &mut out);
    c.on_nri(
        container_hook(Event::RemoveContainer, "c1", 50, 60),
        &mut out,
    );
    c.on_cri(unknown("c1", 5, 30, &TEARDOWN));
    out.extend(run(&mut c, 40));
    let Some(Correlated::Cri(s)) = out.iter().find(|o| matches!(o, Correlated::Cri(_))) else {
        panic!("{out:?}");
    };
    assert_eq!(s.call.method_name(), Some("StopContainer"));
    assert_eq!(s.call.container_id.as_deref(), Some("c1"));
    assert_eq!(s.call.sandbox_id.as_deref(), Some("s1"));
    assert_eq!(s.hooks.len(), 1);
}
