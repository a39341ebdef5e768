//! The words and parts of an NRI call: a request's and a response's
//! one-line summary (`NriCall::summary`), a subscription mask's event names,
//! and what a CreateContainer reply adjusted.

use super::{api, Adjustment, Event, RequestBody, ResponseBody, Subject};

/// Event names of a subscription mask (bit `1 << (event - 1)`; 0 means all,
/// nri `pkg/api/event.go`).
pub fn event_names(mask: i32) -> Vec<&'static str> {
    (1..Event::Last as i32)
        .filter(|e| mask == 0 || mask & (1 << (e - 1)) != 0)
        .filter_map(|e| Event::try_from(e).ok())
        .map(|e| e.as_str_name())
        .collect()
}

pub(super) fn secs(ns: i64) -> String {
    format!("{}s", ns as f64 / 1e9)
}

/// Event, subject (moved out, not cloned) and summary of a request.
pub(super) fn describe_request(b: RequestBody) -> (Option<Event>, Subject, String) {
    match b {
        RequestBody::RegisterPlugin(r) => {
            let mut s = format!("register {}-{}", r.plugin_idx, r.plugin_name);
            if !r.nri_version.is_empty() {
                s.push_str(&format!(" (NRI {})", r.nri_version));
            }
            (None, Subject::default(), s)
        }
        RequestBody::UpdateContainers(r) => (
            None,
            Subject::default(),
            format!(
                "unsolicited: {} updates, {} evictions",
                r.update.len(),
                r.evict.len()
            ),
        ),
        RequestBody::Configure(r) => {
            let mut s = format!("runtime {} {}", r.runtime_name, r.runtime_version);
            if !r.nri_version.is_empty() {
                s.push_str(&format!(" (NRI {})", r.nri_version));
            }
            if r.registration_timeout > 0 {
                s.push_str(&format!(
                    ", registration timeout {}",
                    secs(r.registration_timeout * 1_000_000)
                ));
            }
            if r.request_timeout > 0 {
                s.push_str(&format!(
                    ", request timeout {}",
                    secs(r.request_timeout * 1_000_000)
                ));
            }
            (None, Subject::default(), s)
        }
        RequestBody::Synchronize(r) => (
            None,
            Subject::default(),
            format!(
                "{} pods, {} containers{}",
                r.pods.len(),
                r.containers.len(),
                if r.more { ", more to come" } else { "" }
            ),
        ),
        RequestBody::Shutdown => (None, Subject::default(), String::new()),
        RequestBody::Event {
            event,
            subject,
            validate,
        } => {
            let s = validate
                .as_ref()
                .map(|v| {
                    format!(
                        "validate adjustments of {} plugins: {}",
                        v.plugins.len(),
                        v.adjust.as_ref().map(describe_adjust).unwrap_or_default()
                    )
                })
                .unwrap_or_default();
            (Some(event), subject, s)
        }
    }
}

/// The parts of a container an adjustment touches, by name.
pub fn adjusted_parts(a: &api::ContainerAdjustment) -> Vec<String> {
    let mut parts = Vec::new();
    let mut part = |name: &str, set: bool| {
        if set {
            parts.push(name.to_string());
        }
    };
    part("annotations", !a.annotations.is_empty());
    part("mounts", !a.mounts.is_empty());
    part("env", !a.env.is_empty());
    part("rlimits", !a.rlimits.is_empty());
    part("CDI devices", !a.cdi_devices.is_empty());
    part("args", !a.args.is_empty());
    part("hooks", a.hooks.is_some());
    if let Some(l) = &a.linux {
        part("devices", !l.devices.is_empty());
        part("resources", l.resources.is_some());
        part("cgroups path", !l.cgroups_path.is_empty());
        part("oom_score_adj", l.oom_score_adj.is_some());
        part("seccomp", l.seccomp_policy.is_some());
        part("namespaces", !l.namespaces.is_empty());
        part("sysctl", !l.sysctl.is_empty());
        part("I/O priority", l.io_priority.is_some());
        part("net devices", !l.net_devices.is_empty());
        part("scheduler", l.scheduler.is_some());
        part("RDT", l.rdt.is_some());
        part("memory policy", l.memory_policy.is_some());
    }
    parts
}

/// The typed [`Adjustment`] of a decoded reply, if it is about one.
pub(super) fn adjustment_of(b: &ResponseBody) -> Option<Adjustment> {
    match b {
        ResponseBody::CreateContainer(r) => {
            let parts = r.adjust.as_ref().map(adjusted_parts).unwrap_or_default();
            (!parts.is_empty()).then_some(Adjustment::Made { parts })
        }
        ResponseBody::ValidateContainerAdjustment(r) => Some(Adjustment::Validated {
            rejected: r.reject,
            reason: r.reason.clone(),
        }),
        _ => None,
    }
}

pub(super) fn describe_adjust(a: &api::ContainerAdjustment) -> String {
    let mut parts = Vec::new();
    let mut n = |what: &str, k: usize| {
        if k > 0 {
            parts.push(format!("{k} {what}"));
        }
    };
    n("annotations", a.annotations.len());
    n("mounts", a.mounts.len());
    n("env", a.env.len());
    n("rlimits", a.rlimits.len());
    n("CDI devices", a.cdi_devices.len());
    n("args", a.args.len());
    if a.hooks.is_some() {
        parts.push("hooks".into());
    }
    if let Some(l) = &a.linux {
        if !l.devices.is_empty() {
            parts.push(format!("{} devices", l.devices.len()));
        }
        if l.resources.is_some() {
            parts.push("resources".into());
        }
        if !l.cgroups_path.is_empty() {
            parts.push("cgroups path".into());
        }
        if l.oom_score_adj.is_some() {
            parts.push("oom_score_adj".into());
        }
        if l.seccomp_policy.is_some() {
            parts.push("seccomp".into());
        }
        if !l.namespaces.is_empty() {
            parts.push("namespaces".into());
        }
    }
    if parts.is_empty() {
        "no adjustment".into()
    } else {
        format!("adjust {}", parts.join(", "))
    }
}

pub(super) fn describe_updates(update: usize, evict: usize) -> String {
    match (update, evict) {
        (0, 0) => String::new(),
        (u, 0) => format!("{u} container updates"),
        (u, e) => format!("{u} container updates, {e} evictions"),
    }
}

pub(super) fn describe_response(b: &ResponseBody) -> String {
    match b {
        ResponseBody::Empty => String::new(),
        ResponseBody::Configure(r) => {
            let names = event_names(r.events);
            let mut s = if r.events == 0 {
                "subscribes to all events".to_string()
            } else {
                format!("subscribes to {}", names.join("|"))
            };
            if r.request_timeout > 0 {
                s.push_str(&format!(
                    ", asks request timeout {}",
                    secs(r.request_timeout * 1_000_000)
                ));
            }
            s
        }
        ResponseBody::Synchronize(r) => {
            let mut s = describe_updates(r.update.len(), 0);
            if r.more {
                s.push_str(if s.is_empty() { "more" } else { ", more" });
            }
            s
        }
        ResponseBody::CreateContainer(r) => {
            let a = r
                .adjust
                .as_ref()
                .map_or_else(|| "no adjustment".into(), describe_adjust);
            let u = describe_updates(r.update.len(), r.evict.len());
            if u.is_empty() {
                a
            } else {
                format!("{a}; {u}")
            }
        }
        ResponseBody::UpdateContainer(r) => describe_updates(r.update.len(), r.evict.len()),
        ResponseBody::StopContainer(r) => describe_updates(r.update.len(), 0),
        ResponseBody::UpdateContainers(r) => match r.failed.len() {
            0 => String::new(),
            n => format!("{n} updates failed"),
        },
        ResponseBody::ValidateContainerAdjustment(r) => {
            if r.reject {
                format!("rejected: {}", r.reason)
            } else {
                "accepted".into()
            }
        }
    }
}
