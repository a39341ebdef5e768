//! Who is at the other end of a connection: its peer process as /proc
//! shows it, completed from a recent read when the process exited first.

use std::collections::HashMap;

use crate::capture::{discovery, Peer};

/// Who is at the other end of (tgid, fd), as far as /proc can tell, with
/// the variables `env` of its environment.
///
/// This is SO_PEERCRED: the process that connect()ed or listen()ed, or, for
/// a socketpair, the process that *created* the pair (af_unix.c
/// `unix_socketpair`), i.e. the traced process itself even after it handed
/// the other end to a child. Pre-existing socketpairs get their peer from
/// the holder of the peer socket instead (see [`peer_process`]).
pub(crate) fn peer_of(tgid: u32, fd: i32, env: &[String]) -> Option<Peer> {
    let cred = discovery::peer_cred(tgid, u32::try_from(fd).ok()?)?;
    // pid 0: the peer is in a PID namespace we cannot see.
    let env: &[String] = if cred.pid == 0 { &[] } else { env };
    Some(peer_with(cred.pid, cred.uid, env))
}

/// Process `pid` as a [`Peer`] (uid from `/proc/<pid>/status`), with the
/// variables `env` of its environment; `None` if it is gone.
pub(crate) fn peer_process(pid: u32, env: &[String]) -> Option<Peer> {
    let uid = discovery::process_euid(pid)?;
    Some(peer_with(pid, uid, env))
}

/// A [`Peer`] from its pid and uid, with what /proc shows of it. Each read
/// is bounded or small, and one that fails (the process exited between
/// SO_PEERCRED and here, or pid 0: another PID namespace) leaves its field
/// unknown rather than failing the connection.
fn peer_with(pid: u32, uid: u32, env: &[String]) -> Peer {
    let info = (pid != 0).then(|| discovery::process_info(pid)).flatten();
    Peer {
        pid,
        uid,
        comm: info.as_ref().map(|i| i.comm.clone()),
        cmdline: info.map(|i| i.cmdline).unwrap_or_default(),
        env: discovery::process_env(pid, env),
        cgroup: (pid != 0).then(|| discovery::process_cgroup(pid)).flatten(),
    }
}

/// How long a peer read from /proc stands for its process (reader's clock).
const RECENT_PEER_NS: u64 = 10_000_000_000;
/// Most peers remembered.
const MAX_RECENT_PEERS: usize = 1024;

/// The peers read lately, by pid, to complete a peer whose process exited
/// before /proc was read: a client that dials twice and exits milliseconds
/// after its second dial (`crictl ps` dials the runtime and the image
/// service: its second connection was read with the pid alone, under a CI
/// run's load, 2026-11-28) is the process its first connection showed.
/// Only the same pid and uid, read within [`RECENT_PEER_NS`]: pids are
/// allocated cyclically (kernel/pid.c `alloc_pid`, `idr_alloc_cyclic`),
/// so one is not handed out again before `pid_max` others were. A client
/// with one connection that exits before the read stays unknown.
#[derive(Debug, Default)]
pub(super) struct RecentPeers {
    by_pid: HashMap<u32, (Peer, u64)>,
}

impl RecentPeers {
    /// `peer` as read at `now_ns`, completed from the same process's
    /// earlier read where /proc no longer showed it (gone before the read,
    /// or during it: CI on fdc69a4 read a `crictl ps` with its comm and
    /// without its cgroup, the process exiting between the two files);
    /// remembered when /proc showed it.
    pub(super) fn complete(&mut self, peer: Option<Peer>, now_ns: u64) -> Option<Peer> {
        let mut p = peer?;
        if p.pid == 0 {
            return Some(p);
        }
        let shown = p.comm.is_some();
        if let Some((seen, at)) = self.by_pid.get(&p.pid) {
            if seen.uid == p.uid && now_ns.saturating_sub(*at) <= RECENT_PEER_NS {
                if p.comm.is_none() {
                    p.comm.clone_from(&seen.comm);
                }
                if p.cmdline.is_empty() {
                    p.cmdline.clone_from(&seen.cmdline);
                }
                if p.cgroup.is_none() {
                    p.cgroup.clone_from(&seen.cgroup);
                }
                if p.env.is_empty() {
                    p.env.clone_from(&seen.env);
                }
            }
        }
        if shown {
            if self.by_pid.len() >= MAX_RECENT_PEERS && !self.by_pid.contains_key(&p.pid) {
                self.by_pid
                    .retain(|_, (_, at)| now_ns.saturating_sub(*at) <= RECENT_PEER_NS);
                if self.by_pid.len() >= MAX_RECENT_PEERS {
                    self.by_pid.clear();
                }
            }
            self.by_pid.insert(p.pid, (p.clone(), now_ns));
        }
        Some(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A peer gone before its read is the process its pid and uid showed
    /// lately, and only that.
    #[test]
    fn a_peer_gone_before_its_read_is_completed_from_its_process() {
        let read = |pid, uid, comm: Option<&str>| {
            Some(Peer {
                pid,
                uid,
                comm: comm.map(Into::into),
                cmdline: comm.map(|c| vec![c.to_string()]).unwrap_or_default(),
                env: Default::default(),
                cgroup: comm.map(|_| "/user.slice/user-0.slice/session-3.scope".into()),
            })
        };
        let s = 1_000_000_000;
        let mut r = RecentPeers::default();
        assert_eq!(r.complete(None, s), None);
        let first = r.complete(read(40, 0, Some("crictl")), s).unwrap();
        // Its second connection, read after it exited: pid and uid alone.
        assert_eq!(r.complete(read(40, 0, None), 2 * s), Some(first.clone()));
        // Read while it exited: its comm and cmdline, not its cgroup.
        let mut partial = read(40, 0, Some("crictl")).unwrap();
        partial.cgroup = None;
        assert_eq!(r.complete(Some(partial), 2 * s), Some(first));
        // Another uid, another pid, too late, pid 0: left as read.
        assert_eq!(
            r.complete(read(40, 1000, None), 2 * s),
            read(40, 1000, None)
        );
        assert_eq!(r.complete(read(41, 0, None), 2 * s), read(41, 0, None));
        // Too late after the last read that showed it (the partial one).
        let late = 2 * s + RECENT_PEER_NS + 1;
        assert_eq!(r.complete(read(40, 0, None), late), read(40, 0, None));
        assert_eq!(r.complete(read(0, 0, None), 2 * s), read(0, 0, None));
        // Bounded: past the bound the stale ones go, then all.
        for pid in 100..100 + MAX_RECENT_PEERS as u32 + 5 {
            r.complete(read(pid, 0, Some("x")), 3 * s);
        }
        assert!(r.by_pid.len() <= MAX_RECENT_PEERS);
    }
}
