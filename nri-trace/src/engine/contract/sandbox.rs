//! The state the kernel's rules share (the sandbox probes' records): what
//! keeps a pod in Terminating below the CRI and NRI calls. kubelet removes
//! a pod only once no container runs, its volumes are unmounted and its
//! cgroup is gone (kubernetes.io, Pod Lifecycle: Termination of Pods). The
//! rules are `process_survives_sigkill` and `teardown_path_failed`.
//!
//! Each finding is held [`SETTLE_NS`] of capture time: a process sent
//! SIGKILL exits within it, and a runtime retries a failed unmount or
//! removal (containerd's and kubelet's loops) within it; only what is still
//! true then is reported. Pure: capture time comes from the records.

use std::collections::HashMap;

use super::rules;
use crate::{
    capture::sandbox::{ids_in, pod_uids_in, SandboxEvent, SandboxOp},
    engine::findings::{Certainty, Detail, Evidence, Violation},
};

/// How long a SIGKILLed process may take to exit, and a failed unmount or
/// removal to be redone, before it is a finding.
pub const SETTLE_NS: u64 = 5_000_000_000;

/// Most pods whose container and sandbox ids are remembered (as the
/// contract checker bounds its own).
const MAX_PODS: usize = 16_384;

/// Most held findings and killed processes remembered.
const MAX_HELD: usize = 4096;

/// A finding waiting for [`SETTLE_NS`] to pass.
pub(super) struct Held {
    pub(super) due: u64,
    /// The pid whose exit, or the path whose successful redo, cancels it.
    pub(super) cancel: Cancel,
    pub(super) violation: Violation,
}

#[derive(PartialEq, Eq)]
pub(super) enum Cancel {
    Exit(u32),
    Redo(String),
}

/// The pods that kernel events name, and the held findings.
#[derive(Default)]
pub(crate) struct SandboxRules {
    /// Container or sandbox id -> the pod ("namespace/name", or the
    /// sandbox id when its name is not known).
    pods: HashMap<String, String>,
    pub(super) held: Vec<Held>,
    /// What has fired already: a retry loop (containerd's shim retries an
    /// unmount every 50 ms) is one finding.
    fired: std::collections::HashSet<String>,
}

/// A finding of rule `rule` about `pod`, shown by kernel event `e` (its
/// certainty is the caller's).
pub(super) fn kernel_finding(
    e: &SandboxEvent,
    rule: &'static str,
    pod: String,
    detail: Detail,
) -> Violation {
    Violation {
        rule,
        severity: rules::severity(rule),
        certainty: Certainty::Certain,
        ts: e.ts,
        pod: Some(pod),
        plugin: None,
        detail,
        evidence: vec![Evidence::Kernel { event: e.clone() }],
    }
}

/// Whether a kernel event explains something about a pod (what text
/// output shows without `--kernel all`): a signal to a pod process or the
/// exit of one (its cgroup names a container; when the process was gone
/// before its cgroup could be read, a SIGTERM or SIGKILL counts), and the
/// unmount and removal failures these rules count ([`SandboxOp::failure`]),
/// and namespace calls that failed. The rest (every cgroup controller's
/// mkdir and rmdir, os.RemoveAll's probing, the runtime's own processes
/// being signalled) is routine.
pub(crate) fn explains(e: &SandboxEvent) -> bool {
    let in_pod = |cgroup: &Option<String>| cgroup.as_deref().map(|c| ids_in(c).next().is_some());
    match &e.op {
        SandboxOp::Signal {
            sig, target_cgroup, ..
        } => in_pod(target_cgroup).unwrap_or(matches!(*sig, libc::SIGTERM | libc::SIGKILL)),
        SandboxOp::Exit { .. } => in_pod(&e.cgroup).unwrap_or(true),
        SandboxOp::NsBind { errno, .. }
        | SandboxOp::Unshare { errno, .. }
        | SandboxOp::Setns { errno, .. } => *errno != 0,
        op => op.failure().is_some(),
    }
}

impl SandboxRules {
    /// A pod's ids, from its CRI calls (its uid names kubelet's paths).
    pub(crate) fn learn(
        &mut self,
        sandbox_id: Option<&str>,
        container_id: Option<&str>,
        uid: Option<&str>,
        pod: Option<String>,
    ) {
        let Some(sb) = sandbox_id else { return };
        if self.pods.len() >= MAX_PODS {
            self.pods.clear();
        }
        let label = pod
            .or_else(|| self.pods.get(sb).cloned())
            .unwrap_or_else(|| sb.to_string());
        self.pods.insert(sb.to_string(), label.clone());
        if let Some(u) = uid.filter(|u| !u.is_empty()) {
            self.pods.insert(u.to_string(), label.clone());
        }
        if let Some(c) = container_id {
            self.pods.insert(c.to_string(), label);
        }
    }

    pub(super) fn pod_of(&self, texts: &[&str]) -> Option<String> {
        texts
            .iter()
            .flat_map(|t| ids_in(t))
            .find_map(|id| self.pods.get(id).cloned())
            .or_else(|| {
                texts
                    .iter()
                    .flat_map(|t| pod_uids_in(t))
                    .find_map(|uid| self.pods.get(&uid).cloned())
            })
    }

    /// Take one kernel event (capture time `now`); `certainty` of the
    /// findings it leads to.
    pub(crate) fn on_event(&mut self, e: &SandboxEvent, certainty: &Certainty) {
        let held = match &e.op {
            SandboxOp::Signal {
                sig: 9,
                target,
                result: 0,
                target_comm,
                target_cgroup,
            } => self.sigkill_sent(e, *target, target_comm.as_ref(), target_cgroup.as_deref()),
            SandboxOp::Exit { .. } => {
                self.held.retain(|h| h.cancel != Cancel::Exit(e.tgid));
                None
            }
            SandboxOp::Umount { .. } | SandboxOp::Unlink { .. } => self.path_op(e),
            _ => None,
        };
        if let Some(mut h) = held {
            h.violation.certainty = certainty.clone();
            if self.held.len() < MAX_HELD {
                self.held.push(h);
            }
        }
    }

    /// Report the held findings due by capture time `now`.
    pub(crate) fn release(&mut self, now: u64, out: &mut Vec<Violation>) {
        if self.held.iter().all(|h| h.due > now) {
            return;
        }
        let (due, keep): (Vec<Held>, Vec<Held>) = std::mem::take(&mut self.held)
            .into_iter()
            .partition(|h| h.due <= now);
        self.held = keep;
        if self.fired.len() >= MAX_HELD {
            self.fired.clear();
        }
        let fired = &mut self.fired;
        let due: Vec<Held> = due
            .into_iter()
            .filter(|h| {
                fired.insert(match &h.cancel {
                    Cancel::Exit(pid) => format!("pid {pid}"),
                    Cancel::Redo(path) => path.clone(),
                })
            })
            .collect();
        // In the order they were seen (a stable sort keeps equal times in
        // arrival order).
        let mut due: Vec<Violation> = due.into_iter().map(|h| h.violation).collect();
        due.sort_by_key(|v| v.ts.mono_ns);
        out.extend(due);
    }

    /// The stream ended: held findings whose time has not come are dropped
    /// (the capture did not see long enough to tell).
    pub(crate) fn finish(&mut self) {
        self.held.clear();
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::basic_types::Timestamp;

    pub(in crate::engine::contract) const CID: &str =
        "c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1";

    #[test]
    fn what_explains_something() {
        let signal = |sig, cgroup: Option<String>| SandboxOp::Signal {
            sig,
            target: 9,
            target_comm: None,
            target_cgroup: cgroup,
            result: 0,
        };
        let pod = Some(format!("/k8s.io/{CID}"));
        let runtime = Some("/system.slice/containerd.service".to_string());
        assert!(explains(&ev(1, 7, signal(libc::SIGTERM, pod.clone()))));
        assert!(explains(&ev(1, 7, signal(libc::SIGCHLD, pod.clone()))));
        // Gone before its cgroup was read: a SIGKILL counts, a SIGCHLD not.
        assert!(explains(&ev(1, 7, signal(libc::SIGKILL, None))));
        assert!(!explains(&ev(1, 7, signal(libc::SIGCHLD, None))));
        // The runtime's own processes are not the pod's.
        assert!(!explains(&ev(1, 7, signal(libc::SIGTERM, runtime.clone()))));
        let mut exit = ev(1, 9, SandboxOp::Exit { status: Some(9) });
        exit.cgroup = runtime;
        assert!(!explains(&exit));
        exit.cgroup = pod;
        assert!(explains(&exit));
        let rmdir = |errno| SandboxOp::Unlink {
            path: format!("/sys/fs/cgroup/k8s.io/{CID}"),
            dir: true,
            errno,
        };
        assert!(explains(&ev(1, 7, rmdir(libc::EBUSY))));
        assert!(!explains(&ev(1, 7, rmdir(0))));
    }

    pub(in crate::engine::contract) fn ev(s: u64, tgid: u32, op: SandboxOp) -> SandboxEvent {
        SandboxEvent {
            ts: Timestamp {
                mono_ns: s * 1_000_000_000,
                wall_ns: 0,
            },
            tgid,
            tid: tgid,
            comm: "containerd-shim".into(),
            cgroup_id: 0,
            cgroup: None,
            op,
            truncated: false,
        }
    }

    pub(in crate::engine::contract) fn kill(s: u64, target: u32) -> SandboxEvent {
        ev(
            s,
            7,
            SandboxOp::Signal {
                sig: 9,
                target,
                target_comm: Some("cat".into()),
                target_cgroup: Some(format!("/k8s.io/{CID}")),
                result: 0,
            },
        )
    }

    pub(in crate::engine::contract) fn rules() -> SandboxRules {
        let mut r = SandboxRules::default();
        r.learn(Some("sb"), Some(CID), Some(UID), Some("ns/web".into()));
        r
    }

    pub(in crate::engine::contract) const UID: &str = "0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b";
}
