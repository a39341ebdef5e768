//! What holds a pod below its finished teardown calls: the call still
//! running, a teardown hook that has not returned, the kernel's side
//! (`TeardownLog::explain` asks these, in this order).

use super::{
    comm_of, ids_in, Blocker, CriMethod, Explanation, HashMap, PodTeardown, Removal, SandboxEvent,
    SandboxOp, TeardownProgress, Timestamp, Verdict, GRACE_SLACK_NS,
};

/// A teardown call that has not returned (the oldest) is where the
/// teardown stands: kubelet waits on it. A StopContainer within the grace
/// period it carries is waiting, past it (and [`GRACE_SLACK_NS`]) blocked;
/// another call is blocked once past the client's deadline.
pub(super) fn pending_call(e: &mut Explanation, p: &PodTeardown, now: u64) {
    let Some((c, since)) = p
        .pending_calls
        .values()
        .filter_map(|c| Some((c, c.start?)))
        .min_by_key(|(_, t)| t.mono_ns)
    else {
        return;
    };
    let waited = now.saturating_sub(since.mono_ns);
    let method = c.method_name().unwrap_or("?").to_owned();
    let grace = c
        .stop_timeout_s
        .filter(|_| c.is(CriMethod::StopContainer))
        .map(|s| s.saturating_mul(1_000_000_000));
    let overdue = match (grace, c.deadline_ns) {
        (Some(g), _) => waited > g.saturating_add(GRACE_SLACK_NS),
        (None, Some(d)) => waited > d,
        (None, None) => false,
    };
    e.verdict = if overdue {
        Verdict::Blocked
    } else {
        Verdict::Waiting
    };
    e.progress = TeardownProgress::CallPending {
        method,
        container: c
            .container_id
            .as_ref()
            .and_then(|id| p.containers.get(id).cloned())
            .or_else(|| c.container.as_ref().map(|k| k.name.clone())),
        since,
        waited_ns: waited,
        grace_period_ns: grace,
        grace_left_ns: grace.map(|g| g.saturating_sub(waited)),
        deadline_ns: c.deadline_ns,
    };
    e.expected_next = None;
    e.waited_ns = Some(waited);
}

/// A teardown hook that has not returned: the oldest.
pub(super) fn hook_cause(p: &PodTeardown, now: u64) -> Option<Blocker> {
    let c = p
        .pending_hooks
        .values()
        .min_by_key(|c| c.start.map_or(0, |t| t.mono_ns))?;
    let start = c.start?;
    Some(Blocker::HookPending {
        plugin: c.plugin.label(),
        event: c.event.map_or("?", |e| e.as_str_name()).to_string(),
        since: start,
        waited_ns: now.saturating_sub(start.mono_ns),
        timeout_ns: c.timeout_nano.filter(|t| *t > 0).map(|t| t as u64),
    })
}

pub(super) fn container_of(p: &PodTeardown, cgroup: Option<&str>) -> String {
    cgroup
        .into_iter()
        .flat_map(ids_in)
        .find_map(|id| {
            p.containers
                .get(id)
                .cloned()
                .or_else(|| (p.sandbox_id.as_deref() == Some(id)).then(|| "(sandbox)".to_string()))
        })
        .unwrap_or_else(|| "?".into())
}

/// The first blocker the kernel events show, in kubelet's order of
/// teardown: processes that outlived SIGKILL, then unmounts that failed,
/// then paths and cgroups that could not be removed. A failure that a
/// later success on the same path undid does not count.
pub(super) fn kernel_cause(p: &PodTeardown, now: u64) -> Option<Blocker> {
    let k: Vec<&SandboxEvent> = p.kernel.iter().map(|(e, ..)| e).collect();
    // SIGKILL delivered, no exit since.
    // (the SIGKILL, its target, the target's comm and cgroup)
    let mut alive: Vec<(&SandboxEvent, u32, &Option<String>, &Option<String>)> = Vec::new();
    for (i, e) in k.iter().enumerate() {
        if let SandboxOp::Signal {
            sig: 9,
            target,
            result: 0,
            target_comm,
            target_cgroup,
        } = &e.op
        {
            let exited = k
                .iter()
                .skip(i + 1)
                .any(|x| x.tgid == *target && matches!(x.op, SandboxOp::Exit { .. }));
            let seen = alive.iter().any(|(_, t, ..)| t == target);
            if !exited && !seen {
                alive.push((e, *target, target_comm, target_cgroup));
            }
        }
    }
    if let Some(&(first, pid, target_comm, target_cgroup)) = alive.first() {
        // Sent while its sender was exiting: the kernel killing what is
        // left of a pid namespace whose init died (zap_pid_ns_processes).
        let by_kernel = k.iter().any(|x| {
            x.tgid == first.tgid
                && x.ts.mono_ns <= first.ts.mono_ns
                && matches!(x.op, SandboxOp::Exit { .. })
        });
        return Some(Blocker::AliveAfterKill {
            pid,
            comm: target_comm.clone(),
            container: container_of(p, target_cgroup.as_deref()),
            signal: first.clone(),
            by_kernel,
            ago_ns: now.saturating_sub(first.ts.mono_ns),
            alive: alive.len(),
            signals: alive.iter().map(|(e, ..)| (*e).clone()).collect(),
        });
    }
    // A failed unmount or removal (SandboxOp::failure), not redone
    // successfully later; unmounts first.
    let undone = |i: usize, path: &str| {
        k.iter()
            .skip(i + 1)
            .any(|x| x.op.path_result() == Some((path, 0)))
    };
    for (i, e) in k.iter().enumerate() {
        if let (SandboxOp::Umount { .. }, Some((path, errno))) = (&e.op, e.op.failure()) {
            if !undone(i, path) {
                return Some(Blocker::UnmountFailed {
                    path: path.to_string(),
                    errno,
                    event: (*e).clone(),
                    ago_ns: now.saturating_sub(e.ts.mono_ns),
                });
            }
        }
    }
    for (i, e) in k.iter().enumerate() {
        if let (SandboxOp::Unlink { dir, .. }, Some((path, errno))) = (&e.op, e.op.failure()) {
            if undone(i, path) {
                continue;
            }
            let what = if path.contains("/cgroup") {
                Removal::Cgroup
            } else if path.contains("netns") {
                Removal::NetnsFile
            } else if *dir {
                Removal::Directory
            } else {
                Removal::File
            };
            return Some(Blocker::RemoveFailed {
                what,
                path: path.to_string(),
                errno,
                event: (*e).clone(),
                ago_ns: now.saturating_sub(e.ts.mono_ns),
            });
        }
    }
    None
}

/// The connection of the pod's latest call, closed, and its client (by
/// comm) has not connected since (`opened`): nobody asks for the pod any
/// more (kubelet stopped) until it connects and calls again.
pub(super) fn client_gone(
    p: &PodTeardown,
    gone: &HashMap<u64, (Timestamp, Option<String>)>,
    opened: &HashMap<String, u64>,
    now: u64,
) -> Option<Blocker> {
    let (closed, client) = gone.get(&p.last_conn?)?;
    if opened
        .get(comm_of(client.as_deref()))
        .is_some_and(|t| *t > closed.mono_ns)
    {
        return None;
    }
    Some(Blocker::ClientGone {
        client: client.clone(),
        closed: *closed,
        ago_ns: now.saturating_sub(closed.mono_ns),
    })
}
