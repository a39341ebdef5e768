//! Checks `nri-trace watch` records against the lab's truth: every plugin
//! delivery under the CRI span of the driver's call that caused it, and the
//! contract findings. Shared by the live tests (trace_lab/) and the replay
//! of committed recordings (trace_replay.rs).
#![allow(dead_code)]

pub(crate) mod rule_ids;

use std::collections::BTreeMap;

use nri_trace::engine::{
    Record, {causes, NoCause}, {Certainty, Detail},
};
use nri_trace_lab::truth::{self, Truth};

/// Every plugin delivery in the truth, made while the driver's CRI call
/// that causes it was in flight, is a hook of the decoded span of that
/// call: same plugin, event and object.
pub(crate) fn check_correlation(
    scenario: &str,
    records: &[Record],
    truth: &[Truth],
) -> (usize, usize) {
    let since = truth::observer_attached_ns(truth).expect("attach note");
    let spans: Vec<_> = records
        .iter()
        .filter_map(|r| match r {
            Record::CriSpan(s) => Some(s),
            _ => None,
        })
        .collect();
    let (mut checked, mut problems) = (0, Vec::new());
    for t in truth {
        let Truth::Nri {
            plugin,
            index,
            event: Some(event),
            pod,
            container,
            recv_mono_ns,
            ..
        } = t
        else {
            continue;
        };
        if *recv_mono_ns < since {
            continue;
        }
        // The driver's call in flight that makes this event, for this
        // container (kubelet stops a pod's containers concurrently: another
        // container's StopContainer may be in flight too), else a call on
        // the pod that names no container.
        let ctr_id = container.as_ref().map(|c| c.id.as_str());
        let in_flight = truth.iter().filter_map(|c| match c {
            Truth::Cri {
                method,
                pod: cpod,
                container: cctr,
                start_mono_ns,
                end_mono_ns,
                ..
            } if start_mono_ns <= recv_mono_ns
                && recv_mono_ns <= end_mono_ns
                && nri_trace::testing::nri::message::Event::from_str_name(event)
                    .is_some_and(|e| causes(e).iter().any(|m| m.name() == method)) =>
            {
                // A call on this pod: its sandbox id, or (RunPodSandbox,
                // before the id exists) its uid and name. Under load other
                // pods' calls are in flight too.
                let same_pod = pod.as_ref().zip(cpod.as_ref()).is_some_and(|(p, cp)| {
                    cp.sandbox_id.as_deref() == Some(p.id.as_str())
                        || (cp.uid == p.uid && cp.name == p.name)
                });
                let names = match (ctr_id, cctr.as_ref().and_then(|k| k.id.as_deref())) {
                    (Some(want), Some(id)) => want == id,
                    (_, None) => same_pod,
                    (None, Some(_)) => false,
                };
                Some((names, method.clone(), *start_mono_ns, *end_mono_ns))
            }
            _ => None,
        });
        let mut cands: Vec<_> = in_flight.collect();
        // The call naming this object first, in truth order otherwise.
        cands.sort_by_key(|c| !c.0);
        let cause = cands.into_iter().next().map(|(_, m, t0, t1)| (m, t0, t1));
        let Some((method, t0, t1)) = cause else {
            continue;
        };
        checked += 1;
        let label = format!("{index}-{plugin}");
        let object = container
            .as_ref()
            .map(|c| c.id.clone())
            .or_else(|| pod.as_ref().map(|p| p.id.clone()))
            .unwrap_or_default();
        let found = spans.iter().any(|s| {
            s.call.method_name() == Some(method.as_str())
                && s.call
                    .start
                    .is_some_and(|st| st.mono_ns >= t0 && st.mono_ns <= t1)
                && s.hooks.iter().any(|h| {
                    h.hook == event.as_str()
                        && h.call.plugin.label() == label
                        && (h.call.container.as_ref().is_some_and(|c| c.id == object)
                            || h.call.pod.as_ref().is_some_and(|p| p.id == object))
                })
        });
        if !found {
            problems.push(format!(
                "{label} {event} on {object}: not under the {method} span"
            ));
        }
    }
    // In these scenarios every event delivery has a CRI cause.
    for r in records {
        if let Record::NriUncaused(u) = r {
            if u.no_cri_cause == NoCause::NoCriCallInFlight {
                problems.push(format!(
                    "{} {} has no CRI cause",
                    u.span.call.plugin.label(),
                    u.span.hook
                ));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "{scenario}: {} problems:\n{}",
        problems.len(),
        problems.join("\n")
    );
    let hooks: usize = spans.iter().map(|s| s.hooks.len()).sum();
    eprintln!(
        "{scenario}: {checked} plugin deliveries checked, all under their CRI call; \
         {} CRI spans, {hooks} hooks attached",
        spans.len()
    );
    (checked, hooks)
}

/// The contract findings among the records: (rule, plugin, certain).
pub(crate) fn findings(records: &[Record]) -> Vec<(&'static str, Option<String>, bool)> {
    records
        .iter()
        .filter_map(|r| match r {
            Record::Violation(v) => {
                Some((v.rule, v.plugin.clone(), v.certainty == Certainty::Certain))
            }
            _ => None,
        })
        .collect()
}

/// NRI deliveries that found no CRI call in flight (`plugin hook`): after
/// a late attach, each is a call the engine could not name.
pub(crate) fn uncaused_in_flight(records: &[Record]) -> Vec<String> {
    records
        .iter()
        .filter_map(|r| match r {
            Record::NriUncaused(u) if u.no_cri_cause == NoCause::NoCriCallInFlight => {
                Some(format!("{} {}", u.span.call.plugin.label(), u.span.hook))
            }
            _ => None,
        })
        .collect()
}

/// What the findings of `rule` saw, with their plugin.
pub(crate) fn finding_details<'a>(
    records: &'a [Record],
    rule: &str,
) -> Vec<(Option<&'a str>, &'a Detail)> {
    records
        .iter()
        .filter_map(|r| match r {
            Record::Violation(v) if v.rule == rule => Some((v.plugin.as_deref(), &v.detail)),
            _ => None,
        })
        .collect()
}

/// Every plugin that hooks under a CRI call, by its label (`IDX-NAME`,
/// else `comm[pid]`), with where its identity came from.
pub(crate) fn hook_plugins(
    records: &[Record],
) -> BTreeMap<String, nri_trace::model::IdentitySource> {
    records
        .iter()
        .filter_map(|r| match r {
            Record::CriSpan(s) => Some(s),
            _ => None,
        })
        .flat_map(|s| &s.hooks)
        .map(|h| (h.call.plugin.label(), h.call.plugin.source))
        .collect()
}

/// The plugins of the late-attach scenarios with plugins, all registered
/// before the observer attached (lab/src/scenario/late_attach.rs).
pub(crate) fn late_attach_plugins(scenario: &str) -> Vec<&'static str> {
    if scenario.contains("-go-") {
        vec!["05-pre", "10-alpha", "99-upstream-logger"]
    } else {
        vec!["05-pre", "10-alpha", "20-stops"]
    }
}

/// Each plugin of `scenario` hooks under the CRI calls by its IDX-NAME,
/// inferred from its process (its registration went before the attach).
pub(crate) fn check_late_plugins(scenario: &str, records: &[Record]) {
    use nri_trace::model::IdentitySource;
    let got = hook_plugins(records);
    let labels: Vec<&str> = got.keys().map(String::as_str).collect();
    assert_eq!(labels, late_attach_plugins(scenario), "{scenario}: {got:?}");
    assert!(
        got.values().all(|s| *s == IdentitySource::Inferred),
        "{scenario}: {got:?}"
    );
}

/// The conformance table's Synchronize clause as the plugins' and the
/// driver's records imply it: (held, broken) over each plugin's first
/// Synchronize and the pods whose RunPodSandbox the driver had begun
/// before it (and not stopped yet): held when the Synchronize listed the
/// pod or the plugin got its RUN_POD_SANDBOX, and each of the pod's
/// containers made before it (and not stopped yet) was listed or, in
/// flight, delivered by its CREATE_CONTAINER.
pub(crate) fn sync_clause_expected(truth: &[Truth]) -> (u64, u64) {
    use nri_trace_lab::truth::PluginEvent;
    let runs: Vec<(String, u64)> = truth
        .iter()
        .filter_map(|t| match t {
            Truth::Cri {
                method,
                pod: Some(p),
                start_mono_ns,
                outcome: truth::Outcome::Ok,
                ..
            } if method == "RunPodSandbox" => Some((p.sandbox_id.clone()?, *start_mono_ns)),
            _ => None,
        })
        .collect();
    let stopped_before = |id: &str, at: u64| {
        truth.iter().any(|t| {
            matches!(t, Truth::Cri { method, pod: Some(p), start_mono_ns, .. }
                if (method == "StopPodSandbox" || method == "RemovePodSandbox")
                    && p.sandbox_id.as_deref() == Some(id)
                    && *start_mono_ns < at)
        })
    };
    // The containers the driver made (CreateContainer OK), by pod:
    // (container id, start, end).
    let created: Vec<(String, String, u64, u64)> = truth
        .iter()
        .filter_map(|t| match t {
            Truth::Cri {
                method,
                pod: Some(p),
                container: Some(c),
                start_mono_ns,
                end_mono_ns,
                outcome: truth::Outcome::Ok,
                ..
            } if method == "CreateContainer" => Some((
                p.sandbox_id.clone()?,
                c.id.clone()?,
                *start_mono_ns,
                *end_mono_ns,
            )),
            _ => None,
        })
        .collect();
    let containers_of = |pod: &str| {
        let pod = pod.to_owned();
        created
            .iter()
            .filter(move |(p, ..)| *p == pod)
            .map(|(_, c, s, e)| (c, s, e))
    };
    let stopped_container_before = |id: &str, at: u64| {
        truth.iter().any(|t| {
            matches!(t, Truth::Cri { method, container: Some(c), start_mono_ns, .. }
                if (method == "StopContainer" || method == "RemoveContainer")
                    && c.id.as_deref() == Some(id)
                    && *start_mono_ns < at)
        })
    };
    // Each registration: a plugin's first Synchronize since it connected,
    // with every further part of a split one (the pods and containers of
    // all parts).
    let mut open: BTreeMap<(String, String), usize> = BTreeMap::new();
    let mut registrations: Vec<(String, String, u64, Vec<String>)> = Vec::new();
    // Registrations that failed: the plugin answered a split Synchronize
    // without `more` and the runtime closed it (nothing is decided).
    let mut failed = Vec::new();
    let mut ids_unknown = std::collections::BTreeSet::new();
    for t in truth {
        match t {
            Truth::Nri {
                plugin,
                index,
                method,
                action: truth::Action::Unsplit,
                ..
            } if method == "Synchronize" => {
                if let Some(&i) = open.get(&(plugin.clone(), index.clone())) {
                    failed.push(i);
                }
            }
            Truth::Plugin {
                plugin,
                index,
                what: PluginEvent::Connected { .. },
                ..
            } => {
                open.remove(&(plugin.clone(), index.clone()));
            }
            Truth::Plugin {
                plugin,
                index,
                mono_ns,
                what:
                    PluginEvent::Synchronized {
                        pods,
                        containers,
                        container_ids,
                    },
            } => {
                // A truth file from before the plugin logged the ids
                // (the committed recordings): its containers are not
                // checked.
                if container_ids.is_empty() && *containers > 0 {
                    ids_unknown.insert((plugin.clone(), index.clone()));
                }
                let ids = pods
                    .iter()
                    .map(|p| p.id.clone())
                    .chain(container_ids.iter().cloned());
                if let Some(&i) = open.get(&(plugin.clone(), index.clone())) {
                    registrations[i].3.extend(ids);
                } else {
                    open.insert((plugin.clone(), index.clone()), registrations.len());
                    registrations.push((plugin.clone(), index.clone(), *mono_ns, ids.collect()));
                }
            }
            _ => {}
        }
    }
    let (mut held, mut broken) = (0, 0);
    for (i, (plugin, index, at, listed)) in registrations.iter().enumerate() {
        if failed.contains(&i) {
            continue;
        }
        for (id, _) in runs
            .iter()
            .filter(|(id, start)| *start < *at && !stopped_before(id, *at))
        {
            let delivered = |event: &str, id: &str| {
                truth.iter().any(|t| match t {
                    Truth::Nri {
                        plugin: p,
                        index: i,
                        event: Some(e),
                        pod,
                        container,
                        ..
                    } if p == plugin && i == index && e == event => {
                        let got = if event == "CREATE_CONTAINER" {
                            container.as_ref().map(|c| c.id.as_str())
                        } else {
                            pod.as_ref().map(|p| p.id.as_str())
                        };
                        got == Some(id)
                    }
                    _ => false,
                })
            };
            let told = delivered("RUN_POD_SANDBOX", id);
            // Its containers made before the registration and not going:
            // listed, or (in flight) told by their CreateContainer.
            let unknown = ids_unknown.contains(&(plugin.clone(), index.clone()));
            let containers_told = unknown
                || containers_of(id).all(|(cid, start, end)| {
                    stopped_container_before(cid, *at)
                        || *start >= *at
                        || listed.contains(cid)
                        || (*end >= *at && delivered("CREATE_CONTAINER", cid))
                });
            if (listed.contains(id) || told) && containers_told {
                held += 1;
            } else {
                broken += 1;
            }
        }
    }
    (held, broken)
}

/// The end of the last driver call that started before `t`: from then on
/// no call is in flight that a tracer could only have seen in part.
pub(crate) fn settled_after(truth: &[Truth], t: u64) -> u64 {
    truth
        .iter()
        .filter_map(|r| match r {
            Truth::Cri {
                start_mono_ns,
                end_mono_ns,
                ..
            } if *start_mono_ns < t => Some(*end_mono_ns),
            _ => None,
        })
        .max()
        .unwrap_or(t)
        .max(t)
}

/// `records` checked against the truth in `[from, to)`: every plugin
/// delivery received then is under its CRI call, and no delivery that
/// started then lacks a CRI cause. Returns the deliveries checked.
pub(crate) fn check_window(
    what: &str,
    records: &[Record],
    truth: &[Truth],
    from: u64,
    to: u64,
) -> usize {
    let mut t: Vec<Truth> = vec![Truth::Note {
        mono_ns: from,
        text: truth::OBSERVER_ATTACHED.into(),
    }];
    t.extend(
        truth
            .iter()
            .filter(|r| match r {
                Truth::Note { .. } => false,
                Truth::Nri { recv_mono_ns, .. } => *recv_mono_ns < to,
                _ => true,
            })
            .cloned(),
    );
    let within: Vec<Record> = records
        .iter()
        .filter(|r| match r {
            Record::NriUncaused(u) => u
                .span
                .call
                .start
                .is_none_or(|s| s.mono_ns >= from && s.mono_ns < to),
            _ => true,
        })
        .cloned()
        .collect();
    check_correlation(what, &within, &t).0
}

/// Deliveries said to have no CRI call in flight that began at or after
/// `since`: in the lab's scenarios every delivery has a CRI cause, so each
/// is mislabeled (a hole of the capture says `capture_loss` instead).
pub(crate) fn no_call_since(records: &[Record], since: u64) -> Vec<String> {
    records
        .iter()
        .filter_map(|r| match r {
            Record::NriUncaused(u)
                if u.no_cri_cause == NoCause::NoCriCallInFlight
                    && u.span.call.start.is_some_and(|t| t.mono_ns >= since) =>
            {
                Some(format!(
                    "{} {} at {} ns",
                    u.span.call.plugin.label(),
                    u.span.hook,
                    u.span.call.start.map_or(0, |t| t.mono_ns)
                ))
            }
            _ => None,
        })
        .collect()
}

/// The holes of a capture: (from, to) kernel times of each loss report
/// that counted more records (`lost_from`, `lost_to`; a report without
/// them fails), and the records lost in all.
pub(crate) fn holes(events: &[nri_trace::capture::CaptureEvent]) -> (u64, Vec<(u64, u64)>) {
    let mut lost = 0u64;
    let mut holes = Vec::new();
    for ev in events {
        if let nri_trace::capture::CaptureEvent::Loss(l) = ev {
            if l.lost_records > lost {
                lost = l.lost_records;
                let (Some(from), Some(to)) = (l.lost_from, l.lost_to) else {
                    panic!("a loss report without the time of its drops: {l:?}");
                };
                holes.push((from.mono_ns, to.mono_ns));
            }
        }
    }
    (lost, holes)
}

/// Deliveries labeled `capture_loss`: their CRI cause a hole may have taken.
pub(crate) fn cause_lost(records: &[Record]) -> usize {
    records
        .iter()
        .filter(|r| matches!(r, Record::NriUncaused(u) if u.no_cri_cause == NoCause::CaptureLoss))
        .count()
}
