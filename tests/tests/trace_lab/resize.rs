//! A pod resized in place (`pod-resize`, lab/src/scenario/pod_resize.rs):
//! the CRI UpdatePodSandboxResources that k8s.io/cri-api's own Go client
//! makes (cri-api v0.36.3; nri-trace decodes it with its own prost type,
//! decode/cri/cri_api.rs, as k8s-cri 0.11 lacks it), and the NRI
//! UpdatePodSandbox and PostUpdatePodSandbox that containerd 2.3 delivers
//! inside it (internal/cri/server/sandbox_update_resources.go). Only on
//! containerd 2.3: 2.2.9's handler answers "not implemented yet" (the
//! same file), and the other runtimes of the lab were not tried
//! (docs/lab.md, "The runtime matrix").

use nri_trace::engine::CriSpan;

use super::*;

#[test]
fn trace_pod_resize_hooks_under_their_cri_call() {
    let Some((out, records)) = traced_on(None, "pod-resize") else {
        return;
    };
    let (_, cri) = check_against_truth("pod-resize", &out, &records);
    // The Go client opens its own connection while traced: every :path
    // on the wire.
    assert_eq!(cri.known, cri.compared, "{}", cri.line());
    let (checked, hooks) = check_correlation("pod-resize", &out);
    assert!(checked > 0 && hooks >= checked);
    let resize: Vec<&CriSpan> = records
        .iter()
        .filter_map(|r| match r {
            Record::CriSpan(s) if s.call.method_name() == Some("UpdatePodSandboxResources") => {
                Some(s)
            }
            _ => None,
        })
        .collect();
    assert_eq!(resize.len(), 1, "{resize:?}");
    let s = resize[0];
    assert_eq!(s.call.outcome, CriOutcome::Ok, "{s:?}");
    assert_eq!(s.call.identified, Identified::Known, "{s:?}");
    let hooks: Vec<(String, String)> = s
        .hooks
        .iter()
        .map(|h| (h.call.plugin.label(), h.hook.to_string()))
        .collect();
    assert_eq!(
        hooks,
        [
            ("10-resize".to_string(), "UPDATE_POD_SANDBOX".to_string()),
            (
                "10-resize".to_string(),
                "POST_UPDATE_POD_SANDBOX".to_string()
            ),
        ],
        "{s:?}"
    );
    // The request's sandbox is the deliveries' pod.
    for h in &s.hooks {
        assert_eq!(
            s.call.sandbox_id.as_deref(),
            h.call.pod.as_ref().map(|p| p.id.as_str()),
            "{s:?}"
        );
    }
    assert_eq!(findings(&records), vec![]);
}
