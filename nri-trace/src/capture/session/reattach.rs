//! Following a runtime across restarts: a traced socket whose listener
//! exited is looked for again, and its new listener traced as the first.

use std::{
    collections::{HashMap, HashSet},
    path::PathBuf,
};

use super::{
    attach::{attach_listeners, attach_socketpairs},
    clock::monotonic_ns,
    follower::Follower,
};
use crate::capture::{
    backend::CaptureBackend,
    tracker::{BoundListener, ConnTracker},
    CaptureEvent, ProcessEvent,
};

/// How the connections of a new listener are completed (see [`Resolver`]).
pub(super) struct PeerRules<'a> {
    pub(super) peer_env: &'a [String],
    pub(super) follower: Option<&'a mut Follower>,
    pub(super) no_follow: &'a mut HashSet<(u32, i32)>,
}

/// How often a socket whose listener exited is looked for again.
const REATTACH_SCAN_NS: u64 = 100_000_000;
/// Once one of a runtime's sockets is served again, the others are looked
/// for at every drain (for this long): the runtime is starting, and a
/// plugin that connects before its socket is traced again shows up
/// without its registration (seen in CI: containerd served nri.sock a few
/// ms after containerd.sock, and a plugin connected within the 100 ms).
const REATTACH_FAST_NS: u64 = 5_000_000_000;

/// Following a runtime across restarts: when the process listening on a
/// traced socket exits, the socket is looked for again until a process
/// listens on it, which is then traced as the first one was.
pub(super) struct Reattach {
    /// Listener pid -> the traced socket paths it listens on.
    pub(super) listener_paths: HashMap<u32, Vec<PathBuf>>,
    /// Paths whose listener exited and none is found yet.
    pub(super) lost: Vec<PathBuf>,
    pub(super) next_scan_ns: u64,
    /// Until when lost sockets are looked for at every drain.
    pub(super) fast_until_ns: u64,
    pub(super) existing_socketpair_env: Option<String>,
    pub(super) no_follow_sockets: Vec<PathBuf>,
}

impl Reattach {
    /// While a runtime is down or coming back (a socket lost, or found
    /// again less than [`REATTACH_FAST_NS`] ago) its sockets are looked
    /// for at every drain: the drain keeps its fast clock (drain.rs
    /// `Idle`).
    pub(super) fn keeps_reader_awake(&self, now: u64) -> bool {
        !self.lost.is_empty() || now < self.fast_until_ns
    }

    /// Note the listeners among the exited processes of `out`, and
    /// report each path they served as gone, right after the exit (before
    /// a new listener's `Listening` in the same batch).
    pub(super) fn on_exits(&mut self, out: &mut Vec<CaptureEvent>) {
        if !out
            .iter()
            .any(|ev| matches!(ev, CaptureEvent::Process(ProcessEvent::Exit { tgid, .. }) if self.listener_paths.contains_key(tgid)))
        {
            return;
        }
        for ev in std::mem::take(out) {
            let exited = match &ev {
                CaptureEvent::Process(ProcessEvent::Exit { ts, tgid }) => Some((*ts, *tgid)),
                _ => None,
            };
            out.push(ev);
            let Some((ts, tgid)) = exited else { continue };
            let Some(paths) = self.listener_paths.remove(&tgid) else {
                continue;
            };
            for path in paths {
                log::info!("listener of {} (pid {tgid}) exited", path.display());
                out.push(CaptureEvent::Process(ProcessEvent::ListenerGone {
                    ts,
                    tgid,
                    path: path.clone(),
                }));
                // Looked for again, unless another process serves it.
                let served = self.listener_paths.values().any(|ps| ps.contains(&path));
                if !served && !self.lost.contains(&path) {
                    self.lost.push(path);
                }
            }
        }
    }

    /// Note the listeners the kernel started tracking at their bind (see
    /// [`ConnTracker::take_bound`]): served again, as a scan would find;
    /// their pids.
    pub(super) fn on_bound(
        &mut self,
        bound: Vec<BoundListener>,
        backend: &mut dyn CaptureBackend,
        no_follow: &mut HashSet<(u32, i32)>,
    ) -> Vec<u32> {
        let mut new_pids = Vec::new();
        for b in bound {
            log::info!("{} is bound again, by pid {}", b.path.display(), b.tgid);
            // The kernel tracks it already; this keeps the backend's own
            // view of its filter in step.
            if let Err(e) = backend.track_process(b.tgid) {
                log::warn!("tracking pid {}: {e}", b.tgid);
            }
            self.lost.retain(|p| *p != b.path);
            self.note_listener(b.tgid, b.fd, b.path, no_follow);
            new_pids.push(b.tgid);
        }
        new_pids
    }

    /// `tgid` serves `path` on `fd` from now on: remembered for its exit,
    /// and its accepts not followed when the path is not to be.
    fn note_listener(
        &mut self,
        tgid: u32,
        fd: i32,
        path: PathBuf,
        no_follow: &mut HashSet<(u32, i32)>,
    ) {
        if self.no_follow_sockets.contains(&path) {
            no_follow.insert((tgid, fd));
        }
        let paths = self.listener_paths.entry(tgid).or_default();
        if !paths.contains(&path) {
            paths.push(path);
        }
    }

    /// Trace the lost sockets' new listeners: `bound_pids` (those the
    /// kernel saw bind, see `on_bound`), and those a scan of /proc finds
    /// (at most every [`REATTACH_SCAN_NS`]; for a path bound in a way the
    /// kernel program does not match, e.g. relative to another directory).
    pub(super) fn scan(
        &mut self,
        now: u64,
        bound_pids: Vec<u32>,
        backend: &mut dyn CaptureBackend,
        tracker: &mut ConnTracker,
        peers: PeerRules<'_>,
        out: &mut Vec<CaptureEvent>,
    ) {
        let PeerRules {
            peer_env: resolver_env,
            follower,
            no_follow,
        } = peers;
        let mut to_follow = Vec::new();
        let mut new_pids = bound_pids;
        if !self.lost.is_empty() && now >= self.next_scan_ns {
            let lost = std::mem::take(&mut self.lost);
            for path in lost {
                let follow = !self.no_follow_sockets.contains(&path);
                let mut opened = Vec::new();
                let found = attach_listeners(
                    backend,
                    tracker,
                    &path,
                    resolver_env,
                    follow,
                    &mut to_follow,
                    &mut opened,
                );
                match found {
                    Ok(found) if !found.is_empty() => {
                        for l in &found {
                            log::info!("{} is served again, by pid {}", path.display(), l.pid);
                            out.push(CaptureEvent::Process(ProcessEvent::Listening {
                                ts: tracker.ts(monotonic_ns()),
                                tgid: l.pid,
                                path: path.clone(),
                            }));
                            self.note_listener(l.pid, l.listen_fd as i32, path.clone(), no_follow);
                            new_pids.push(l.pid);
                        }
                        out.append(&mut opened);
                    }
                    Ok(_) => self.lost.push(path),
                    Err(e) => {
                        log::debug!("looking for a listener on {}: {e}", path.display());
                        self.lost.push(path);
                    }
                }
            }
            // Every REATTACH_SCAN_NS while the runtime is down; at every
            // drain for a while once part of it is back.
            self.next_scan_ns = if now < self.fast_until_ns || !new_pids.is_empty() {
                now
            } else {
                now + REATTACH_SCAN_NS
            };
        }
        if !new_pids.is_empty() {
            self.fast_until_ns = now + REATTACH_FAST_NS;
        }
        new_pids.sort_unstable();
        new_pids.dedup();
        if new_pids.is_empty() {
            return;
        }
        if let Some(var) = self.existing_socketpair_env.clone() {
            if let Err(e) = attach_socketpairs(
                backend,
                tracker,
                &new_pids,
                &var,
                resolver_env,
                &mut to_follow,
                out,
            ) {
                log::warn!("socketpairs of the new runtime process: {e}");
            }
        }
        if let Some(f) = follower {
            f.targets.extend(new_pids.iter().copied());
            f.follow_existing(backend, tracker, out, &to_follow);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::{session::test_support::RingOf, Timestamp};

    fn exit(tgid: u32, ms: u64) -> CaptureEvent {
        CaptureEvent::Process(ProcessEvent::Exit {
            ts: Timestamp {
                mono_ns: ms * 1_000_000,
                wall_ns: 0,
            },
            tgid,
        })
    }

    /// The old listener exits, a new one binds and exits, all in one drain:
    /// both exits are reported as the socket's listener gone, in order.
    #[test]
    fn a_listener_bound_and_gone_in_one_batch_is_reported_gone() {
        let path = PathBuf::from("/run/x.sock");
        let mut r = Reattach {
            listener_paths: HashMap::from([(10, vec![path.clone()])]),
            lost: Vec::new(),
            next_scan_ns: 0,
            fast_until_ns: 0,
            existing_socketpair_env: None,
            no_follow_sockets: Vec::new(),
        };
        let bound = vec![BoundListener {
            tgid: 20,
            fd: 3,
            path: path.clone(),
        }];
        let mut no_follow = HashSet::new();
        assert_eq!(
            r.on_bound(bound, &mut RingOf::default(), &mut no_follow),
            vec![20]
        );
        let mut out = vec![exit(10, 1), exit(20, 2)];
        r.on_exits(&mut out);
        let gone: Vec<u32> = out
            .iter()
            .filter_map(|e| match e {
                CaptureEvent::Process(ProcessEvent::ListenerGone { tgid, path: p, .. }) => {
                    assert_eq!(p, &path);
                    Some(*tgid)
                }
                _ => None,
            })
            .collect();
        assert_eq!(gone, vec![10, 20]);
        // Nobody serves it now: it is looked for again.
        assert_eq!(r.lost, vec![path]);
    }
}
