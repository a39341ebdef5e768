use super::*;
use crate::engine::{teardown::tests as t, test_calls::MS};

fn said(records: &[Record], pod: &str, now_ns: u64) -> (String, Vec<String>) {
    let e = t::log(records).explain(pod, now_ns).unwrap();
    (sentence(&e, None), evidence(&e))
}

#[test]
fn a_gone_pod_with_its_step_times() {
    let (s, ev) = said(&t::removed(), "ns/web", 0);
    assert_eq!(
        s,
        "ns/web is gone: RemovePodSandbox succeeded; the teardown took 103ms \
         (StopPodSandbox 35.0ms, RemovePodSandbox 3.0ms)"
    );
    assert_eq!(ev.len(), 2);
    assert!(ev[0].starts_with("CRI StopPodSandbox at "), "{ev:?}");
}

#[test]
fn a_failed_hook_and_a_failed_call() {
    let (s, ev) = said(&t::failed_hook(), "ns/web", 5000 * MS);
    assert!(
        s.contains("plugin hook 10-failer STOP_POD_SANDBOX: error 2: refused during StopPodSandbox (the CRI call still succeeded: ok)"),
        "{s}"
    );
    assert_eq!(ev[1], "NRI 10-failer STOP_POD_SANDBOX: error 2: refused");
    let (s, _) = said(&t::failed_stop(), "ns/web", 0);
    assert!(
        s.contains(
            "StopContainer of container main did not complete: the client's deadline expired after 12.00s"
        ),
        "{s}"
    );
    let (s, _) = said(&t::stopped(), "ns/web", 61_035 * MS);
    assert!(
        s.contains(
            "kubelet has not called RemovePodSandbox since (1m00s ago); kubelet removes a \
             stopped sandbox at its garbage collection, each minute"
        ),
        "{s}"
    );
}

#[test]
fn what_holds_it_below_the_cri_calls() {
    let (s, ev) = said(&t::killed(), "ns/web", 15_001 * MS);
    assert!(
        s.contains(
            "pid 4242 (cat) of container main is still alive 12.00s after SIGKILL from containerd-shim[7]"
        ),
        "{s}"
    );
    assert!(ev.iter().any(|l| l.starts_with("kernel: ")), "{ev:?}");
    let mut r = t::stuck_stop();
    r.push(t::umount(1100, libc::EBUSY));
    let (s, _) = said(&r, "ns/web", 0);
    assert!(
        s.contains(&format!("unmounting {} failed with EBUSY", t::rootfs())),
        "{s}"
    );
    let mut r = t::stuck_stop();
    r.push(t::cgroup_busy());
    assert!(said(&r, "web", 0).0.contains("removing the cgroup"));
    let (r, _) = t::hung_hook();
    let (s, _) = said(&r, "ns/web", 21_010 * MS);
    assert!(
        s.contains(
            "NRI plugin 10-hung's STOP_POD_SANDBOX hook has not returned for 20.00s (the runtime's timeout for it: 30.00s)"
        ),
        "{s}"
    );
}

#[test]
fn text_lists_steps_kernel_events_and_findings() {
    let e = t::log(&t::killed()).explain("ns/web", 15_001 * MS).unwrap();
    let mut out = Vec::new();
    text(&mut out, &e, None).unwrap();
    let out = String::from_utf8(out).unwrap();
    assert!(out.contains("  verdict: blocked"), "{out}");
    assert!(
        out.contains("  next: StopContainer again (kubelet retries)"),
        "{out}"
    );
    assert!(
        out.contains("containerd-shim[7] sent SIGKILL to pid 4242 (cat)"),
        "{out}"
    );
}

/// kubelet's StopContainer waiting out a 600 s grace period: not stuck,
/// with the time left; the call made is the evidence.
#[test]
fn a_grace_period_waited_out() {
    let (_, r) = t::stop_pending();
    let (s, ev) = said(&r, "ns/web", 31_000 * MS);
    assert_eq!(
        s,
        "ns/web is not stuck: it waits out its grace period: kubelet's StopContainer of \
         container main has run 30.00s of the 10m00s it gave the container to exit after \
         SIGTERM; the runtime sends SIGKILL in 9m30s"
    );
    assert!(
        ev.last()
            .is_some_and(|l| l.starts_with("CRI StopContainer (main) called at ")
                && l.ends_with(", timeout 10m00s, no answer since")),
        "{ev:?}"
    );
}
