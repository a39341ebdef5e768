//! Finding the processes and existing connections behind a unix socket path, from /proc.
//!
//! Userspace support for the eBPF capture: the probes see traffic of sockets created after
//! they attach, but a runtime (containerd, CRI-O) and its NRI plugins usually connected long
//! before nri-trace started. This module finds who listens on a socket path, which fds of that
//! process are already-accepted connections, and who sits on the other end of them.
//!
//! It also finds connections that never went through a listener: the socketpairs a runtime
//! created to launch NRI plugins itself (`env_peer_sockets`), whose peer inodes come from a
//! NETLINK_SOCK_DIAG dump (`unix_peers`).
//!
//! Which crate does what:
//! * `procfs` lists the processes (`all_processes`), their fds and the socket inodes behind
//!   them (`Process::fd`, `fd_from_fd`), and reads /proc/PID/stat (comm, state, ppid),
//!   environ and the exe link.
//! * `netlink-sys` is the NETLINK_SOCK_DIAG socket; `netlink-packet-core` frames the netlink
//!   messages (header, NLMSG_DONE, NLMSG_ERROR) and `netlink-packet-sock-diag` encodes the
//!   `unix_diag_req` and decodes each `unix_diag_msg` with its UNIX_DIAG_PEER attribute.
//!
//! What stays hand-written, and why (each place says so too): the /proc/net/unix parser
//! (`parse_proc_net_unix`: procfs has no Flags column, so no listening bit, cuts paths at the
//! first space and fails the whole table on one non-UTF-8 path), the Tgid/Uid lines of
//! /proc/PID/status (procfs reads status as UTF-8 lines and fails for a process whose comm has
//! non-UTF-8 bytes, which the kernel does not escape there), the cmdline split (procfs drops
//! empty arguments and fails on non-UTF-8 ones), `peer_cred` (pidfd_getfd + SO_PEERCRED on the
//! duplicate: no crate here does that), and the pure grouping (`assemble_listeners`,
//! `match_env_peers`, `PathMatcher`).
//!
//! Layout: pure functions (`parse_proc_net_unix`, `assemble_listeners`, `match_env_peers`,
//! `PathMatcher`, `parse_unix_diag_datagram`) take text or bytes and are unit-tested without
//! root; the thin I/O wrappers around them read /proc or netlink.
//!
//! Limits (by design of /proc and sock_diag, not bugs):
//! * /proc/self/net/unix lists only sockets of *our* network namespace; a runtime in another
//!   netns is found with `read_proc_net_unix(Some(pid))` only.
//! * The sock_diag dump (`unix_peers`) likewise sees our network namespace only
//!   (net/unix/diag.c `unix_diag_dump` skips sockets of other netns); it has no per-pid variant.
//! * Paths are compared and canonicalized in *our* mount namespace.
//! * Non-UTF-8 bytes in socket paths are replaced by U+FFFD (lossy decoding).
//! * A listener bound to a path that was later unlinked and re-bound by someone else still shows
//!   the old path in /proc/net/unix; both listeners are reported.

mod env_peers;
mod listeners;
mod proc_net_unix;
mod process;
mod sock_diag;
mod sockets;

use std::io;
use std::path::{Path, PathBuf};

use procfs::{process::Process, ProcError, ProcResult};

pub(crate) use env_peers::env_peer_sockets;
pub use env_peers::EnvPeerSocket;
pub(crate) use listeners::find_listeners;
pub use listeners::{ConnectedFd, Listener};
#[cfg(test)]
pub(crate) use proc_net_unix::parse_proc_net_unix;
pub(crate) use proc_net_unix::{read_proc_net_unix, UnixSocketEntry};
pub(crate) use process::{proc_stat, read_comm, stat_of};
pub use process::{process_cgroup, process_info, ProcessInfo};
pub(crate) use process::{process_env, process_euid};
pub(crate) use sock_diag::{unix_peer_of, unix_peers};
pub(crate) use sockets::fd_socket_inode;
pub use sockets::{peer_cred, socket_fds_of, PeerCred};

/// Errors of socket discovery; every message names what the user can do about it.
#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    /// No listening socket with this path in /proc/net/unix of our network namespace.
    #[error(
        "no process listens on unix socket {} (not in /proc/net/unix): check the path; \
         is NRI enabled in the runtime? see docs/runtimes.md",
        path.display()
    )]
    NoListener {
        /// The path that was asked for.
        path: PathBuf,
    },
    /// The listener exists in the kernel but no process visible to us holds an fd of it.
    #[error(
        "unix socket {} is listening (socket inode {inode}) but no process visible in /proc \
         holds it: run nri-trace as root in the host PID namespace (e.g. docker run --pid=host)",
        path.display()
    )]
    NoHolder {
        /// The path that was asked for.
        path: PathBuf,
        /// Inode of the (first) listening socket.
        inode: u64,
    },
    /// A /proc file could not be read for lack of privilege (EACCES / EPERM).
    #[error("cannot read {}: permission denied: run nri-trace as root", path.display())]
    PermissionDenied {
        /// The /proc file or directory that was refused.
        path: PathBuf,
    },
    /// The process has no /proc entry (it exited, or is in a PID namespace we cannot see).
    #[error(
        "process {pid} is gone (no /proc/{pid}): it exited or runs in another PID namespace; \
         re-check the pid, or run nri-trace in the host PID namespace"
    )]
    ProcessGone {
        /// The pid that was asked for.
        pid: u32,
    },
    /// Any other I/O error on /proc.
    // The io::Error is printed in the message and deliberately not a #[source], so that
    // anyhow's "{:#}" does not print it twice.
    #[error("cannot read {}: {error}: check that procfs is mounted on /proc", path.display())]
    Io {
        /// The /proc file or directory that failed.
        path: PathBuf,
        /// The underlying error.
        error: io::Error,
    },
    /// The NETLINK_SOCK_DIAG dump of unix sockets failed (syscall error or kernel error reply).
    // ENOENT from the kernel means no handler for AF_UNIX: net/core/sock_diag.c tries
    // request_module("net-pf-16-proto-4-type-1") and answers ENOENT when that fails.
    #[error(
        "cannot list unix socket peers with NETLINK_SOCK_DIAG: {error}: the kernel needs \
         CONFIG_UNIX_DIAG (try `modprobe unix_diag` on the host)"
    )]
    SockDiag {
        /// The underlying error.
        error: io::Error,
    },
    /// The kernel's NETLINK_SOCK_DIAG reply did not parse; nothing of it is used.
    #[error("malformed NETLINK_SOCK_DIAG reply: {reason}; please report this with `uname -r`")]
    SockDiagReply {
        /// What was wrong with it.
        reason: String,
    },
}

/// Maps an I/O error on a /proc path to the `DiscoveryError` that names the right fix.
fn io_error(path: &Path, pid: Option<u32>, error: io::Error) -> DiscoveryError {
    match (error.kind(), pid) {
        (io::ErrorKind::PermissionDenied, _) => DiscoveryError::PermissionDenied {
            path: path.to_path_buf(),
        },
        (io::ErrorKind::NotFound, Some(pid)) => DiscoveryError::ProcessGone { pid },
        // ESRCH: the task died between lookup and read (fs/proc/base.c returns it).
        (_, Some(pid)) if error.raw_os_error() == Some(libc::ESRCH) => {
            DiscoveryError::ProcessGone { pid }
        }
        _ => DiscoveryError::Io {
            path: path.to_path_buf(),
            error,
        },
    }
}

/// Maps a procfs error on `path` (of `pid`, when it is about one process) to the
/// `DiscoveryError` that names the right fix, as [`io_error`] does for plain I/O errors.
pub(crate) fn proc_error(path: &Path, pid: Option<u32>, error: ProcError) -> DiscoveryError {
    match error {
        ProcError::PermissionDenied(p) => DiscoveryError::PermissionDenied {
            path: p.unwrap_or_else(|| path.to_path_buf()),
        },
        // procfs folds ESRCH (the task died between lookup and read) into NotFound too.
        ProcError::NotFound(p) => io_error(
            p.as_deref().unwrap_or(path),
            pid,
            io::Error::from_raw_os_error(libc::ENOENT),
        ),
        ProcError::Io(e, p) => io_error(p.as_deref().unwrap_or(path), pid, e),
        // Contents cut short or that procfs could not parse: shown with the file they came from.
        other => DiscoveryError::Io {
            path: path.to_path_buf(),
            error: io::Error::new(io::ErrorKind::InvalidData, other.to_string()),
        },
    }
}

/// Opens `/proc/<pid>` with procfs; every later read of the handle is of that same process,
/// even if the pid is reused meanwhile. A pid beyond `i32` cannot exist (`pid_max` is at most
/// 2^22) and is not found.
pub(crate) fn open_process(pid: u32) -> ProcResult<Process> {
    let Ok(pid) = i32::try_from(pid) else {
        return Err(ProcError::NotFound(None));
    };
    Process::new(pid)
}

/// What the tests of discovery's parts share.
#[cfg(test)]
mod test_support {
    use std::fs;
    use std::io;
    use std::os::fd::AsRawFd;
    use std::path::PathBuf;

    /// A temp dir removed on drop, unique per test and process.
    pub(super) struct TempDir(pub(super) PathBuf);

    impl TempDir {
        /// Creates `$TMPDIR/nri-trace-discovery-<pid>-<tag>-<nanos>`.
        pub(super) fn new(tag: &str) -> TempDir {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos());
            let dir = std::env::temp_dir().join(format!(
                "nri-trace-discovery-{}-{tag}-{nanos}",
                std::process::id()
            ));
            fs::create_dir_all(&dir).expect("create temp dir");
            TempDir(dir)
        }
    }

    impl Drop for TempDir {
        /// Best-effort cleanup.
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    /// Effective uid of the test process.
    pub(super) fn euid() -> u32 {
        // SAFETY: geteuid has no arguments and cannot fail.
        unsafe { libc::geteuid() }
    }

    /// Inode of an open fd.
    pub(super) fn inode_of(fd: &impl AsRawFd) -> u64 {
        // SAFETY: stat is plain old data; fstat fills it for a valid fd.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: the fd is open for the duration of the call; st is a live local.
        let rc = unsafe { libc::fstat(fd.as_raw_fd(), &raw mut st) };
        assert_eq!(rc, 0, "fstat: {}", io::Error::last_os_error());
        st.st_ino
    }

    /// Kills and reaps a child on drop.
    pub(super) struct KillOnDrop(pub(super) std::process::Child);

    impl Drop for KillOnDrop {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Error messages name the fix.
    #[test]
    fn error_messages() {
        let e = DiscoveryError::NoListener {
            path: "/var/run/nri/nri.sock".into(),
        };
        assert_eq!(
            e.to_string(),
            "no process listens on unix socket /var/run/nri/nri.sock (not in /proc/net/unix): \
             check the path; is NRI enabled in the runtime? see docs/runtimes.md"
        );
        let e = io_error(
            Path::new("/proc/1234/fd"),
            Some(1234),
            io::Error::from_raw_os_error(libc::EACCES),
        );
        assert_eq!(
            e.to_string(),
            "cannot read /proc/1234/fd: permission denied: run nri-trace as root"
        );
        let e = io_error(
            Path::new("/proc/1234/fd"),
            Some(1234),
            io::Error::from_raw_os_error(libc::ENOENT),
        );
        assert!(matches!(e, DiscoveryError::ProcessGone { pid: 1234 }));
        assert!(e.to_string().contains("host PID namespace"));
        let e = io_error(
            Path::new("/proc/self/net/unix"),
            None,
            io::Error::from_raw_os_error(libc::ENOENT),
        );
        assert!(e.to_string().contains("procfs"), "{e}");
    }

    /// procfs errors map to the same variants as I/O errors on /proc.
    #[test]
    fn proc_error_messages() {
        let fd_dir = Path::new("/proc/1234/fd");
        let e = proc_error(
            fd_dir,
            Some(1234),
            ProcError::PermissionDenied(Some(fd_dir.into())),
        );
        assert!(
            matches!(&e, DiscoveryError::PermissionDenied { path } if path == fd_dir),
            "{e:?}"
        );
        let e = proc_error(fd_dir, Some(1234), ProcError::NotFound(None));
        assert!(
            matches!(e, DiscoveryError::ProcessGone { pid: 1234 }),
            "{e:?}"
        );
        let esrch = io::Error::from_raw_os_error(libc::ESRCH);
        let e = proc_error(fd_dir, Some(1234), ProcError::Io(esrch, None));
        assert!(
            matches!(e, DiscoveryError::ProcessGone { pid: 1234 }),
            "{e:?}"
        );
        let e = proc_error(Path::new("/proc"), None, ProcError::NotFound(None));
        assert!(e.to_string().contains("procfs is mounted"), "{e}");
        let e = proc_error(fd_dir, Some(1234), ProcError::Other("odd".into()));
        assert!(
            matches!(&e, DiscoveryError::Io { path, .. } if path == fd_dir),
            "{e:?}"
        );
        // Live: no such process (pid_max is at most 2^22), and a pid beyond i32.
        for pid in [(1 << 22) + 1, u32::MAX] {
            match socket_fds_of(pid) {
                Err(DiscoveryError::ProcessGone { pid: p }) => assert_eq!(p, pid),
                other => panic!("pid {pid}: expected ProcessGone, got {other:?}"),
            }
            assert_eq!(fd_socket_inode(pid, 0), None);
        }
    }
}
