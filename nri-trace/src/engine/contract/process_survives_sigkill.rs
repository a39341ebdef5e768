//! `process-survives-sigkill`: a pod process sent SIGKILL exits within
//! [`SETTLE_NS`]. One still alive is stuck in the kernel (state D: I/O,
//! NFS, FUSE), and kubelet waits for every container to stop, so its pod
//! stays in Terminating.

use super::{
    sandbox::{kernel_finding, Cancel, Held, SandboxRules, SETTLE_NS},
    Rule,
};
use crate::{
    capture::sandbox::SandboxEvent,
    engine::findings::{Detail, Severity},
    human::duration,
};

pub const RULE: Rule = Rule {
    id: "process-survives-sigkill",
    severity: Severity::Critical,
    statement: "a pod process sent SIGKILL exits within 5 s: one still alive is stuck in the kernel (state D: I/O, NFS, FUSE) and keeps its pod in Terminating. From the sandbox probes; held 5 s of capture time",
    source: "kubernetes.io docs, Pod Lifecycle: Termination of Pods (kubelet waits for every container to stop); kubernetes/kubernetes issue 60807",
};

impl SandboxRules {
    /// `e` sent SIGKILL to `target`: held until it exits, or
    /// [`SETTLE_NS`] passes. A pod nobody knows is not judged.
    pub(super) fn sigkill_sent(
        &self,
        e: &SandboxEvent,
        target: u32,
        target_comm: Option<&String>,
        target_cgroup: Option<&str>,
    ) -> Option<Held> {
        let pod = self.pod_of(&[target_cgroup.unwrap_or("")])?;
        if self.held.iter().any(|h| h.cancel == Cancel::Exit(target)) {
            return None;
        }
        Some(Held {
            due: e.ts.mono_ns.saturating_add(SETTLE_NS),
            cancel: Cancel::Exit(target),
            violation: kernel_finding(
                e,
                RULE.id,
                pod,
                Detail::ProcessSurvivesSigkill {
                    pid: target,
                    comm: target_comm.cloned(),
                    sender_comm: e.comm.clone(),
                    sender_pid: e.tgid,
                    after_ns: SETTLE_NS,
                },
            ),
        })
    }
}

/// `pid` outlived its SIGKILL by `after_ns`.
pub(super) fn sentence(
    pid: u32,
    comm: Option<&str>,
    sender_comm: &str,
    sender_pid: u32,
    after_ns: u64,
) -> String {
    format!(
        "pid {pid}{} was still alive {} after SIGKILL from {sender_comm}[{sender_pid}]: stuck \
         in the kernel (see its state and wchan: nri-trace explain)",
        comm.map(|c| format!(" ({c})")).unwrap_or_default(),
        duration(after_ns)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        capture::sandbox::SandboxOp,
        engine::{contract::sandbox::tests::*, findings::Certainty},
    };

    #[test]
    fn sigkill_without_exit_fires_after_the_settle_time() {
        let mut r = rules();
        let mut out = vec![];
        r.on_event(&kill(10, 42), &Certainty::Certain);
        r.release(14_000_000_000, &mut out);
        assert!(out.is_empty());
        r.release(15_000_000_000, &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].rule, RULE.id);
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
}
