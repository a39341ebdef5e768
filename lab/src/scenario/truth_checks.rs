//! What the scenarios' checks read from a truth file, shared by the
//! scenario files: NRI deliveries per plugin, CRI calls, plugin events
//! and notes, the handshake and per-pod event order every plugin should
//! show, and which runtime configured a plugin.

use anyhow::{bail, ensure, Context, Result};

use crate::truth::{Outcome, PluginEvent, Truth};

// ------------------------------------------------------------- verification

/// NRI deliveries to `plugin` (event, pod name, recv, reply, outcome).
pub(super) struct Delivery<'a> {
    pub(super) event: Option<&'a str>,
    pub(super) pod: Option<&'a str>,
    pub(super) recv: u64,
    pub(super) reply: Option<u64>,
    pub(super) outcome: &'a Outcome,
}

pub(super) fn deliveries<'a>(t: &'a [Truth], plugin_name: &str) -> Vec<Delivery<'a>> {
    t.iter()
        .filter_map(|x| match x {
            Truth::Nri {
                plugin,
                event,
                pod,
                recv_mono_ns,
                reply_mono_ns,
                outcome,
                ..
            } if plugin == plugin_name => Some(Delivery {
                event: event.as_deref(),
                pod: pod.as_ref().map(|p| p.name.as_str()),
                recv: *recv_mono_ns,
                reply: *reply_mono_ns,
                outcome,
            }),
            _ => None,
        })
        .collect()
}

/// (method, pod name, duration ns, outcome, retry) of every CRI call.
pub(super) fn cri_calls(t: &[Truth]) -> Vec<(&str, Option<&str>, u64, &Outcome, u32)> {
    t.iter()
        .filter_map(|x| match x {
            Truth::Cri {
                method,
                pod,
                start_mono_ns,
                end_mono_ns,
                outcome,
                retry,
                ..
            } => Some((
                method.as_str(),
                pod.as_ref().map(|p| p.name.as_str()),
                end_mono_ns.saturating_sub(*start_mono_ns),
                outcome,
                *retry,
            )),
            _ => None,
        })
        .collect()
}

pub(super) fn plugin_events<'a>(t: &'a [Truth], name: &str) -> Vec<&'a PluginEvent> {
    t.iter()
        .filter_map(|x| match x {
            Truth::Plugin { plugin, what, .. } if plugin == name => Some(what),
            _ => None,
        })
        .collect()
}

/// When plugin `name` was disconnected first, and why.
pub(super) fn disconnected_at<'a>(t: &'a [Truth], name: &str) -> Option<(u64, &'a str)> {
    t.iter().find_map(|x| match x {
        Truth::Plugin {
            plugin,
            mono_ns,
            what: PluginEvent::Disconnected { reason },
            ..
        } if plugin == name => Some((*mono_ns, reason.as_str())),
        _ => None,
    })
}

/// When the note `text` was written.
pub(super) fn note_at(t: &[Truth], text: &str) -> Option<u64> {
    t.iter().find_map(|x| match x {
        Truth::Note { text: n, mono_ns } if n == text => Some(*mono_ns),
        _ => None,
    })
}

pub(super) fn pods_of(t: &[Truth], prefix: &str) -> Vec<String> {
    let mut v: Vec<String> = cri_calls(t)
        .iter()
        .filter(|c| c.0 == "RunPodSandbox")
        .filter_map(|c| c.1)
        .filter(|n| n.starts_with(prefix))
        .map(String::from)
        .collect();
    v.sort();
    v.dedup();
    v
}

/// The plugin registered and was configured (and, for an external plugin,
/// synchronized: pre-launched plugins get no Synchronize at start-up).
pub(super) fn check_handshake(t: &[Truth], plugin: &str, external: bool) -> Result<()> {
    let ev = plugin_events(t, plugin);
    let registered = ev.iter().any(|e| matches!(e, PluginEvent::Registered));
    let configured = ev
        .iter()
        .any(|e| matches!(e, PluginEvent::Configured { .. }));
    let synced = ev
        .iter()
        .any(|e| matches!(e, PluginEvent::Synchronized { .. }));
    ensure!(registered, "plugin {plugin} was never Registered");
    ensure!(configured, "plugin {plugin} was never Configured");
    ensure!(
        synced || !external,
        "plugin {plugin} was never Synchronized"
    );
    Ok(())
}

/// Each pod went RUN -> STOP -> REMOVE (by receive time) at `plugin`.
pub(super) fn check_pod_order(t: &[Truth], plugin: &str, pods: &[String]) -> Result<()> {
    let d = deliveries(t, plugin);
    for pod in pods {
        let at = |ev: &str| {
            d.iter()
                .find(|x| x.event == Some(ev) && x.pod == Some(pod.as_str()))
                .map(|x| x.recv)
        };
        let (Some(run), Some(stop), Some(rm)) = (
            at("RUN_POD_SANDBOX"),
            at("STOP_POD_SANDBOX"),
            at("REMOVE_POD_SANDBOX"),
        ) else {
            bail!("plugin {plugin} lacks a pod event for {pod}");
        };
        ensure!(
            run < stop && stop < rm,
            "plugin {plugin}: {pod} events out of order"
        );
    }
    Ok(())
}

pub(super) fn all_cri_ok(t: &[Truth]) -> Result<usize> {
    let calls = cri_calls(t);
    for c in &calls {
        ensure!(
            matches!(c.3, Outcome::Ok),
            "CRI {} for {:?} failed: {:?}",
            c.0,
            c.1,
            c.3
        );
    }
    Ok(calls.len())
}

/// The scenario's notes, in order.
pub(super) fn notes(t: &[Truth]) -> Vec<&str> {
    t.iter()
        .filter_map(|x| match x {
            Truth::Note { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

/// The runtime's name and version plugin `name` was configured with (its
/// own record of the NRI Configure request): ("containerd", "1.7.24~ds1"),
/// ("containerd", "2.1.9+unknown"), ("cri-o", "1.36.3"; until 2026-11-28 "1.33.13").
pub(super) fn runtime_of<'a>(t: &'a [Truth], name: &str) -> Result<(&'a str, &'a str)> {
    plugin_events(t, name)
        .into_iter()
        .find_map(|e| match e {
            PluginEvent::Configured {
                runtime, version, ..
            } => Some((runtime.as_str(), version.as_str())),
            _ => None,
        })
        .with_context(|| format!("plugin {name} was never configured"))
}

/// CRI-O names itself "cri-o" in NRI Configure (containerd "containerd").
pub(super) fn is_crio(runtime: &str) -> bool {
    runtime == "cri-o"
}

/// When plugin `name` first recorded an event matching `pred`.
pub(super) fn plugin_event_at(
    t: &[Truth],
    name: &str,
    pred: impl Fn(&PluginEvent) -> bool,
) -> Option<u64> {
    t.iter().find_map(|x| match x {
        Truth::Plugin {
            plugin,
            mono_ns,
            what,
            ..
        } if plugin == name && pred(what) => Some(*mono_ns),
        _ => None,
    })
}

pub(super) fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}
