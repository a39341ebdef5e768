//! The words and parts of an NRI call: a request's and a response's
//! one-line summary (`NriCall::summary`), a subscription mask's event names,
//! and what a CreateContainer reply adjusted.

use super::{api, Adjustment, ConfiguredRuntime, Event, RequestBody, ResponseBody, Subject};
use crate::model::nri_call::join_events;

/// The events of a subscription mask (bit `1 << (event - 1)`; 0 means all,
/// nri `pkg/api/event.go`).
pub(crate) fn subscribed_events(mask: i32) -> Vec<Event> {
    (1..Event::Last as i32)
        .filter(|e| mask == 0 || mask & (1 << (e - 1)) != 0)
        .filter_map(|e| Event::try_from(e).ok())
        .collect()
}

pub(super) fn secs(ns: i64) -> String {
    format!("{}s", ns as f64 / 1e9)
}

/// The runtime a Configure request names.
pub(super) fn configured_runtime(r: &api::ConfigureRequest) -> ConfiguredRuntime {
    ConfiguredRuntime {
        name: r.runtime_name.clone(),
        version: r.runtime_version.clone(),
        nri_version: r.nri_version.clone(),
    }
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
            let mut s = format!("runtime {}", configured_runtime(&r));
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

/// What a container adjustment sets, in the order it is told: each part's
/// name, and how many it holds where it is a list or map (`None`: a part
/// that is set or not). The one walk over `ContainerAdjustment`'s fields
/// (nri `pkg/api/api.proto`, v0.12) that both its parts
/// ([`adjusted_parts`]) and its summary (`describe_adjust`) use.
fn adjustment_parts(a: &api::ContainerAdjustment) -> Vec<(&'static str, Option<usize>)> {
    // A list or map counted when it holds something; a part set or not.
    let counted = |name, k: usize| (k > 0).then_some((name, Some(k)));
    let set = |name, is: bool| is.then_some((name, None));
    let mut parts: Vec<_> = [
        counted("annotations", a.annotations.len()),
        counted("mounts", a.mounts.len()),
        counted("env", a.env.len()),
        counted("rlimits", a.rlimits.len()),
        counted("CDI devices", a.cdi_devices.len()),
        counted("args", a.args.len()),
        set("hooks", a.hooks.is_some()),
    ]
    .into_iter()
    .flatten()
    .collect();
    if let Some(l) = &a.linux {
        parts.extend(
            [
                counted("devices", l.devices.len()),
                set("resources", l.resources.is_some()),
                set("cgroups path", !l.cgroups_path.is_empty()),
                set("oom_score_adj", l.oom_score_adj.is_some()),
                set("seccomp", l.seccomp_policy.is_some()),
                set("namespaces", !l.namespaces.is_empty()),
                set("sysctl", !l.sysctl.is_empty()),
                set("I/O priority", l.io_priority.is_some()),
                set("net devices", !l.net_devices.is_empty()),
                set("scheduler", l.scheduler.is_some()),
                set("RDT", l.rdt.is_some()),
                set("memory policy", l.memory_policy.is_some()),
            ]
            .into_iter()
            .flatten(),
        );
    }
    parts
}

/// The parts of a container an adjustment touches, by name.
pub(crate) fn adjusted_parts(a: &api::ContainerAdjustment) -> Vec<String> {
    adjustment_parts(a)
        .into_iter()
        .map(|(name, _)| name.to_string())
        .collect()
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

/// A container adjustment's summary: "adjust 2 env, hooks, resources".
pub(super) fn describe_adjust(a: &api::ContainerAdjustment) -> String {
    let parts: Vec<String> = adjustment_parts(a)
        .into_iter()
        .map(|(name, k)| k.map_or_else(|| name.to_string(), |k| format!("{k} {name}")))
        .collect();
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
            let mut s = if r.events == 0 {
                "subscribes to all events".to_string()
            } else {
                format!(
                    "subscribes to {}",
                    join_events(&subscribed_events(r.events), "|")
                )
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The parts and the summary come from one walk: the same parts in the
    /// same order, the summary with counts of lists, and the NRI v0.10+
    /// parts (here sysctl) in both.
    #[test]
    fn parts_and_summary_agree() {
        let a = api::ContainerAdjustment {
            env: vec![api::KeyValue::default(), api::KeyValue::default()],
            hooks: Some(api::Hooks::default()),
            linux: Some(api::LinuxContainerAdjustment {
                sysctl: [("net.core.somaxconn".to_string(), "1024".to_string())].into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(adjusted_parts(&a), ["env", "hooks", "sysctl"]);
        assert_eq!(describe_adjust(&a), "adjust 2 env, hooks, sysctl");
        let none = api::ContainerAdjustment::default();
        assert!(adjusted_parts(&none).is_empty());
        assert_eq!(describe_adjust(&none), "no adjustment");
    }
}
