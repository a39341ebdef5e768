//! Contract rules on the kernel's side of a pod's teardown (the sandbox
//! probes' records): what keeps a pod in Terminating below the CRI and NRI
//! calls. kubelet removes a pod only once no container runs, its volumes
//! are unmounted and its cgroup is gone (pod-stuck-terminating-zh.txt).
//!
//! Each finding is held [`SETTLE_NS`] of capture time: a process sent
//! SIGKILL exits within it, and a runtime retries a failed unmount or
//! removal (containerd's and kubelet's loops) within it; only what is still
//! true then is reported. Pure: capture time comes from the records.

use std::collections::HashMap;

use super::findings::{
    Certainty, Detail, Evidence, PathOp, Severity, Violation, PROCESS_SURVIVES_SIGKILL,
    TEARDOWN_REMOVE_FAILED, TEARDOWN_UNMOUNT_FAILED,
};
use crate::capture::sandbox::{ids_in, pod_uids_in, SandboxEvent, SandboxOp};

/// How long a SIGKILLed process may take to exit, and a failed unmount or
/// removal to be redone, before it is a finding.
pub const SETTLE_NS: u64 = 5_000_000_000;

/// Most pods whose container and sandbox ids are remembered (as the
/// contract checker bounds its own).
const MAX_PODS: usize = 16_384;

/// Most held findings and killed processes remembered.
const MAX_HELD: usize = 4096;

/// A finding waiting for [`SETTLE_NS`] to pass.
struct Held {
    due: u64,
    /// The pid whose exit, or the path whose successful redo, cancels it.
    cancel: Cancel,
    violation: Violation,
}

#[derive(PartialEq, Eq)]
enum Cancel {
    Exit(u32),
    Redo(String),
}

/// The pods that kernel events name, and the held findings.
#[derive(Default)]
pub struct SandboxRules {
    /// Container or sandbox id -> the pod ("namespace/name", or the
    /// sandbox id when its name is not known).
    pods: HashMap<String, String>,
    held: Vec<Held>,
    /// What has fired already: a retry loop (containerd's shim retries an
    /// unmount every 50 ms) is one finding.
    fired: std::collections::HashSet<String>,
}

/// Whether a kernel event explains something about a pod (what text
/// output shows without `--kernel all`): a signal to a pod process or the
/// exit of one (its cgroup names a container; when the process was gone
/// before its cgroup could be read, a SIGTERM or SIGKILL counts), and the
/// unmount and removal failures these rules count ([`SandboxOp::failure`]),
/// and namespace calls that failed. The rest (every cgroup controller's
/// mkdir and rmdir, os.RemoveAll's probing, the runtime's own processes
/// being signalled) is routine.
pub fn explains(e: &SandboxEvent) -> bool {
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
    pub fn learn(
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

    fn pod_of(&self, texts: &[&str]) -> Option<String> {
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
    pub fn on_event(&mut self, e: &SandboxEvent, certainty: &Certainty) {
        let finding = |rule, pod, detail| Violation {
            rule,
            severity: super::findings::rule(rule).map_or(Severity::Error, |r| r.severity),
            certainty: certainty.clone(),
            ts: e.ts,
            pod,
            plugin: None,
            detail,
            evidence: vec![Evidence::Kernel { event: e.clone() }],
        };
        let due = e.ts.mono_ns.saturating_add(SETTLE_NS);
        let held = match &e.op {
            SandboxOp::Signal {
                sig: 9,
                target,
                result: 0,
                target_comm,
                target_cgroup,
            } => {
                let Some(pod) = self.pod_of(&[target_cgroup.as_deref().unwrap_or("")]) else {
                    return;
                };
                if self.held.iter().any(|h| h.cancel == Cancel::Exit(*target)) {
                    return;
                }
                Some(Held {
                    due,
                    cancel: Cancel::Exit(*target),
                    violation: finding(
                        PROCESS_SURVIVES_SIGKILL,
                        Some(pod),
                        Detail::ProcessSurvivesSigkill {
                            pid: *target,
                            comm: target_comm.clone(),
                            sender_comm: e.comm.clone(),
                            sender_pid: e.tgid,
                            after_ns: SETTLE_NS,
                        },
                    ),
                })
            }
            SandboxOp::Exit { .. } => {
                self.held.retain(|h| h.cancel != Cancel::Exit(e.tgid));
                None
            }
            SandboxOp::Umount { .. } | SandboxOp::Unlink { .. } => {
                if let Some((path, 0)) = e.op.path_result() {
                    self.held
                        .retain(|h| h.cancel != Cancel::Redo(path.to_string()));
                    return;
                }
                let Some((path, errno)) = e.op.failure() else {
                    return;
                };
                let Some(pod) = self.pod_of(&[path]) else {
                    return;
                };
                let cancel = Cancel::Redo(path.to_string());
                if self.held.iter().any(|h| h.cancel == cancel) {
                    return;
                }
                let umount = matches!(e.op, SandboxOp::Umount { .. });
                let (rule, op) = if umount {
                    (TEARDOWN_UNMOUNT_FAILED, PathOp::Unmount)
                } else {
                    (TEARDOWN_REMOVE_FAILED, PathOp::Remove)
                };
                Some(Held {
                    due,
                    cancel,
                    violation: finding(
                        rule,
                        Some(pod),
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
            _ => None,
        };
        if let Some(h) = held {
            if self.held.len() < MAX_HELD {
                self.held.push(h);
            }
        }
    }

    /// Report the held findings due by capture time `now`.
    pub fn release(&mut self, now: u64, out: &mut Vec<Violation>) {
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
    pub fn finish(&mut self) {
        self.held.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::Timestamp;

    const CID: &str = "c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1";

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

    fn ev(s: u64, tgid: u32, op: SandboxOp) -> SandboxEvent {
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

    fn kill(s: u64, target: u32) -> SandboxEvent {
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

    fn rules() -> SandboxRules {
        let mut r = SandboxRules::default();
        r.learn(Some("sb"), Some(CID), Some(UID), Some("ns/web".into()));
        r
    }

    const UID: &str = "0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b";

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
        assert_eq!(out[0].rule, TEARDOWN_UNMOUNT_FAILED);
        assert_eq!(out[0].pod.as_deref(), Some("ns/web"));
        assert!(
            matches!(&out[0].detail, Detail::TeardownPathFailed { path: p, .. } if *p == path),
            "{:?}",
            out[0].detail
        );
    }

    #[test]
    fn sigkill_without_exit_fires_after_the_settle_time() {
        let mut r = rules();
        let mut out = vec![];
        r.on_event(&kill(10, 42), &Certainty::Certain);
        r.release(14_000_000_000, &mut out);
        assert!(out.is_empty());
        r.release(15_000_000_000, &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].rule, PROCESS_SURVIVES_SIGKILL);
        assert_eq!(out[0].pod.as_deref(), Some("ns/web"));
        assert!(
            matches!(
                &out[0].detail,
                Detail::ProcessSurvivesSigkill { pid: 42, comm: Some(c), .. } if c == "cat"
            ),
            "{:?}",
            out[0].detail
        );
        // An exit in time cancels it; a pod nobody knows is not judged.
        let mut r = rules();
        r.on_event(&kill(10, 42), &Certainty::Certain);
        r.on_event(
            &ev(11, 42, SandboxOp::Exit { status: Some(9) }),
            &Certainty::Certain,
        );
        let mut out = vec![];
        r.release(u64::MAX, &mut out);
        assert!(out.is_empty());
        let mut r = SandboxRules::default();
        r.on_event(&kill(10, 42), &Certainty::Certain);
        r.release(u64::MAX, &mut out);
        assert!(out.is_empty());
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
        assert_eq!(out[0].rule, TEARDOWN_UNMOUNT_FAILED);
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
        assert_eq!(out[0].rule, TEARDOWN_REMOVE_FAILED);
    }
}
