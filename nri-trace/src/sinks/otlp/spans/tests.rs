use super::*;
use crate::{
    decode::cri::message::PodMeta,
    engine::{
        findings::{Certainty, Detail, Severity},
        hook_latency::Hook,
        test_calls::{cri, hook, span, MS},
    },
    model::nri_call::Event,
};

// W3C Trace Context Level 1, 3.2.2.3's example and a second span of it.
const KUBELET: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const CONTAINERD: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-b7ad6b7169203331-01";

fn tp(s: &str) -> TraceContext {
    TraceContext::parse(s.as_bytes()).unwrap()
}

fn run(records: &[Record]) -> Vec<OtelSpan> {
    let mut m = SpanMaker::new();
    let mut out = Vec::new();
    for r in records {
        m.record(r, &mut out);
    }
    m.flush(&mut out);
    out
}

fn run_pod(sandbox: &str, start: u64, stream: u32) -> Record {
    let mut c = cri(Some("RunPodSandbox"), sandbox, start, start + 50);
    c.stream_id = stream;
    c.pod = Some(PodMeta {
        name: "web".into(),
        namespace: "shop".into(),
        uid: "6f1c".into(),
        attempt: 0,
    });
    let h = hook(
        Some(Event::RunPodSandbox),
        "slow",
        sandbox,
        start + 10,
        start + 40,
    );
    span(c, vec![h])
}

fn stop_pod(sandbox: &str, start: u64, stream: u32) -> Record {
    let mut c = cri(Some("StopPodSandbox"), sandbox, start, start + 30);
    c.stream_id = stream;
    let h = hook(
        Some(Event::StopPodSandbox),
        "slow",
        sandbox,
        start + 5,
        start + 20,
    );
    span(c, vec![h])
}

fn attr<'a>(s: &'a OtelSpan, k: &str) -> Option<&'a Value> {
    s.attributes.iter().find(|(n, _)| *n == k).map(|(_, v)| v)
}

#[test]
fn without_trace_context_a_lifecycle_is_one_trace_rooted_at_run_pod_sandbox() {
    let spans = run(&[run_pod("sb1", 1_000, 1), stop_pod("sb1", 5_000, 3)]);
    assert_eq!(spans.len(), 4, "{spans:#?}");
    let run = spans
        .iter()
        .find(|s| {
            s.name.ends_with("/RunPodSandbox")
                && s.kind == Kind::Server
                && attr(s, "rpc.system.name") == Some(&Value::Str("grpc".into()))
        })
        .unwrap();
    assert_eq!(run.parent, None);
    assert!(spans.iter().all(|s| s.trace_id == run.trace_id));
    let stop = spans
        .iter()
        .find(|s| s.name == "runtime.v1.RuntimeService/StopPodSandbox")
        .unwrap();
    assert_eq!(stop.parent, Some(Parent::local(run.span_id)));
    // Each delivery under the CRI call that caused it.
    let hook_of_stop = spans
        .iter()
        .find(|s| {
            s.name == "nri.pkg.api.v1alpha1.Plugin/StateChange" && s.start_wall_ns == 5_005 * MS
        })
        .unwrap();
    assert_eq!(hook_of_stop.parent, Some(Parent::local(stop.span_id)));
    assert_eq!(
        attr(hook_of_stop, "nri.plugin"),
        Some(&Value::Str("10-slow".into()))
    );
    assert_eq!(
        attr(hook_of_stop, "nri.hook"),
        Some(&Value::Str("STOP_POD_SANDBOX".into()))
    );
    // The pod's names from RunPodSandbox on every span of the pod.
    assert_eq!(attr(stop, "k8s.pod.name"), Some(&Value::Str("web".into())));
    assert_eq!(attr(stop, "k8s.pod.uid"), Some(&Value::Str("6f1c".into())));
    assert_eq!(stop.start_wall_ns, 5_000 * MS);
    assert_eq!(stop.end_wall_ns, 5_030 * MS);
}

#[test]
fn trace_context_from_the_wire_is_continued() {
    let Record::CriSpan(mut s) = stop_pod("sb1", 5_000, 3) else {
        unreachable!()
    };
    s.call.traceparent = Some(tp(KUBELET));
    s.hooks[0].call.traceparent = Some(tp(CONTAINERD));
    let spans = run(&[Record::CriSpan(s)]);
    let cri = spans
        .iter()
        .find(|s| s.name.starts_with("runtime.v1"))
        .unwrap();
    let nri = spans.iter().find(|s| s.name.starts_with("nri.")).unwrap();
    assert_eq!(cri.trace_id, tp(KUBELET).trace_id);
    assert_eq!(cri.parent, Some(Parent::remote(tp(KUBELET))));
    // The delivery under containerd's otelttrpc client span, not under
    // nri-trace's CRI span.
    assert_eq!(nri.parent, Some(Parent::remote(tp(CONTAINERD))));
    assert_eq!(nri.trace_id, tp(CONTAINERD).trace_id);
}

#[test]
fn polling_calls_of_no_pod_are_left_out() {
    let mut c = cri(Some("ListPodSandbox"), "x", 10, 11);
    c.sandbox_id = None;
    assert!(run(&[span(c.clone(), vec![])]).is_empty());
    c.traceparent = Some(tp(KUBELET));
    assert_eq!(run(&[span(c, vec![])]).len(), 1);
}

fn violation(at_ms: u64, evidence: Vec<Evidence>) -> Record {
    Record::Violation(Violation {
        rule: "a-rule",
        severity: Severity::Error,
        certainty: Certainty::Certain,
        ts: crate::engine::test_calls::ts(at_ms).unwrap(),
        pod: Some("shop/web".into()),
        plugin: Some("10-slow".into()),
        detail: Detail::PodUnknown {
            hook: Hook::Event(Event::StopPodSandbox),
        },
        evidence,
    })
}

#[test]
fn a_finding_is_an_event_of_its_calls_span_or_a_span_of_its_own_when_late() {
    let Record::CriSpan(s) = stop_pod("sb1", 5_000, 3) else {
        unreachable!()
    };
    let h = &s.hooks[0].call;
    let evidence = vec![Evidence::Nri {
        conn: h.conn,
        stream_id: h.stream_id,
        hook: Hook::Event(Event::StopPodSandbox),
        plugin: "10-slow".into(),
        start: h.start,
        outcome: NriOutcome::Ok,
    }];
    // Within the hold: an event, and the span's status an error.
    let spans = run(&[
        Record::CriSpan(s.clone()),
        violation(5_100, evidence.clone()),
    ]);
    assert_eq!(spans.len(), 2);
    let nri = spans.iter().find(|s| s.name.starts_with("nri.")).unwrap();
    assert_eq!(nri.error.as_deref(), Some("a-rule"));
    assert_eq!(nri.events.len(), 1);
    assert_eq!(nri.events[0].name, "nri_trace.finding");
    // Past the hold: the span went out; the finding is a span under it.
    let late = 5_030 + HOLD_NS / MS + 10_000;
    let spans = run(&[Record::CriSpan(s), violation(late, evidence)]);
    assert_eq!(spans.len(), 3);
    let nri = spans.iter().find(|s| s.name.starts_with("nri.")).unwrap();
    assert_eq!(nri.error, None);
    let f = spans.iter().find(|s| s.kind == Kind::Internal).unwrap();
    assert_eq!(f.parent, Some(Parent::local(nri.span_id)));
    assert_eq!(f.trace_id, nri.trace_id);
    assert_eq!(
        attr(f, "nri_trace.rule"),
        Some(&Value::Str("a-rule".into()))
    );
}

#[test]
fn the_same_records_give_the_same_spans() {
    let records = [
        run_pod("sb1", 1_000, 1),
        run_pod("sb2", 1_100, 5),
        stop_pod("sb1", 5_000, 3),
    ];
    let a = run(&records);
    let b = run(&records);
    assert_eq!(a, b);
    let ids: std::collections::BTreeSet<_> = a.iter().map(|s| s.span_id).collect();
    assert_eq!(ids.len(), a.len(), "span ids are unique");
    let traces: std::collections::BTreeSet<_> = a.iter().map(|s| s.trace_id).collect();
    assert_eq!(traces.len(), 2, "one trace per pod lifecycle");
}

#[test]
fn spans_wait_for_their_findings_then_go_in_capture_time() {
    let mut m = SpanMaker::new();
    let mut out = Vec::new();
    m.record(&stop_pod("sb1", 5_000, 3), &mut out);
    assert!(out.is_empty(), "held");
    m.advance(5_030 * MS + HOLD_NS - 1, &mut out);
    assert!(out.is_empty(), "held until the hold ends");
    m.advance(5_030 * MS + HOLD_NS, &mut out);
    assert_eq!(out.len(), 2);
}

/// A kernel event of the pod's container while its StopContainer ran is
/// an event of that call's span; one outside the call is not.
#[test]
fn kernel_events_during_a_teardown_call_are_its_events() {
    use crate::{
        capture::sandbox::SandboxOp,
        engine::teardown::tests::{kernel, CID},
    };
    let mut create = cri(Some("CreateContainer"), "sb1", 200, 250);
    create.container_id = Some(CID.into());
    create.stream_id = 3;
    let mut stop = cri(Some("StopContainer"), "sb1", 1_000, 1_100);
    stop.sandbox_id = None;
    stop.container_id = Some(CID.into());
    stop.stream_id = 5;
    let exit = SandboxOp::Exit { status: Some(9) };
    let spans = run(&[
        run_pod("sb1", 100, 1),
        span(create, vec![]),
        kernel(900, 7, "sleep", exit.clone()),
        kernel(1_050, 7, "sleep", exit),
        span(stop, vec![]),
    ]);
    let stop = spans
        .iter()
        .find(|s| s.name == "runtime.v1.RuntimeService/StopContainer")
        .unwrap();
    assert_eq!(stop.events.len(), 1, "{:?}", stop.events);
    assert_eq!(stop.events[0].name, "nri_trace.kernel");
    assert_eq!(stop.events[0].wall_ns, 1_050 * MS);
    assert_eq!(attr(stop, "container.id"), Some(&Value::Str(CID.into())));
    let create = spans
        .iter()
        .find(|s| s.name == "runtime.v1.RuntimeService/CreateContainer")
        .unwrap();
    assert!(create.events.is_empty(), "not a teardown call");
}
