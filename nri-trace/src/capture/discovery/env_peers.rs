//! Connections that never went through a listener: the connected unix
//! sockets of traced processes whose peer socket a process with a given
//! environment variable holds (the socketpairs a runtime launched its
//! NRI plugins with).

use std::collections::{HashMap, HashSet};

use super::process::process_env_var;
use super::sock_diag::unix_peers;
use super::sockets::{find_socket_holders, socket_fds_of};
use super::DiscoveryError;

/// An fd of a traced process whose socket's other end is held by a process that has a given
/// environment variable: e.g. the socketpair end containerd keeps for an NRI plugin it launched
/// with `NRI_PLUGIN_SOCKET=3` (the other end is the plugin's fd 3).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct EnvPeerSocket {
    /// The traced process (tgid).
    pub pid: u32,
    /// The fd in `pid`.
    pub fd: u32,
    /// Inode of the socket behind `fd`.
    pub inode: u64,
    /// Inode of its peer socket.
    pub peer_inode: u64,
    /// The process (tgid) holding the peer socket and having the variable.
    pub peer_pid: u32,
}

/// Lists the connected unix sockets of `pids` whose peer socket is held by another process
/// that has environment variable `var` (any value), sorted by (pid, fd).
///
/// Sockets are found in `/proc/<pid>/fd`, their peers with `unix_peers` (so: in our network
/// namespace), the peer's holders with a /proc scan, and `var` in the holder's
/// `/proc/<tgid>/environ` (the environment at exec). A pid that has exited is skipped. Needs
/// root to read other processes' fds and environ.
pub(crate) fn env_peer_sockets(
    pids: &[u32],
    var: &str,
) -> Result<Vec<EnvPeerSocket>, DiscoveryError> {
    let mut fds = Vec::new();
    let mut seen = HashSet::new();
    for &pid in pids {
        if !seen.insert(pid) {
            continue;
        }
        match socket_fds_of(pid) {
            Ok(f) => fds.extend(f.into_iter().map(|(fd, inode)| (pid, fd, inode))),
            Err(DiscoveryError::ProcessGone { pid }) => {
                log::debug!("pid {pid} exited before its sockets were listed");
            }
            Err(e) => return Err(e),
        }
    }
    if fds.is_empty() {
        return Ok(Vec::new());
    }
    let peers = unix_peers()?;
    let wanted: HashSet<u64> = fds
        .iter()
        .filter_map(|(_, _, inode)| peers.get(inode).copied())
        .collect();
    let holders = find_socket_holders(&wanted);
    let mut has_var: HashMap<u32, bool> = HashMap::new();
    Ok(match_env_peers(&fds, &peers, &holders, |tgid| {
        *has_var
            .entry(tgid)
            .or_insert_with(|| process_env_var(tgid, var).is_some())
    }))
}

/// Pairs `(pid, fd, inode)` sockets with the holders of their peers; pure, so testable.
///
/// `peers` maps socket inode to peer inode, `holders` are `(tgid, fd, inode)` of peer sockets
/// and `has_env` says whether a tgid has the variable. A process is never its own peer: one
/// holding both ends (a pair not yet handed to a child) is skipped. With several holders (the
/// plugin forked), the lowest tgid with the variable is reported.
fn match_env_peers(
    fds: &[(u32, u32, u64)],
    peers: &HashMap<u64, u64>,
    holders: &[(u32, u32, u64)],
    mut has_env: impl FnMut(u32) -> bool,
) -> Vec<EnvPeerSocket> {
    let mut by_inode: HashMap<u64, Vec<u32>> = HashMap::new();
    for &(tgid, _, inode) in holders {
        by_inode.entry(inode).or_default().push(tgid);
    }
    for tgids in by_inode.values_mut() {
        tgids.sort_unstable();
        tgids.dedup();
    }
    let mut out: Vec<EnvPeerSocket> = fds
        .iter()
        .filter_map(|&(pid, fd, inode)| {
            let peer_inode = *peers.get(&inode)?;
            let peer_pid = by_inode
                .get(&peer_inode)?
                .iter()
                .copied()
                .filter(|&t| t != pid)
                .find(|&t| has_env(t))?;
            Some(EnvPeerSocket {
                pid,
                fd,
                inode,
                peer_inode,
                peer_pid,
            })
        })
        .collect();
    out.sort_by_key(|s| (s.pid, s.fd));
    out
}

#[cfg(test)]
mod tests {
    use std::io;
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;

    use super::*;
    use crate::capture::discovery::test_support::{inode_of, KillOnDrop};

    /// Pairing sockets with the holders of their peers, without /proc.
    #[test]
    fn match_env_peers_pure() {
        let me = 100;
        // fd 3 -> inode 10 <-> 11 held by 200 (has env) and 300 (forked, no env)
        // fd 4 -> inode 20 <-> 21 held by 400 (no env)
        // fd 5 -> inode 30 <-> 31 held by me only (pair not handed out)
        // fd 6 -> inode 40, no peer (listener)
        // fd 7 -> inode 50 <-> 51 held by 600 and 500, both with env: lowest wins
        // fd 8 -> inode 60 <-> 61 held by nobody visible
        let fds = [
            (me, 3, 10),
            (me, 4, 20),
            (me, 5, 30),
            (me, 6, 40),
            (me, 7, 50),
            (me, 8, 60),
            (me, 9, 10), // a dup of fd 3
        ];
        let peers: HashMap<u64, u64> = [
            (10, 11),
            (11, 10),
            (20, 21),
            (30, 31),
            (31, 30),
            (50, 51),
            (60, 61),
        ]
        .into();
        let holders = [
            (300, 3, 11),
            (200, 3, 11),
            (200, 9, 11),
            (400, 3, 21),
            (me, 5, 30),
            (me, 10, 31),
            (600, 3, 51),
            (500, 3, 51),
        ];
        let with_env = [200u32, 500, 600, me];
        let got = match_env_peers(&fds, &peers, &holders, |t| with_env.contains(&t));
        let got: Vec<(u32, u32, u64, u32)> = got
            .iter()
            .map(|s| (s.fd, s.peer_pid, s.peer_inode, s.pid))
            .collect();
        assert_eq!(
            got,
            vec![(3, 200, 11, me), (7, 500, 51, me), (9, 200, 11, me)]
        );
        assert!(match_env_peers(&fds, &peers, &holders, |_| false).is_empty());
        assert!(match_env_peers(&[], &peers, &holders, |_| true).is_empty());
    }

    /// Spawns `sleep` holding `fd` (CLOEXEC cleared in the child only), with `env` added.
    fn spawn_holder(fd: &UnixStream, env: &[(&str, &str)]) -> KillOnDrop {
        use std::os::unix::process::CommandExt;
        let raw = fd.as_raw_fd();
        let mut cmd = std::process::Command::new("sleep");
        cmd.arg("60").envs(env.iter().copied());
        // SAFETY: fcntl is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                if libc::fcntl(raw, libc::F_SETFD, 0) != 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
        // spawn() returns after the exec (std waits for it), so environ is the new one.
        KillOnDrop(cmd.spawn().expect("spawn sleep"))
    }

    /// Live: a socketpair whose other end a child with the variable holds is found, one whose
    /// other end a child without it holds, or we hold ourselves, is not.
    #[test]
    fn live_env_peer_sockets() {
        const VAR: &str = "NRI_TRACE_DISCOVERY_TEST_PLUGIN";
        let me = std::process::id();
        let (ours, theirs) = UnixStream::pair().expect("socketpair");
        let (decoy, decoy_theirs) = UnixStream::pair().expect("socketpair");
        let (self_a, _self_b) = UnixStream::pair().expect("socketpair");
        let plugin = spawn_holder(&theirs, &[(VAR, "3"), ("NRI_PLUGIN_IDX", "07")]);
        let other = spawn_holder(&decoy_theirs, &[]);
        drop(theirs);
        drop(decoy_theirs);
        let found = match env_peer_sockets(&[me, me], VAR) {
            Ok(f) => f,
            Err(DiscoveryError::SockDiag { error }) => {
                panic!("NETLINK_SOCK_DIAG unavailable here ({error}); needs unix_diag")
            }
            Err(e) => panic!("env_peer_sockets: {e}"),
        };
        let fd = u32::try_from(ours.as_raw_fd()).expect("fd");
        let plugin_pid = plugin.0.id();
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(
            found[0],
            EnvPeerSocket {
                pid: me,
                fd,
                inode: inode_of(&ours),
                peer_inode: found[0].peer_inode,
                peer_pid: plugin_pid,
            }
        );
        assert_ne!(found[0].peer_inode, 0);
        assert_eq!(
            process_env_var(plugin_pid, "NRI_PLUGIN_IDX").as_deref(),
            Some("07")
        );
        assert!(found
            .iter()
            .all(|s| s.fd != u32::try_from(decoy.as_raw_fd()).expect("fd")));
        assert!(found
            .iter()
            .all(|s| s.fd != u32::try_from(self_a.as_raw_fd()).expect("fd")));
        // A gone process is skipped, not an error.
        assert!(env_peer_sockets(&[u32::MAX], VAR).expect("gone").is_empty());
        drop(other);
    }
}
