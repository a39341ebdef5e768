//! Following the peer's end of traced connections: the process holding
//! the other socket found, tracked for that fd, and its end registered.

use std::collections::{HashMap, HashSet, VecDeque};

use nri_trace_common::FD_CONN;

use super::{clock::monotonic_ns, peers::peer_process};
use crate::capture::{
    backend::CaptureBackend,
    discovery,
    tracker::{ConnTracker, NewConn},
    CaptureEvent, ConnId, Origin, ProcessEvent,
};

/// A traced connection found at start whose peer end is to be followed.
pub(super) struct ToFollow {
    pub(super) conn: ConnId,
    pub(super) tgid: u32,
    pub(super) inode: u64,
    /// The peer socket's inode, when the discovery already knows it.
    pub(super) peer_inode: Option<u64>,
    /// The process expected to hold the peer socket.
    pub(super) candidate: Option<u32>,
}

/// How long a new connection whose peer socket no process holds yet (a
/// connect the server has not accepted) is looked at again.
const RETRY_NS: u64 = 200_000_000;
/// Bound on connections waiting to be followed.
const MAX_WAITING: usize = 256;
/// Children remembered per target, as candidates for socketpair ends.
const MAX_CHILDREN: usize = 32;

/// Why a traced connection's peer end is not followed yet.
#[derive(Clone, Copy, Debug)]
enum Wait {
    /// A socketpair end whose other end the target still holds (as the
    /// connection `sibling`): looked at again when that closes, i.e. when
    /// the target handed it to a child and closed its copy.
    SiblingOpen { sibling: ConnId },
    /// The peer socket was in no candidate's fds: looked at again at every
    /// batch until `until_ns`.
    Until { until_ns: u64 },
}

#[derive(Clone, Debug)]
struct Waiting {
    conn: ConnId,
    tgid: u32,
    inode: u64,
    /// The peer socket's inode, once asked for.
    peer_inode: Option<u64>,
    /// SO_PEERCRED's pid, the first process to look in.
    candidate: Option<u32>,
    wait: Wait,
}

/// Outcome of one attempt to follow a connection.
#[derive(Debug, PartialEq, Eq)]
enum Followed {
    /// Registered (or already captured, or impossible): done with it.
    Done,
    /// No candidate holds the peer socket (yet).
    NotFound,
}

/// Follows the peer's end of traced connections
/// ([`SessionConfig::follow_peer_ends`]).
///
/// Only connections of `targets` (the processes the session was asked to
/// trace) are followed; peer processes become [`ConnTracker`] peer
/// processes, whose own connections are never captured, and which are
/// untracked again once none of their followed ends is open.
pub(super) struct Follower {
    pub(super) targets: HashSet<u32>,
    peer_env: Vec<String>,
    /// Recent children of each target (Fork events), newest last.
    children: HashMap<u32, VecDeque<u32>>,
    waiting: Vec<Waiting>,
}

impl Follower {
    pub(super) fn new(targets: &[u32], peer_env: &[String]) -> Self {
        Self {
            targets: targets.iter().copied().collect(),
            peer_env: peer_env.to_vec(),
            children: HashMap::new(),
            waiting: Vec::new(),
        }
    }

    /// The connections found at start: one sock_diag dump for all of them.
    pub(super) fn follow_existing(
        &mut self,
        backend: &mut dyn CaptureBackend,
        tracker: &mut ConnTracker,
        out: &mut Vec<CaptureEvent>,
        found: &[ToFollow],
    ) {
        if found.is_empty() {
            return;
        }
        let peers = if found.iter().any(|f| f.peer_inode.is_none()) {
            match discovery::unix_peers() {
                Ok(p) => p,
                Err(e) => {
                    log::warn!("the peer ends of connections are not captured: {e}");
                    return;
                }
            }
        } else {
            HashMap::new()
        };
        for f in found {
            let Some(peer_inode) = f.peer_inode.or_else(|| peers.get(&f.inode).copied()) else {
                continue;
            };
            let candidates: Vec<u32> = f.candidate.into_iter().collect();
            let r = self.follow(
                backend,
                tracker,
                out,
                f.conn,
                f.tgid,
                peer_inode,
                &candidates,
            );
            log::debug!("following {} (pid {}): {r:?}", f.conn, f.tgid);
        }
    }

    /// Called after every drained batch (its events in `out`, exits already
    /// untracked): forget idle peer processes, then follow the new
    /// connections and retry the waiting ones.
    pub(super) fn after_batch(
        &mut self,
        backend: &mut dyn CaptureBackend,
        tracker: &mut ConnTracker,
        out: &mut Vec<CaptureEvent>,
        new_conns: Vec<NewConn>,
        now_ns: u64,
    ) {
        for tgid in tracker.take_idle_peer_processes() {
            if let Err(e) = backend.untrack_process(tgid) {
                log::warn!("untracking peer process {tgid}: {e}");
            }
        }
        let mut closed = HashSet::new();
        for ev in out.iter() {
            match ev {
                CaptureEvent::Process(ProcessEvent::Fork { parent, child, .. })
                    if self.targets.contains(parent) =>
                {
                    let c = self.children.entry(*parent).or_default();
                    c.push_back(*child);
                    if c.len() > MAX_CHILDREN {
                        c.pop_front();
                    }
                }
                CaptureEvent::Process(ProcessEvent::Exit { tgid, .. }) => {
                    self.targets.remove(tgid);
                    self.children.remove(tgid);
                }
                CaptureEvent::Close(c) => {
                    closed.insert(c.conn);
                }
                _ => {}
            }
        }
        // Waiting connections whose turn it is; the others stay.
        let mut due = Vec::new();
        for w in std::mem::take(&mut self.waiting) {
            if closed.contains(&w.conn) || !tracker.is_open(w.conn) {
                continue;
            }
            match w.wait {
                Wait::SiblingOpen { sibling } if !closed.contains(&sibling) => self.waiting.push(w),
                Wait::Until { until_ns } if now_ns > until_ns => {}
                _ => due.push(w),
            }
        }
        for nc in new_conns {
            if !self.targets.contains(&nc.tgid) {
                continue;
            }
            let Some(inode) = nc.inode else { continue };
            let wait = match nc.origin {
                // The target still holds the other end: wait until it
                // lets go of it (hands it to a child and closes its copy).
                Origin::Socketpair { other_fd } => tracker
                    .conn_of(nc.tgid, other_fd)
                    .map(|sibling| Wait::SiblingOpen { sibling }),
                Origin::Accept { .. } | Origin::Connect | Origin::Existing => None,
                // A dup the tracker could not alias: nothing to follow.
                Origin::Dup { .. } => continue,
            };
            let w = Waiting {
                conn: nc.conn,
                tgid: nc.tgid,
                inode,
                peer_inode: None,
                candidate: nc.peer_pid,
                wait: wait.unwrap_or_else(|| Wait::Until {
                    until_ns: now_ns.saturating_add(RETRY_NS),
                }),
            };
            match wait {
                Some(_) => self.push_waiting(w),
                None => due.push(w),
            }
        }
        for mut w in due {
            // SO_PEERCRED's process, then the target's recent children
            // (where the other end of a socketpair goes), newest first.
            // pid 0: a process in a PID namespace we cannot see.
            let mut candidates: Vec<u32> = w.candidate.into_iter().collect();
            if let Some(c) = self.children.get(&w.tgid) {
                candidates.extend(c.iter().rev());
            }
            candidates.retain(|&p| p != 0 && p != w.tgid);
            if candidates.is_empty() {
                continue; // nowhere to look: not followed
            }
            let peer_inode = match w.peer_inode {
                Some(p) => p,
                None => match discovery::unix_peer_of(w.inode) {
                    Ok(Some(p)) => p,
                    // Closed meanwhile, or its peer is gone.
                    Ok(None) => continue,
                    Err(e) => {
                        log::debug!("peer socket of {} (inode {}): {e}", w.conn, w.inode);
                        continue;
                    }
                },
            };
            w.peer_inode = Some(peer_inode);
            let r = self.follow(
                backend,
                tracker,
                out,
                w.conn,
                w.tgid,
                peer_inode,
                &candidates,
            );
            if r == Followed::NotFound {
                let until_ns = match w.wait {
                    Wait::Until { until_ns } => until_ns,
                    // The target let go of the other end and no child
                    // holds it (yet): a short grace period.
                    Wait::SiblingOpen { .. } => now_ns.saturating_add(RETRY_NS),
                };
                self.push_waiting(Waiting {
                    wait: Wait::Until { until_ns },
                    ..w
                });
            }
        }
    }

    fn push_waiting(&mut self, w: Waiting) {
        if self.waiting.len() < MAX_WAITING {
            self.waiting.push(w);
        } else {
            log::debug!(
                "too many connections waiting: the peer end of {} is not followed",
                w.conn
            );
        }
    }

    /// Find which of `candidates` holds socket `peer_inode` (the peer of
    /// the target's connection `conn`), track it and register its end.
    #[allow(clippy::too_many_arguments)]
    fn follow(
        &mut self,
        backend: &mut dyn CaptureBackend,
        tracker: &mut ConnTracker,
        out: &mut Vec<CaptureEvent>,
        conn: ConnId,
        tgid: u32,
        peer_inode: u64,
        candidates: &[u32],
    ) -> Followed {
        let mut seen = HashSet::new();
        let holder = candidates
            .iter()
            .copied()
            // pid 0: the peer is in a PID namespace we cannot see; the
            // target itself is no peer (both ends of its own pair).
            .filter(|&p| p != 0 && p != tgid && seen.insert(p))
            .find_map(|p| {
                let fds: Vec<u32> = discovery::socket_fds_of(p)
                    .ok()?
                    .into_iter()
                    .filter(|&(_, ino)| ino == peer_inode)
                    .map(|(fd, _)| fd)
                    .collect();
                (!fds.is_empty()).then_some((p, fds))
            });
        let Some((pid, fds)) = holder else {
            return Followed::NotFound;
        };
        if fds
            .iter()
            .any(|&fd| tracker.conn_of(pid, fd as i32).is_some())
        {
            return Followed::Done; // its end is captured already
        }
        if !self.targets.contains(&pid) && !tracker.is_peer_process(pid) {
            if let Err(e) = backend.track_process(pid) {
                log::warn!("cannot track peer process {pid} of {conn}: {e}");
                return Followed::Done;
            }
            // From here on, a peer process that is no longer needed is
            // untracked at the next batch end (`take_idle_peer_processes`).
            tracker.add_peer_process(pid);
        }
        let mut tracked = Vec::new();
        for &fd in &fds {
            match backend.track_fd(pid, fd, FD_CONN) {
                Ok(()) => tracked.push(fd),
                Err(e) => log::warn!("cannot track fd {fd} of peer process {pid}: {e}"),
            }
        }
        // Tracked first, checked then: an fd closed or reused in between
        // does not hold the socket any more and is switched off again (not
        // in a traced process, where the kernel may have tracked the new
        // connection on it meanwhile); one closed after this check is seen
        // closing by the kernel.
        let mut kept = Vec::new();
        for fd in tracked {
            if discovery::fd_socket_inode(pid, fd) == Some(peer_inode) {
                kept.push(fd as i32);
            } else if !self.targets.contains(&pid) {
                if let Err(e) = backend.track_fd(pid, fd, 0) {
                    log::debug!("switching off fd {fd} of peer process {pid}: {e}");
                }
            }
        }
        let checked = monotonic_ns();
        if let Some(ev) = tracker.register_peer_end(
            pid,
            &kept,
            conn,
            Some(peer_inode),
            peer_process(tgid, &self.peer_env),
            checked,
        ) {
            out.push(ev);
        }
        Followed::Done
    }
}
