//! `teardown-unmount-failed`, `teardown-remove-failed`: a pod's paths can
//! be unmounted and removed. A failure not redone successfully within
//! [`SETTLE_NS`] keeps the pod in Terminating: kubelet waits for its
//! volumes to be unmounted and its cgroup to go. One check finds both: an
//! unmount or unlink of a path a known pod's ids name, failed.

use super::{
    sandbox::{kernel_finding, Cancel, Held, SandboxRules, SETTLE_NS},
    Rule,
};
use crate::{
    capture::sandbox::{errno_text, SandboxEvent, SandboxOp},
    engine::findings::{Detail, PathOp, Severity},
    human::duration,
};

pub const UNMOUNT: Rule = Rule {
    id: "teardown-unmount-failed",
    severity: Severity::Error,
    statement: "an unmount of a pod's path (container rootfs, volume, netns) succeeds, or is redone successfully within 5 s; one finding per path (the shim retries every 50 ms). EINVAL (not mounted) and ENOENT do not count",
    source: "kubernetes.io docs, Pod Lifecycle: Termination of Pods; kubernetes/kubernetes issue 60807 (device or resource busy)",
};

pub const REMOVE: Rule = Rule {
    id: "teardown-remove-failed",
    severity: Severity::Error,
    statement: "a pod's directories, netns file and cgroups can be removed: the rmdir or unlink succeeds, or is redone successfully within 5 s. ENOENT, EISDIR and (except for cgroups) ENOTEMPTY are os.RemoveAll's normal probing and do not count",
    source: "kubernetes.io docs, Pod Lifecycle: Termination of Pods (kubelet waits for the pod cgroup to go); kubernetes/kubernetes issue 60807",
};

impl SandboxRules {
    /// An unmount or unlink: a success cancels the held failure of its
    /// path; a failure of a known pod's path is held until redone, or
    /// [`SETTLE_NS`] passes.
    pub(super) fn path_op(&mut self, e: &SandboxEvent) -> Option<Held> {
        if let Some((path, 0)) = e.op.path_result() {
            self.held
                .retain(|h| h.cancel != Cancel::Redo(path.to_string()));
            return None;
        }
        let (path, errno) = e.op.failure()?;
        let pod = self.pod_of(&[path])?;
        let cancel = Cancel::Redo(path.to_string());
        if self.held.iter().any(|h| h.cancel == cancel) {
            return None;
        }
        let (rule, op) = if matches!(e.op, SandboxOp::Umount { .. }) {
            (UNMOUNT.id, PathOp::Unmount)
        } else {
            (REMOVE.id, PathOp::Remove)
        };
        Some(Held {
            due: e.ts.mono_ns.saturating_add(SETTLE_NS),
            cancel,
            violation: kernel_finding(
                e,
                rule,
                pod,
                Detail::TeardownPathFailed {
                    op,
                    path: path.to_owned(),
                    errno,
                    comm: e.comm.clone(),
                    pid: e.tgid,
                    within_ns: SETTLE_NS,
                },
            ),
        })
    }
}

/// `op` of `path` by `comm` failed with `errno`, not redone in `within_ns`.
pub(super) fn sentence(
    op: PathOp,
    path: &str,
    errno: i32,
    comm: &str,
    pid: u32,
    within_ns: u64,
) -> String {
    format!(
        "{} {path} failed with {} ({comm}[{pid}]) and was not redone within {}",
        match op {
            PathOp::Unmount => "unmounting",
            PathOp::Remove => "removing",
        },
        errno_text(errno),
        duration(within_ns)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{contract::sandbox::tests::*, findings::Certainty};

    /// kubelet's own unmount of the pod's volume names the pod by uid.
    #[test]
    fn kubelet_volume_unmount_failure_names_the_pod() {
        let path = format!("/var/lib/kubelet/pods/{UID}/volumes/kubernetes.io~empty-dir/data");
        let mut r = rules();
        r.on_event(
            &ev(
                1,
                8,
                SandboxOp::Umount {
                    path: path.clone(),
                    flags: 0,
                    errno: libc::EBUSY,
                },
            ),
            &Certainty::Certain,
        );
        let mut out = vec![];
        r.release(u64::MAX, &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].rule, UNMOUNT.id);
        assert_eq!(out[0].pod.as_deref(), Some("ns/web"));
        assert!(
            matches!(&out[0].detail, Detail::TeardownPathFailed { path: p, .. } if *p == path),
            "{:?}",
            out[0].detail
        );
    }

    #[test]
    fn failed_unmount_fires_unless_redone() {
        let path = format!("/run/containerd/io.containerd.runtime.v2.task/k8s.io/{CID}/rootfs");
        let um = |s, errno| {
            ev(
                s,
                8,
                SandboxOp::Umount {
                    path: path.clone(),
                    flags: 0,
                    errno,
                },
            )
        };
        let mut r = rules();
        r.on_event(&um(1, libc::EBUSY), &Certainty::Certain);
        r.on_event(&um(2, libc::EBUSY), &Certainty::Certain);
        let mut out = vec![];
        r.release(7_000_000_000, &mut out);
        // The retry loop goes on: still one finding for the path.
        r.on_event(&um(8, libc::EBUSY), &Certainty::Certain);
        r.release(u64::MAX, &mut out);
        assert_eq!(out.len(), 1, "one finding per path");
        assert_eq!(out[0].rule, UNMOUNT.id);
        assert!(
            matches!(
                out[0].detail,
                Detail::TeardownPathFailed {
                    op: PathOp::Unmount,
                    errno: libc::EBUSY,
                    ..
                }
            ),
            "{:?}",
            out[0].detail
        );
        let mut r = rules();
        r.on_event(&um(1, libc::EBUSY), &Certainty::Certain);
        r.on_event(&um(3, 0), &Certainty::Certain);
        let mut out = vec![];
        r.release(u64::MAX, &mut out);
        assert!(out.is_empty());
        // Not mounted: benign.
        let mut r = rules();
        r.on_event(&um(1, libc::EINVAL), &Certainty::Certain);
        r.release(u64::MAX, &mut out);
        assert!(out.is_empty());
    }

    #[test]
    fn failed_cgroup_removal_fires() {
        let mut r = rules();
        let e = ev(
            1,
            9,
            SandboxOp::Unlink {
                path: format!("/sys/fs/cgroup/memory/k8s.io/{CID}"),
                dir: true,
                errno: libc::EBUSY,
            },
        );
        r.on_event(&e, &Certainty::Certain);
        let mut out = vec![];
        r.release(u64::MAX, &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].rule, REMOVE.id);
    }
}
