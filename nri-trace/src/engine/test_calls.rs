//! Builders of CRI and NRI calls for the engine's unit tests.

use crate::model::nri_call::NriMethod;
use crate::{
    basic_types::{ConnId, Timestamp},
    decode::nri::message::Event,
    engine::hook_latency::{Hook, HookSpan},
    model::{
        cri_call::{CriCall, CriOutcome, Identified},
        nri_call::{Caller, ContainerRef, IdentitySource, NriCall, NriOutcome, PluginId, PodRef},
    },
};

pub(crate) const MS: u64 = 1_000_000;

#[allow(
    clippy::unnecessary_wraps,
    reason = "the fields it fills are Option<Timestamp>"
)]
pub(crate) fn ts(ms: u64) -> Option<Timestamp> {
    Some(Timestamp {
        mono_ns: ms * MS,
        wall_ns: ms * MS,
    })
}

pub(crate) fn cri(method: Option<&str>, sandbox: &str, start: u64, end: u64) -> CriCall {
    CriCall {
        conn: ConnId(1),
        stream_id: 1,
        method: method.map(Into::into),
        service: None,
        identified: Identified::Known,
        pod: None,
        sandbox_id: Some(sandbox.into()),
        container: None,
        container_id: None,
        request_id: None,
        stop_timeout_s: None,
        traceparent: None,
        start: ts(start),
        end: ts(end),
        duration_ns: Some((end - start) * MS),
        deadline_ns: None,
        outcome: CriOutcome::Ok,
        outcome_evidence: None,
        partial: false,
        summary: String::new(),
        client: None,
    }
}

pub(crate) fn hook(
    event: Option<Event>,
    plugin: &str,
    pod: &str,
    start: u64,
    end: u64,
) -> HookSpan {
    let call = NriCall {
        conn: ConnId(2),
        mux_conn: 1,
        stream_id: 1,
        plugin: PluginId {
            name: Some(plugin.into()),
            index: Some("10".into()),
            pid: None,
            comm: None,
            source: IdentitySource::RegisterPlugin,
            inferred: None,
        },
        caller: Caller::Runtime,
        method: Some(NriMethod::StateChange),
        event,
        pod: Some(PodRef {
            id: pod.into(),
            name: "p".into(),
            namespace: "ns".into(),
            uid: "u".into(),
            netns: None,
        }),
        container: None::<ContainerRef>,
        start: ts(start),
        end: ts(end),
        duration_ns: Some((end - start) * MS),
        plugin_ns: None,
        outcome: NriOutcome::Ok,
        timeout_nano: None,
        partial: false,
        summary: String::new(),
        synchronized_pods: Vec::new(),
        synchronized_containers: Vec::new(),
        split_part: None,
        adjustment: None,
        configured_runtime: None,
        traceparent: None,
    };
    HookSpan {
        hook: event.map_or_else(|| Hook::Method(NriMethod::Synchronize), Hook::Event),
        call,
        queued_ns: Some(0),
        queued_behind: vec![],
        own_ns: Some((end - start) * MS),
    }
}

/// A CRI span record of `call` with these hooks.
pub(crate) fn span(call: CriCall, hooks: Vec<HookSpan>) -> crate::engine::record::Record {
    crate::engine::record::Record::CriSpan(crate::engine::correlate::CriSpan {
        call,
        hooks,
        nri_ns: 0,
        nri_permille: None,
    })
}

/// `h` as delivered to plugin `idx`-`name` on connection `conn`.
pub(crate) fn to_plugin(mut h: HookSpan, name: &str, idx: &str, conn: u64) -> HookSpan {
    h.call.plugin.name = Some(name.into());
    h.call.plugin.index = Some(idx.into());
    h.call.conn = ConnId(conn);
    h
}

/// A STOP_CONTAINER delivery of container `ctr` (named as its id) of pod
/// s1, to plugin 10-a.
pub(crate) fn stop_container_hook(ctr: &str, start: u64, end: u64) -> HookSpan {
    let mut h = hook(Some(Event::StopContainer), "a", "s1", start, end);
    h.call.container = Some(ContainerRef {
        id: ctr.into(),
        name: ctr.into(),
        ..Default::default()
    });
    h
}
