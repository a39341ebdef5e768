//! The NRI project's own Go stub as nri-trace's peer: go-nri-plugin
//! (lab/go-nri-plugin/) on the v0.12.2 stub (10-go12) and on the v0.8.0
//! stub (20-go08), both registered before nri-trace attaches
//! (`go-plugins`). Each plugin writes what crossed its socket, so every
//! delivery nri-trace decoded is compared with the plugins' own logs, and
//! the methods on the wire are checked per runtime: on containerd 2.3
//! (NRI 0.12) go12 gets a method per event and go08 shows the fallback
//! (its first per-event call answered Unimplemented, then StateChange);
//! on containerd 1.7 and 2.1 both get StateChange (and CreateContainer,
//! UpdateContainer, StopContainer) only. One scenario run per runtime.

use nri_trace::model::{IdentitySource, NriCall, NriOutcome};
use nri_trace_lab::scenario::{self, GO_PLUGINS};

use super::*;

/// go-nri-plugin needs Go (`go` on PATH or /usr/local/go/bin/go, as
/// lab/go-nri-plugin.sh looks) and the Go module proxy for its first
/// build: under CI a missing Go fails the test, elsewhere it skips.
fn go_guard(test: &str) -> bool {
    let on_path = std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("go").is_file()));
    if on_path || Path::new("/usr/local/go/bin/go").is_file() {
        return true;
    }
    let why = "no Go toolchain (go on PATH or /usr/local/go/bin/go) for go-nri-plugin";
    assert!(!lab_trace::ci(), "{test}: {why}");
    eprintln!("skipping {test}: {why}");
    false
}

/// On the runtime of NRI_TRACE_LAB_RUNTIME (containerd 2.3 when unset, as
/// in CI; NRI 0.12.0): the per-event methods to the v0.12.2 stub; the
/// v0.8.0 stub's refusal and the StateChange fallback.
#[test]
fn trace_go_plugins_methods_and_fallback() {
    check_go_plugins(None);
}

/// containerd 1.7 (NRI 0.6.1): the v0.12.2 stub's plugin gets StateChange.
#[test]
fn ctrd17_trace_go_plugins_every_delivery_matched() {
    check_go_plugins(Some(Runtime::Containerd17));
}

/// containerd 2.1 (NRI 0.8.0): StateChange to both stubs.
#[test]
fn ctrd21_trace_go_plugins_every_delivery_matched() {
    check_go_plugins(Some(Runtime::Containerd21));
}

/// The event calls nri-trace decoded for plugin `label`, in the order
/// they began.
fn event_calls<'a>(records: &'a [Record], label: &str) -> Vec<&'a NriCall> {
    let mut v: Vec<&NriCall> = nri_check::calls(records)
        .into_iter()
        .filter(|c| c.event.is_some() && c.plugin.label() == label)
        .collect();
    v.sort_by_key(|c| c.start.map(|t| t.mono_ns));
    v
}

fn check_go_plugins(rt: Option<Runtime>) {
    let scenario = "go-plugins";
    if !go_guard(scenario) {
        return;
    }
    let Some((out, records)) = traced_on(rt, scenario) else {
        return;
    };
    // Every delivery the plugins logged after the attach, as they logged
    // it (plugin, method, event, pod, container, outcome, time), and every
    // CRI call of the driver.
    let (truth, cri) = check_against_truth(scenario, &out, &records);
    // Every delivery under its CRI call, none without a cause (on the
    // records already replayed).
    let (checked, hooks) = trace_check::check_correlation(scenario, &records, &truth);
    eprintln!("{scenario}: {checked} deliveries under their CRI calls ({hooks} hooks); {cri:?}");
    assert_eq!(findings(&records), vec![], "{scenario}: no finding");
    // Named by their flags (-idx, -name): they registered before the
    // attach.
    let named = trace_check::hook_plugins(&records);
    let want: Vec<String> = GO_PLUGINS
        .iter()
        .map(|(n, i, _)| format!("{i}-{n}"))
        .collect();
    assert_eq!(
        named.keys().cloned().collect::<Vec<_>>(),
        want,
        "{scenario}: {named:?}"
    );
    assert!(
        named.values().all(|s| *s == IdentitySource::Inferred),
        "{scenario}: {named:?}"
    );

    let per_event = scenario::per_event_methods_of(&truth, "go12").expect("go12 configured");
    assert_eq!(
        per_event,
        runtime_of(rt) == Runtime::Containerd23,
        "{scenario}: per-event methods on {}",
        runtime_of(rt).name()
    );
    let summary = json_lines(&out, "hook_summary");
    let row = |label: &str, hook: &str| {
        summary
            .iter()
            .find(|s| s["plugin"] == label && s["hook"] == hook)
            .unwrap_or_else(|| panic!("no hook_summary row {label} {hook}: {summary:?}"))
            .clone()
    };
    let pods = 2;
    for (name, idx, stub) in GO_PLUGINS {
        let label = format!("{idx}-{name}");
        let calls = event_calls(&records, &label);
        let old_stub = stub == "v0.8.0";
        let fallback = per_event && old_stub;
        let refusals: Vec<&&NriCall> = calls.iter().filter(|c| c.is_fallback_refusal()).collect();
        let rest: Vec<&NriCall> = if fallback {
            // The first per-event call refused, then StateChange for the
            // same event and pod, under the same CRI RunPodSandbox.
            assert_eq!(refusals.len(), 1, "{label}: {calls:#?}");
            let (refused, next) = (calls[0], calls[1]);
            assert!(refused.is_fallback_refusal(), "{label}: {refused:#?}");
            assert_eq!(refused.method_name(), Some("RunPodSandbox"));
            assert!(
                matches!(&refused.outcome, NriOutcome::Error { code: 12, .. }),
                "{refused:#?}"
            );
            assert!(
                refused.summary.contains(
                    "plugin predates per-event methods: runtime falls back to StateChange"
                ),
                "{}",
                refused.summary
            );
            assert_eq!(next.method_name(), Some("StateChange"));
            assert_eq!(next.event, refused.event);
            assert_eq!(
                next.pod.as_ref().map(|p| &p.id),
                refused.pod.as_ref().map(|p| &p.id)
            );
            let span = records
                .iter()
                .find_map(|r| match r {
                    Record::CriSpan(s) if s.hooks.iter().any(|h| h.call == *refused) => Some(s),
                    _ => None,
                })
                .expect("the refusal under a CRI span");
            assert_eq!(span.call.method_name(), Some("RunPodSandbox"));
            assert!(
                span.hooks.iter().any(|h| h.call == *next),
                "{label}: the StateChange fallback is not under the refusal's RunPodSandbox"
            );
            calls[1..].to_vec()
        } else {
            assert_eq!(refusals.len(), 0, "{label}: {refusals:#?}");
            calls.clone()
        };
        for c in &rest {
            let event = c.event.expect("an event call").as_str_name();
            let want = scenario::event_method(event, per_event && !old_stub);
            assert_eq!(
                c.method_name(),
                Some(want.as_str()),
                "{label} ({stub} stub) on {}: {event}",
                runtime_of(rt).name()
            );
            assert!(c.outcome.is_ok(), "{label}: {c:#?}");
        }
        let mut methods: Vec<&str> = calls.iter().filter_map(|c| c.method_name()).collect();
        methods.sort_unstable();
        methods.dedup();
        eprintln!(
            "{scenario} on {}: {label} ({stub} stub): {} event calls, {} refused; methods {methods:?}",
            runtime_of(rt).name(),
            calls.len(),
            refusals.len()
        );
        if per_event && !old_stub {
            for m in [
                "RunPodSandbox",
                "StopPodSandbox",
                "RemovePodSandbox",
                "CreateContainer",
                "PostCreateContainer",
                "StartContainer",
                "PostStartContainer",
                "StopContainer",
                "RemoveContainer",
            ] {
                assert!(methods.contains(&m), "{label}: no {m} in {methods:?}");
            }
        }
        let state_change = methods.contains(&"StateChange");
        assert_eq!(state_change, !per_event || old_stub, "{label}: {methods:?}");
        // The latency table: the refusal counted as the fallback, no
        // error anywhere.
        for s in &summary {
            if s["plugin"] != label.as_str() {
                continue;
            }
            let fallbacks = u64::from(fallback && s["hook"] == "RUN_POD_SANDBOX");
            assert_eq!(s["errors"], 0, "{s}");
            assert_eq!(s["fallbacks"], fallbacks, "{s}");
        }
        let run = row(&label, "RUN_POD_SANDBOX");
        assert_eq!(run["calls"], pods + u64::from(fallback), "{run}");
        eprintln!("{scenario}: {label} RUN_POD_SANDBOX hook_summary {run}");
    }
}
