//! The sockets of processes, from /proc: a process's socket fds and their
//! inodes, who holds a given socket, and the credentials of a socket's
//! peer (SO_PEERCRED).

use std::collections::HashSet;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::PathBuf;

use procfs::{
    process::{FDTarget, Process},
    ProcResult,
};

use super::{open_process, proc_error, DiscoveryError};

/// Lists `(fd, socket inode)` for every socket fd of `pid`, sorted by fd.
pub fn socket_fds_of(pid: u32) -> Result<Vec<(u32, u64)>, DiscoveryError> {
    let dir = PathBuf::from(format!("/proc/{pid}/fd"));
    open_process(pid)
        .and_then(|p| socket_fds(&p))
        .map_err(|e| proc_error(&dir, Some(pid), e))
}

/// `(fd, socket inode)` of every socket fd of `process`, sorted by fd; the inode is procfs's
/// reading of the fd's `socket:[N]` link (fs/proc/fd.c, sockfs_dname in net/socket.c).
fn socket_fds(process: &Process) -> ProcResult<Vec<(u32, u64)>> {
    let mut out = Vec::new();
    for fd in process.fd()? {
        // procfs already skips fds closed while we read; a failing readdir ends the listing.
        let Ok(fd) = fd else { continue };
        if let (FDTarget::Socket(inode), Ok(n)) = (&fd.target, u32::try_from(fd.fd)) {
            out.push((n, *inode));
        }
    }
    out.sort_unstable();
    Ok(out)
}

/// Result of a scan over `/proc/<tgid>/fd.`
pub(super) struct HolderScan {
    /// `(tgid, fd, inode)`, sorted.
    pub(super) holders: Vec<(u32, u32, u64)>,
    /// First fd directory we were refused, if any (for the "run as root" hint).
    pub(super) denied: Option<PathBuf>,
}

/// Scans all `/proc/<tgid>/fd` for sockets in `inodes`, noting permission failures.
pub(super) fn scan_holders(inodes: &HashSet<u64>) -> HolderScan {
    let mut scan = HolderScan {
        holders: Vec::new(),
        denied: None,
    };
    if inodes.is_empty() {
        return scan;
    }
    // readdir of /proc lists thread-group leaders only (fs/proc/base.c `proc_pid_readdir`
    // skips non-leader threads), so each process is scanned once and /proc/*/task never.
    let processes = match procfs::process::all_processes() {
        Ok(p) => p,
        Err(e) => {
            log::warn!("cannot list /proc: {e}");
            return scan;
        }
    };
    // A process that exits between readdir and open is skipped.
    for process in processes.flatten() {
        let Ok(tgid) = u32::try_from(process.pid) else {
            continue;
        };
        let fds = socket_fds(&process)
            .map_err(|e| proc_error(&PathBuf::from(format!("/proc/{tgid}/fd")), Some(tgid), e));
        match fds {
            Ok(fds) => scan.holders.extend(
                fds.into_iter()
                    .filter(|(_, inode)| inodes.contains(inode))
                    .map(|(fd, inode)| (tgid, fd, inode)),
            ),
            Err(DiscoveryError::PermissionDenied { path }) => {
                log::debug!("skipping pid {tgid}: cannot read {}", path.display());
                scan.denied.get_or_insert(path);
            }
            // Vanished processes (and anything else odd about one process) are skipped.
            Err(e) => log::trace!("skipping pid {tgid}: {e}"),
        }
    }
    scan.holders.sort_unstable();
    scan
}

/// Lists `(tgid, fd, inode)` for every fd in any `/proc/<tgid>/fd` whose socket inode is in `inodes`.
#[allow(
    clippy::implicit_hasher,
    reason = "callers build the set here; no other hasher is in use"
)]
pub(crate) fn find_socket_holders(inodes: &HashSet<u64>) -> Vec<(u32, u32, u64)> {
    scan_holders(inodes).holders
}

/// Credentials of the peer of a unix socket (SO_PEERCRED), as captured at connect()/listen().
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct PeerCred {
    /// Peer tgid in our PID namespace (0 if not visible there).
    pub pid: u32,
    /// Peer effective uid.
    pub uid: u32,
    /// Peer effective gid.
    pub gid: u32,
}

/// Returns SO_PEERCRED of fd `fd` of process `pid`, via a pidfd_getfd() duplicate.
///
/// Hand-written on libc: procfs only reads /proc, and /proc has no peer credentials; no crate
/// here wraps pidfd_getfd().
///
/// Read-only: the duplicate is only passed to getsockopt() and closed; no data is read, written
/// or shut down. Needs PTRACE_MODE_ATTACH_REALCREDS on `pid` (kernel/pid.c `pidfd_getfd`), i.e.
/// root/CAP_SYS_PTRACE for other processes; always allowed for our own process. Linux >= 5.6.
pub fn peer_cred(pid: u32, fd: u32) -> Option<PeerCred> {
    let pid = libc::pid_t::try_from(pid).ok()?;
    let fd = libc::c_int::try_from(fd).ok()?;
    // SAFETY: pidfd_open(pid_t, unsigned int) has no memory arguments.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, libc::c_uint::MIN) };
    let pidfd = libc::c_int::try_from(pidfd).ok().filter(|&r| r >= 0)?;
    // SAFETY: the kernel just returned this fd to us and nothing else owns it.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
    // SAFETY: pidfd_getfd(int, int, unsigned int) has no memory arguments; the new fd is
    // O_CLOEXEC (kernel/pid.c) so it cannot leak into children.
    let dup = unsafe {
        libc::syscall(
            libc::SYS_pidfd_getfd,
            pidfd.as_raw_fd(),
            fd,
            libc::c_uint::MIN,
        )
    };
    let dup = libc::c_int::try_from(dup).ok().filter(|&r| r >= 0)?;
    // SAFETY: as above, a fresh fd owned by nobody else; OwnedFd closes it on every path.
    let dup = unsafe { OwnedFd::from_raw_fd(dup) };
    drop(pidfd);
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = libc::socklen_t::try_from(size_of::<libc::ucred>()).ok()?;
    // SAFETY: cred/len point to live, correctly sized locals for the duration of the call.
    let rc = unsafe {
        libc::getsockopt(
            dup.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            std::ptr::addr_of_mut!(cred).cast::<libc::c_void>(),
            &raw mut len,
        )
    };
    drop(dup);
    if rc != 0 || usize::try_from(len).ok()? != size_of::<libc::ucred>() {
        return None;
    }
    Some(PeerCred {
        pid: u32::try_from(cred.pid).ok()?,
        uid: cred.uid,
        gid: cred.gid,
    })
}

/// The inode of the socket behind fd `fd` of `pid` (its `socket:[N]` link); `None` if the
/// fd is not open or not a socket.
pub(crate) fn fd_socket_inode(pid: u32, fd: u32) -> Option<u64> {
    let fd = i32::try_from(fd).ok()?;
    match open_process(pid).ok()?.fd_from_fd(fd).ok()?.target {
        FDTarget::Socket(inode) => Some(inode),
        _ => None,
    }
}
