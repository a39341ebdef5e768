//! The checker's test records: plugins, pod lifecycles and deliveries
//! the rules' tests feed it.

use super::{ContractChecker, ContractConfig};
use crate::model::nri_call::NriMethod;
use crate::{
    basic_types::ConnId,
    decode::nri::message::Event,
    engine::{
        correlate::NoCause,
        findings::Violation,
        hook_latency::HookSpan,
        record::{Record, Uncaused},
        test_calls::*,
    },
    model::{
        nri_call::{IdentitySource, PluginId},
        observation::Observation,
    },
};

pub(super) const ALL: [&str; 3] = ["RUN_POD_SANDBOX", "STOP_POD_SANDBOX", "REMOVE_POD_SANDBOX"];

/// The events named (their protobuf names).
pub(super) fn events_named(names: &[&str]) -> Vec<Event> {
    names
        .iter()
        .map(|n| Event::from_str_name(n).expect("an NRI event name"))
        .collect()
}

pub(super) fn plugin(name: &str, idx: &str, conn: u64, events: &[&'static str]) -> Record {
    Record::Observed(Observation::NriPlugin {
        conn: ConnId(conn),
        ts: ts(0).unwrap(),
        plugin: PluginId {
            name: Some(name.into()),
            index: Some(idx.into()),
            pid: None,
            comm: None,
            source: IdentitySource::RegisterPlugin,
            inferred: None,
        },
        events: Some(events_named(events)),
        nri_version: Default::default(),
    })
}

pub(super) fn lifecycle(order: [(&str, Event); 3]) -> Vec<Record> {
    let mut v = vec![plugin("a", "10", 2, &ALL)];
    for (i, (method, event)) in order.into_iter().enumerate() {
        let t = 100 * (i as u64 + 1);
        v.push(span(
            cri(Some(method), "s1", t, t + 50),
            vec![to_plugin(
                hook(Some(event), "a", "s1", t + 10, t + 20),
                "a",
                "10",
                2,
            )],
        ));
    }
    v
}

pub(super) fn check(records: &[Record]) -> Vec<Violation> {
    let mut c = ContractChecker::new(ContractConfig::default());
    let mut out = Vec::new();
    for r in records {
        c.on_record(r, &mut out);
    }
    c.finish(&mut out);
    out
}

pub(super) fn rule_ids(v: &[Violation]) -> Vec<&'static str> {
    v.iter().map(|v| v.rule).collect()
}

pub(super) fn synchronize(label: &str, idx: &str, conn: u64, pods: &[&str]) -> Record {
    let mut h = to_plugin(hook(None, label, "", 1, 2), label, idx, conn);
    h.call.method = Some(NriMethod::Synchronize);
    h.call.synchronized_pods = pods.iter().map(ToString::to_string).collect();
    Record::NriUncaused(Uncaused {
        span: h,
        no_cri_cause: NoCause::PluginLifecycle,
        exit: None,
        rolls_back: None,
    })
}

/// A container event of container `ctr` in pod `pod`, to plugin a.
pub(super) fn ctr_hook(event: Event, pod: &str, ctr: &str, start: u64) -> HookSpan {
    let mut h = to_plugin(hook(Some(event), "a", pod, start, start + 5), "a", "10", 2);
    h.call.container = Some(crate::model::nri_call::ContainerRef {
        id: ctr.into(),
        name: "c0".into(),
        ..Default::default()
    });
    h
}

/// The events plugin a subscribes to in the container-in-pod tests.
pub(super) const POD_AND_CREATE: [&str; 4] = [
    "RUN_POD_SANDBOX",
    "STOP_POD_SANDBOX",
    "CREATE_CONTAINER",
    "START_CONTAINER",
];

/// Pod s1's RunPodSandbox, whose hook to plugin a ends at `end`.
pub(super) fn run_pod_until(end: u64) -> Record {
    span(
        cri(Some("RunPodSandbox"), "s1", 0, end + 10),
        vec![to_plugin(
            hook(Some(Event::RunPodSandbox), "a", "s1", 10, end),
            "a",
            "10",
            2,
        )],
    )
}
