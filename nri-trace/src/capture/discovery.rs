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

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::{OsStr, OsString};
use std::fs;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

use netlink_packet_core::{
    NetlinkBuffer, NetlinkHeader, NetlinkMessage, NetlinkPayload, NLMSG_DONE, NLMSG_ERROR,
    NLM_F_DUMP, NLM_F_DUMP_INTR, NLM_F_REQUEST,
};
use netlink_packet_sock_diag::{
    unix::{ShowFlags, StateFlags, UnixRequest},
    SockDiagMessage, AF_UNIX, SOCK_DIAG_BY_FAMILY,
};
use netlink_sys::{protocols::NETLINK_SOCK_DIAG, Socket, SocketAddr};
use procfs::{
    process::{FDTarget, Process},
    ProcError, ProcResult,
};

/// `__SO_ACCEPTCON` (include/linux/net.h): the Flags column of /proc/net/unix for listeners.
const SO_ACCEPTCON: u32 = 1 << 16;

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

/// One line of /proc/net/unix (net/unix/af_unix.c, `unix_seq_show`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnixSocketEntry {
    /// Socket inode, as in the `socket:[N]` link of an fd holding it.
    pub inode: u64,
    /// Bound path; `None` for unnamed sockets, `"@name"` for abstract ones (kernel prints '@').
    pub path: Option<String>,
    /// Flags has `__SO_ACCEPTCON`, i.e. the socket is in `listen()`.
    pub listening: bool,
    /// St column: 1 SS_UNCONNECTED, 2 SS_CONNECTING, 3 SS_CONNECTED, 4 SS_DISCONNECTING.
    pub state: u8,
    /// Type column: 1 SOCK_STREAM, 2 SOCK_DGRAM, 5 SOCK_SEQPACKET.
    pub sock_type: u16,
}

/// Parses the text of /proc/net/unix; the header, garbage and truncated lines are skipped.
///
/// Hand-written, not procfs's `net::unix()`/`Process::unix()`: those skip the Flags column (so
/// a listener cannot be told from an unconnected socket), end the path at the first whitespace
/// (a path with a space is cut), and fail the whole table on one non-UTF-8 path or odd line.
pub fn parse_proc_net_unix(text: &str) -> Vec<UnixSocketEntry> {
    text.lines().filter_map(parse_proc_net_unix_line).collect()
}

/// Parses one entry line, `None` for the header or anything that is not an entry.
///
/// The kernel prints `"%pK: %08X %08X %08X %04X %02X %5lu"`, then, only for bound sockets,
/// one space and the raw path up to the end of the line (af_unix.c `unix_seq_show`), so the
/// path is everything after the single separator and may contain spaces.
fn parse_proc_net_unix_line(line: &str) -> Option<UnixSocketEntry> {
    let mut rest = line;
    let mut fields = [""; 7];
    for field in &mut fields {
        let trimmed = rest.trim_start_matches([' ', '\t']);
        let end = trimmed.find([' ', '\t']).unwrap_or(trimmed.len());
        let (token, tail) = trimmed.split_at(end);
        if token.is_empty() {
            return None;
        }
        *field = token;
        rest = tail;
    }
    let [num, refcount, protocol, flags, sock_type, state, inode] = fields;
    // "Num" is a (possibly hashed or zeroed, see kptr_restrict) pointer followed by ':'.
    if !is_hex(num.strip_suffix(':')?) || !is_hex(refcount) || !is_hex(protocol) {
        return None;
    }
    let flags = parse_hex_u32(flags)?;
    let sock_type = u16::try_from(parse_hex_u32(sock_type)?).ok()?;
    let state = u8::try_from(parse_hex_u32(state)?).ok()?;
    let inode = parse_dec_u64(inode)?;
    // `rest` is empty or starts with the one ASCII separator the kernel put before the path.
    let path = rest.get(1..).filter(|p| !p.is_empty()).map(str::to_owned);
    Some(UnixSocketEntry {
        inode,
        path,
        listening: flags & SO_ACCEPTCON != 0,
        state,
        sock_type,
    })
}

/// True if `s` is a non-empty run of hex digits (from_str_radix alone would accept a '+').
fn is_hex(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Parses a hex column strictly (digits only, no sign, no overflow).
fn parse_hex_u32(s: &str) -> Option<u32> {
    if !is_hex(s) {
        return None;
    }
    u32::from_str_radix(s, 16).ok()
}

/// Parses a decimal number strictly (digits only, no sign, no overflow).
fn parse_dec_u64(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// Reads `/proc/<pid>/net/unix` (the netns of `pid`) or, for `None`, /proc/self/net/unix.
pub fn read_proc_net_unix(pid: Option<u32>) -> Result<Vec<UnixSocketEntry>, DiscoveryError> {
    let path = match pid {
        Some(pid) => PathBuf::from(format!("/proc/{pid}/net/unix")),
        None => PathBuf::from("/proc/self/net/unix"),
    };
    let bytes = fs::read(&path).map_err(|e| io_error(&path, pid, e))?;
    Ok(parse_proc_net_unix(&String::from_utf8_lossy(&bytes)))
}

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

/// A server-side fd of an already-accepted connection on a listener's path.
#[derive(Debug, Clone)]
pub struct ConnectedFd {
    /// The fd number in the listener process.
    pub fd: u32,
    /// The socket inode.
    pub inode: u64,
}

/// A process holding a listening socket, with the connections it has already accepted.
#[derive(Debug, Clone)]
pub struct Listener {
    /// The path as the kernel shows it for the listening socket (as passed to bind()).
    pub path: PathBuf,
    /// Thread-group id (the "pid" users see) of the holder.
    pub pid: u32,
    /// Lowest fd of `pid` that refers to the listening socket.
    pub listen_fd: u32,
    /// Inode of the listening socket.
    pub inode: u64,
    /// Fds of `pid` that are accepted (non-listening) sockets on the same path, sorted by fd.
    pub connections: Vec<ConnectedFd>,
}

/// Matches socket paths from /proc/net/unix against a requested path, following symlinks.
///
/// The runtime may have bound `/var/run/nri/nri.sock` while the user passes `/run/nri/nri.sock`
/// (or the reverse), so the requested path matches literally, made absolute, or canonicalized,
/// and an entry path with the same file name is canonicalized too.
struct PathMatcher {
    /// Forms of the requested path: as given, absolute, canonical.
    wanted: Vec<PathBuf>,
    /// File names of `wanted`, to canonicalize only plausible entries (not every host socket).
    names: Vec<PathBuf>,
    /// Canonicalization results of entry paths, since accepted sockets repeat the path.
    cache: HashMap<String, Option<PathBuf>>,
}

impl PathMatcher {
    /// Builds a matcher for `path` (canonicalizing it if it exists).
    fn new(path: &Path) -> Self {
        let mut wanted = vec![path.to_path_buf()];
        if let Ok(abs) = std::path::absolute(path) {
            wanted.push(abs);
        }
        if let Ok(canon) = fs::canonicalize(path) {
            wanted.push(canon);
        }
        wanted.dedup();
        let names = wanted
            .iter()
            .filter_map(|p| p.file_name().map(PathBuf::from))
            .collect();
        PathMatcher {
            wanted,
            names,
            cache: HashMap::new(),
        }
    }

    /// True if `entry_path` (as printed in /proc/net/unix) is the requested socket.
    fn matches(&mut self, entry_path: &str) -> bool {
        let p = Path::new(entry_path);
        if self.wanted.iter().any(|w| w == p) {
            return true;
        }
        // Abstract names are not files; relative bind paths are relative to an unknown cwd.
        if entry_path.starts_with('@') || !p.is_absolute() {
            return false;
        }
        if !p
            .file_name()
            .is_some_and(|n| self.names.iter().any(|w| w.as_os_str() == n))
        {
            return false;
        }
        let canon = self
            .cache
            .entry(entry_path.to_owned())
            .or_insert_with(|| fs::canonicalize(p).ok());
        canon
            .as_ref()
            .is_some_and(|c| self.wanted.iter().any(|w| w == c))
    }
}

/// Groups `(tgid, fd, inode)` holders into listeners; pure, so testable without /proc.
///
/// `listening` maps listening inode to its path; `connected` are the non-listening inodes on
/// the same path. If one process holds two listeners on the path (re-bound after unlink), its
/// connections cannot be told apart from /proc alone and are listed under both.
fn assemble_listeners(
    listening: &BTreeMap<u64, String>,
    connected: &HashSet<u64>,
    holders: &[(u32, u32, u64)],
) -> Vec<Listener> {
    // (tgid, listening inode) -> lowest fd
    let mut listen_fds: BTreeMap<(u32, u64), u32> = BTreeMap::new();
    let mut conns: BTreeMap<u32, Vec<ConnectedFd>> = BTreeMap::new();
    for &(tgid, fd, inode) in holders {
        if listening.contains_key(&inode) {
            let slot = listen_fds.entry((tgid, inode)).or_insert(fd);
            *slot = (*slot).min(fd);
        } else if connected.contains(&inode) {
            conns
                .entry(tgid)
                .or_default()
                .push(ConnectedFd { fd, inode });
        }
    }
    listen_fds
        .into_iter()
        .filter_map(|((pid, inode), listen_fd)| {
            let path = PathBuf::from(listening.get(&inode)?);
            let mut connections = conns.get(&pid).cloned().unwrap_or_default();
            connections.sort_by_key(|c| (c.fd, c.inode));
            connections.dedup_by_key(|c| c.fd);
            Some(Listener {
                path,
                pid,
                listen_fd,
                inode,
                connections,
            })
        })
        .collect()
}

/// Finds every process holding the listening socket bound at `path`, with its accepted fds.
///
/// Accepted sockets carry the listener's address (af_unix.c `unix_stream_connect` copies
/// `otheru->addr` to the new socket), so they show the same path in /proc/net/unix. Only sockets
/// of our network namespace are seen. Connections accepted after the /proc/net/unix snapshot are
/// missed (the eBPF probes see those).
pub fn find_listeners(path: &Path) -> Result<Vec<Listener>, DiscoveryError> {
    let entries = read_proc_net_unix(None)?;
    let mut matcher = PathMatcher::new(path);
    let mut listening = BTreeMap::new();
    let mut connected = HashSet::new();
    for e in &entries {
        let Some(p) = e.path.as_deref() else { continue };
        if !matcher.matches(p) {
            continue;
        }
        if e.listening {
            listening.insert(e.inode, p.to_owned());
        } else {
            connected.insert(e.inode);
        }
    }
    let Some(&first_inode) = listening.keys().next() else {
        return Err(DiscoveryError::NoListener {
            path: path.to_path_buf(),
        });
    };
    let wanted: HashSet<u64> = listening.keys().chain(connected.iter()).copied().collect();
    let scan = scan_holders(&wanted);
    let listeners = assemble_listeners(&listening, &connected, &scan.holders);
    if listeners.is_empty() {
        // Unprivileged: the holder is most likely one of the processes we could not read.
        if let Some(denied) = scan.denied {
            return Err(DiscoveryError::PermissionDenied { path: denied });
        }
        return Err(DiscoveryError::NoHolder {
            path: path.to_path_buf(),
            inode: first_inode,
        });
    }
    Ok(listeners)
}

/// Result of a scan over `/proc/<tgid>/fd.`
struct HolderScan {
    /// `(tgid, fd, inode)`, sorted.
    holders: Vec<(u32, u32, u64)>,
    /// First fd directory we were refused, if any (for the "run as root" hint).
    denied: Option<PathBuf>,
}

/// Scans all `/proc/<tgid>/fd` for sockets in `inodes`, noting permission failures.
fn scan_holders(inodes: &HashSet<u64>) -> HolderScan {
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
pub fn find_socket_holders(inodes: &HashSet<u64>) -> Vec<(u32, u32, u64)> {
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

/// Identity of a process, for reports.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ProcessInfo {
    /// The pid asked for.
    pub pid: u32,
    /// The comm that `/proc/<pid>/comm` shows (at most 15 bytes, set by the process itself).
    pub comm: String,
    /// `/proc/<pid>/cmdline` split at NULs; empty for kernel threads and zombies.
    pub cmdline: Vec<String>,
    /// `/proc/<pid>/exe` target (may end in " (deleted)"); `None` if unreadable (not root).
    pub exe: Option<String>,
}

/// Reads comm, cmdline and exe of `pid` (all from one procfs handle); `None` if the process
/// is gone.
pub fn process_info(pid: u32) -> Option<ProcessInfo> {
    let process = open_process(pid).ok()?;
    let comm = process.stat().ok()?.comm;
    let cmdline = read_cmdline(&process).unwrap_or_default();
    let exe = process.exe().ok().map(|p| p.to_string_lossy().into_owned());
    Some(ProcessInfo {
        pid,
        comm,
        cmdline,
        exe,
    })
}

/// `/proc/<pid>/cmdline`, split by [`parse_nul_separated`].
///
/// procfs opens the file; the split stays hand-written because procfs's `cmdline()` drops
/// empty arguments and fails on an argument that is not UTF-8 (this reads it lossily).
fn read_cmdline(process: &Process) -> Option<Vec<String>> {
    let mut bytes = Vec::new();
    process
        .open_relative("cmdline")
        .ok()?
        .read_to_end(&mut bytes)
        .ok()?;
    Some(parse_nul_separated(&bytes))
}

/// What /proc/PID/stat says of a process that discovery and the node
/// inspection use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ProcStat {
    pub comm: String,
    /// R, S, D (uninterruptible), Z (zombie), T...
    pub state: String,
    pub ppid: u32,
}

/// `/proc/PID/stat` of `pid`, parsed by procfs (which takes the comm up to the *last* ')', so
/// a comm holding spaces and parentheses is read whole, and decodes it lossily).
pub(crate) fn proc_stat(pid: u32) -> Option<ProcStat> {
    stat_of(&open_process(pid).ok()?)
}

/// [`proc_stat`] of an open process.
pub(crate) fn stat_of(process: &Process) -> Option<ProcStat> {
    let stat = process.stat().ok()?;
    Some(ProcStat {
        comm: stat.comm,
        state: stat.state.to_string(),
        ppid: u32::try_from(stat.ppid).ok()?,
    })
}

/// The comm of `pid` (at most 15 bytes, set by the process itself); `None` if the process is
/// gone. Read from /proc/PID/stat, whose comm field is the one /proc/PID/comm shows
/// (fs/proc/array.c `proc_task_name` for both): procfs has no reader of the comm file.
pub(crate) fn read_comm(pid: u32) -> Option<String> {
    proc_stat(pid).map(|s| s.comm)
}

/// Splits NUL-separated /proc data (cmdline); a trailing NUL ends the last item.
///
/// A process that rewrote its argv (setproctitle) may leave no NUL at all; then the whole
/// buffer is one item.
fn parse_nul_separated(bytes: &[u8]) -> Vec<String> {
    if bytes.is_empty() {
        return Vec::new();
    }
    let bytes = bytes.strip_suffix(b"\0").unwrap_or(bytes);
    bytes
        .split(|&b| b == 0)
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect()
}

/// The environment of `pid` at exec (`/proc/<pid>/environ`, not later setenv), by procfs.
///
/// Not bounded here: procfs's `environ()` reads the whole file and takes no limit (nor did
/// the reader it replaced). The kernel bounds an environment by the exec argument limits; only
/// a process with CAP_SYS_RESOURCE can point its environ elsewhere (PR_SET_MM_ENV_START/END).
/// A name that appears twice has its last value (procfs keeps the later one in its map).
fn environ_of(pid: u32) -> Option<HashMap<OsString, OsString>> {
    open_process(pid).ok()?.environ().ok()
}

/// Reads variable `name` from `/proc/<pid>/environ` (the environment at exec, not later setenv).
pub fn process_env_var(pid: u32, name: &str) -> Option<String> {
    if name.is_empty() {
        return None;
    }
    env_value(&environ_of(pid)?, name)
}

/// The value of `name` in an environ map, lossily decoded.
fn env_value(env: &HashMap<OsString, OsString>, name: &str) -> Option<String> {
    env.get(OsStr::new(name))
        .map(|v| v.to_string_lossy().into_owned())
}

/// Returns the thread-group id of `pid` (which may be a thread id), from `/proc/<pid>/status.`
///
/// The status readers ([`tgid_of`], [`process_euid`]) stay hand-written: procfs's `status()`
/// reads the file as UTF-8 lines, and the kernel prints the comm on its Name line without
/// escaping bytes >= 0x80 (fs/proc/array.c `proc_task_name`), so a process could hide from
/// procfs with a non-UTF-8 comm; this reads the one line needed, lossily.
pub fn tgid_of(pid: u32) -> Option<u32> {
    let bytes = fs::read(format!("/proc/{pid}/status")).ok()?;
    parse_status_tgid(&String::from_utf8_lossy(&bytes))
}

/// Parses the `Tgid:` line of `/proc/<pid>/status` (fs/proc/array.c `task_state`).
fn parse_status_tgid(status: &str) -> Option<u32> {
    status.lines().find_map(|line| {
        let v = line.strip_prefix("Tgid:")?.trim();
        parse_dec_u64(v).and_then(|v| u32::try_from(v).ok())
    })
}

/// Reads the variables `names` from `/proc/<pid>/environ` with one read; absent ones are left out.
///
/// Like `process_env_var`, this is the environment at exec. An unreadable environ (process
/// gone, not root) gives an empty map: callers use it for reports only.
pub fn process_env(pid: u32, names: &[String]) -> BTreeMap<String, String> {
    if names.is_empty() {
        return BTreeMap::new();
    }
    let Some(env) = environ_of(pid) else {
        return BTreeMap::new();
    };
    names
        .iter()
        .filter(|n| !n.is_empty())
        .filter_map(|n| Some((n.clone(), env_value(&env, n)?)))
        .collect()
}

/// Effective uid of `pid`, from `/proc/<pid>/status` (readable for any process).
pub fn process_euid(pid: u32) -> Option<u32> {
    let bytes = fs::read(format!("/proc/{pid}/status")).ok()?;
    parse_status_euid(&String::from_utf8_lossy(&bytes))
}

/// Parses the effective uid, the second of the four ids on the `Uid:` line of
/// `/proc/<pid>/status` (real, effective, saved, fs: fs/proc/array.c `task_state`).
fn parse_status_euid(status: &str) -> Option<u32> {
    status.lines().find_map(|line| {
        let mut ids = line.strip_prefix("Uid:")?.split_whitespace();
        let _real = ids.next()?;
        parse_dec_u64(ids.next()?).and_then(|v| u32::try_from(v).ok())
    })
}

/// Most bytes of `/proc/<pid>/cgroup` read: one line per hierarchy (13 on a v1 node), each a
/// path below PATH_MAX (4096); anything past this is not a cgroup file this parser knows.
const MAX_PROC_CGROUP: u64 = 64 * 1024;

/// The cgroup of `pid`, as [`parse_proc_cgroup`] picks it from `/proc/<pid>/cgroup`; `None` if
/// the process is gone or the file says nothing usable.
///
/// Hand-written, like the status readers: procfs's `cgroups()` reads the whole file as UTF-8
/// lines with no bound; this reads at most [`MAX_PROC_CGROUP`] bytes and decodes lossily (a
/// cgroup name is any bytes but '/' and NUL, chosen by whoever made the cgroup). The path is
/// relative to the *reader's* cgroup namespace root (cgroup_namespaces(7)): nri-trace in a
/// container with its own cgroup namespace sees a host process's path as `/../..`-prefixed.
pub fn process_cgroup(pid: u32) -> Option<String> {
    let mut bytes = Vec::new();
    fs::File::open(format!("/proc/{pid}/cgroup"))
        .ok()?
        .take(MAX_PROC_CGROUP)
        .read_to_end(&mut bytes)
        .ok()?;
    parse_proc_cgroup(&String::from_utf8_lossy(&bytes))
}

/// The cgroup path a `/proc/<pid>/cgroup` text gives (lines `hierarchy-ID:controllers:path`,
/// cgroups(7)): the cgroup v2 path (the `0::` line), which is where systemd places units on a
/// unified or hybrid node. Where there is none, or it is the root `/` while the `name=systemd`
/// v1 hierarchy names a deeper cgroup (a legacy node, or a hybrid one whose systemd tracks
/// units in v1), that hierarchy's path: systemd's own (systemd's "Control Group APIs and
/// Delegation" document). `/` when that is all the file says; `None` with no v2 or systemd line.
pub fn parse_proc_cgroup(text: &str) -> Option<String> {
    let mut v2 = None;
    let mut systemd = None;
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if path.is_empty() {
            continue;
        }
        if id == "0" && controllers.is_empty() {
            v2.get_or_insert(path);
        } else if controllers == "name=systemd" {
            systemd.get_or_insert(path);
        }
    }
    match (v2, systemd) {
        (Some("/") | None, Some(s)) if s != "/" => Some(s.to_string()),
        (Some(p), _) | (None, Some(p)) => Some(p.to_string()),
        (None, None) => None,
    }
}

// ------------------------------------------------------------------------------------------
// Peers of unix sockets, from NETLINK_SOCK_DIAG.
//
// /proc/net/unix has no peer column, and SO_PEERCRED of a socketpair() end names the process
// that *created* the pair (net/unix/af_unix.c `unix_socketpair` calls `init_peercred` on both
// ends): for the pair containerd creates to launch an NRI plugin, that is containerd itself,
// not the plugin it handed the other end to. The sock_diag dump of AF_UNIX sockets does report
// the inode of each connected socket's peer (net/unix/diag.c `sk_diag_dump_peer`, attribute
// UNIX_DIAG_PEER); whoever holds that inode in /proc/<pid>/fd is the peer process.

// The messages are netlink-packet-sock-diag's (`UnixRequest`, `UnixResponse` and its
// `Nla::Peer`) in netlink-packet-core's framing, sent and received on a netlink-sys socket.

/// `sizeof(struct nlmsghdr)` (include/uapi/linux/netlink.h): a datagram's tail shorter than
/// this is no message and is ignored, as the kernel's NLMSG_OK does.
const NLMSG_HDRLEN: usize = 16;
/// Receive buffer for one datagram. netlink_dump (net/netlink/af_netlink.c) fills skbs of at
/// most 32 KiB; a larger datagram is detected with MSG_TRUNC and refused, never half-parsed.
const DIAG_RECV_BUF: usize = 64 * 1024;
/// Bound on the datagrams of one dump, so that nothing can keep us looping. One socket takes
/// 40 bytes (header, unix_diag_msg, peer attribute) and a datagram at least a page, so this
/// bound is millions of sockets.
const DIAG_MAX_DATAGRAMS: usize = 1 << 16;
/// How long one recv() waits for the kernel before the dump is given up.
const DIAG_RECV_TIMEOUT: Duration = Duration::from_secs(5);
/// Sequence number of our dump request ("nrit"); each dump uses a fresh socket.
const DIAG_SEQ: u32 = 0x6e72_6974;

/// A malformed-reply error.
fn bad_reply(reason: String) -> DiscoveryError {
    DiscoveryError::SockDiagReply { reason }
}

/// The request for every AF_UNIX socket with its peer (`inode` `None`: NLM_F_DUMP), or for
/// the one socket `inode` (no NLM_F_DUMP: net/unix/diag.c `unix_diag_get_exact`).
fn unix_diag_request(seq: u32, inode: Option<u32>) -> Vec<u8> {
    let mut header = NetlinkHeader::default();
    header.flags = match inode {
        None => NLM_F_REQUEST | NLM_F_DUMP,
        Some(_) => NLM_F_REQUEST,
    };
    header.sequence_number = seq;
    let request = UnixRequest {
        // All states: unix_diag_dump tests `udiag_states & (1 << sk->sk_state)`. A socket has
        // a peer only when connected, so asking for TCP_ESTABLISHED only would do for stream
        // sockets, but a connected datagram socket stays TCP_CLOSE on older kernels and still
        // has a peer. The crate names only ESTABLISHED and LISTEN; from_bits_retain keeps
        // the other bits.
        state_flags: StateFlags::from_bits_retain(u32::MAX),
        // udiag_ino: ignored by a dump.
        inode: inode.unwrap_or(0),
        show_flags: ShowFlags::PEER,
        // udiag_cookie: ignored by a dump; for one socket INET_DIAG_NOCOOKIE (all ones),
        // which `sock_diag_check_cookie` accepts for any socket.
        cookie: if inode.is_some() { [0xff; 8] } else { [0; 8] },
    };
    let mut msg = NetlinkMessage::new(header, SockDiagMessage::UnixRequest(request).into());
    // Sets the length and the message type (SOCK_DIAG_BY_FAMILY).
    msg.finalize();
    let mut buf = vec![0u8; msg.buffer_len()];
    msg.serialize(&mut buf);
    buf
}

/// Where a sock_diag dump stands after one datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DumpStep {
    /// More datagrams follow.
    More,
    /// NLMSG_DONE was seen: the dump is complete.
    Done,
}

/// Parses one datagram of a unix sock_diag dump into `peers` (socket inode -> peer inode).
///
/// netlink-packet-core checks each message's length against the datagram and decodes
/// NLMSG_DONE/NLMSG_ERROR, netlink-packet-sock-diag the `unix_diag_msg` and its attributes; a
/// message either refuses is an error (its neighbours cannot be trusted either). Messages of
/// other sequence numbers, replies of other families, NLMSG_NOOP and unknown types carry
/// nothing for us and are skipped undecoded; trailing bytes too short for a header are ignored
/// (the NLMSG_OK rule of the kernel's own parsers).
fn parse_unix_diag_datagram(
    buf: &[u8],
    seq: u32,
    peers: &mut HashMap<u64, u64>,
) -> Result<DumpStep, DiscoveryError> {
    let mut off = 0usize;
    while buf.len().saturating_sub(off) >= NLMSG_HDRLEN {
        let at = off;
        let rest = &buf[at..];
        let frame = NetlinkBuffer::new_checked(rest)
            .map_err(|e| bad_reply(format!("netlink message at byte {at}: {e}")))?;
        // new_checked made sure that the length is at least a header and fits the datagram.
        let len = usize::try_from(frame.length()).unwrap_or(usize::MAX);
        let (kind, msg_seq) = (frame.message_type(), frame.sequence_number());
        let family = frame.payload().first().copied();
        // NLMSG_ALIGN: the next message starts on a 4-byte boundary.
        off = at.saturating_add(len.saturating_add(3) & !3);
        if msg_seq != seq {
            continue;
        }
        match kind {
            NLMSG_DONE | NLMSG_ERROR => {}
            SOCK_DIAG_BY_FAMILY if family == Some(AF_UNIX) => {}
            _ => continue,
        }
        let msg = NetlinkMessage::<SockDiagMessage>::deserialize(&rest[..len.min(rest.len())])
            .map_err(|e| bad_reply(format!("netlink message at byte {at}: {e}")))?;
        if msg.header.flags & NLM_F_DUMP_INTR != 0 {
            // unix_diag does not set it today; if it did, a socket may be missing or doubled.
            log::debug!("sock_diag dump was interrupted by a concurrent change");
        }
        match msg.payload {
            NetlinkPayload::Done(done) => {
                // Since Linux 4.x the payload is the dump's final errno (netlink_dump_done);
                // older kernels send no payload, which the crate reads as 0.
                return if done.code < 0 {
                    Err(DiscoveryError::SockDiag {
                        error: io::Error::from_raw_os_error(done.code.saturating_neg()),
                    })
                } else {
                    Ok(DumpStep::Done)
                };
            }
            // struct nlmsgerr: a negative errno, or 0 for an ACK (skipped).
            NetlinkPayload::Error(e) => match e.raw_code() {
                0 => {}
                code if code < 0 => {
                    return Err(DiscoveryError::SockDiag {
                        error: io::Error::from_raw_os_error(code.saturating_neg()),
                    })
                }
                code => return Err(bad_reply(format!("NLMSG_ERROR with positive error {code}"))),
            },
            NetlinkPayload::InnerMessage(SockDiagMessage::UnixResponse(r)) => {
                // Inode 0: a peer already released (sock_i_ino of an orphaned sock is 0);
                // nothing holds it.
                let inode = r.header.inode;
                if let Some(p) = r.peer().filter(|&p| p != 0 && inode != 0) {
                    peers.insert(u64::from(inode), u64::from(p));
                }
            }
            _ => {}
        }
    }
    Ok(DumpStep::More)
}

/// A NETLINK_SOCK_DIAG socket with a receive timeout, for one request.
fn diag_socket() -> Result<Socket, DiscoveryError> {
    let sys = |error: io::Error| DiscoveryError::SockDiag { error };
    let sock = Socket::new(NETLINK_SOCK_DIAG).map_err(sys)?;
    // netlink-sys has no receive timeout: SO_RCVTIMEO by hand.
    let timeout = libc::timeval {
        tv_sec: DIAG_RECV_TIMEOUT.as_secs() as libc::time_t,
        tv_usec: 0,
    };
    // SAFETY: `timeout` is a live timeval of the size passed; the socket is open.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            std::ptr::addr_of!(timeout).cast::<libc::c_void>(),
            size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(sys(io::Error::last_os_error()));
    }
    Ok(sock)
}

/// Sends one request to the kernel (port id 0) on a sock_diag socket.
fn diag_send(sock: &Socket, req: &[u8]) -> Result<(), DiscoveryError> {
    let sys = |error: io::Error| DiscoveryError::SockDiag { error };
    let sent = sock.send_to(req, &SocketAddr::new(0, 0), 0).map_err(sys)?;
    if sent != req.len() {
        return Err(sys(io::Error::new(
            io::ErrorKind::WriteZero,
            format!("short send of the request ({sent} of {} bytes)", req.len()),
        )));
    }
    Ok(())
}

/// Receives one datagram from the kernel into `buf`; returns its length, or `None` for a
/// datagram that did not come from the kernel (to be ignored). Retries on EINTR.
fn diag_recv(sock: &Socket, buf: &mut [u8]) -> Result<Option<usize>, DiscoveryError> {
    let sys = |error: io::Error| DiscoveryError::SockDiag { error };
    loop {
        // MSG_TRUNC: the return value is the datagram's real length even when it did not fit
        // (net/netlink/af_netlink.c `netlink_recvmsg`), so truncation is detected.
        let mut space: &mut [u8] = &mut buf[..];
        let (n, from) = match sock.recv_from(&mut space, libc::MSG_TRUNC) {
            Ok(r) => r,
            Err(e) => match e.kind() {
                io::ErrorKind::Interrupted => continue,
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => {
                    return Err(sys(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("no reply from the kernel within {DIAG_RECV_TIMEOUT:?}"),
                    )))
                }
                _ => return Err(sys(e)),
            },
        };
        if n > buf.len() {
            return Err(bad_reply(format!(
                "datagram of {n} bytes does not fit the {}-byte buffer",
                buf.len()
            )));
        }
        // Only the kernel (port id 0) answers; ignore anything else sent to our port.
        return Ok((from.port_number() == 0).then_some(n));
    }
}

/// Maps the inode of every connected unix socket of our network namespace to its peer's inode.
///
/// One NETLINK_SOCK_DIAG dump (net/unix/diag.c). Needs no privilege (`ss -x` works as any
/// user) but needs CONFIG_UNIX_DIAG, usually the module unix_diag that the kernel loads on
/// demand. Sees our network namespace only. Socket inodes are 32-bit in the dump
/// (`udiag_ino`), as they are in the kernel (`get_next_ino`).
pub fn unix_peers() -> Result<HashMap<u64, u64>, DiscoveryError> {
    let sock = diag_socket()?;
    diag_send(&sock, &unix_diag_request(DIAG_SEQ, None))?;
    let mut buf = vec![0u8; DIAG_RECV_BUF];
    let mut peers = HashMap::new();
    for _ in 0..DIAG_MAX_DATAGRAMS {
        let Some(n) = diag_recv(&sock, &mut buf)? else {
            continue;
        };
        if parse_unix_diag_datagram(&buf[..n], DIAG_SEQ, &mut peers)? == DumpStep::Done {
            return Ok(peers);
        }
    }
    Err(bad_reply(format!(
        "no NLMSG_DONE after {DIAG_MAX_DATAGRAMS} datagrams"
    )))
}

/// The inode of the peer of unix socket `inode`, asked of the kernel for that one socket.
///
/// Much cheaper than [`unix_peers`] on a host with many sockets: the kernel looks the socket
/// up and answers one message. `Ok(None)`: no such socket in our network namespace (closed,
/// or another netns), or it has no peer (not connected, or the peer is gone). Same
/// requirements as [`unix_peers`], but a kernel without unix_diag answers ENOENT here too,
/// so it also gives `Ok(None)`: call [`unix_peers`] once to tell that case apart.
pub fn unix_peer_of(inode: u64) -> Result<Option<u64>, DiscoveryError> {
    let Ok(ino) = u32::try_from(inode) else {
        return Ok(None); // sock_diag inodes are 32-bit: not a socket it knows
    };
    if ino == 0 {
        return Ok(None);
    }
    let sock = diag_socket()?;
    diag_send(&sock, &unix_diag_request(DIAG_SEQ, Some(ino)))?;
    // One message (or an NLMSG_ERROR) answers; a page is plenty for it.
    let mut buf = vec![0u8; 8192];
    for _ in 0..16 {
        let Some(n) = diag_recv(&sock, &mut buf)? else {
            continue;
        };
        let mut peers = HashMap::new();
        return match parse_unix_diag_datagram(&buf[..n], DIAG_SEQ, &mut peers) {
            Ok(_) => Ok(peers.get(&inode).copied()),
            Err(DiscoveryError::SockDiag { error })
                if error.raw_os_error() == Some(libc::ENOENT) =>
            {
                Ok(None)
            }
            Err(e) => Err(e),
        };
    }
    Err(bad_reply(
        "no reply from the kernel to a sock_diag query".into(),
    ))
}

/// The inode of the socket behind fd `fd` of `pid` (its `socket:[N]` link); `None` if the
/// fd is not open or not a socket.
pub fn fd_socket_inode(pid: u32, fd: u32) -> Option<u64> {
    let fd = i32::try_from(fd).ok()?;
    match open_process(pid).ok()?.fd_from_fd(fd).ok()?.target {
        FDTarget::Socket(inode) => Some(inode),
        _ => None,
    }
}

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
pub fn env_peer_sockets(pids: &[u32], var: &str) -> Result<Vec<EnvPeerSocket>, DiscoveryError> {
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
    use proptest::prelude::*;

    use super::*;
    use std::os::unix::fs::symlink;
    use std::os::unix::net::{UnixListener, UnixStream};

    /// A comm with spaces and parentheses (exec names the process after the file, so a
    /// symlink named so gives it), and one with a non-UTF-8 byte: stat's comm, state and ppid
    /// come through whole; status (hand-read) still gives the Tgid and Uid.
    #[test]
    fn stat_fields_survive_odd_comms() {
        use std::os::unix::ffi::OsStrExt;
        let me = std::process::id();
        let st = proc_stat(me).expect("our own stat");
        assert_eq!(st.ppid, std::os::unix::process::parent_id());
        assert!(matches!(st.state.as_str(), "R" | "S"), "{st:?}");
        assert_eq!(read_comm(me).as_deref(), Some(st.comm.as_str()));
        let sleep = ["/bin/sleep", "/usr/bin/sleep"]
            .into_iter()
            .find(|p| Path::new(p).exists())
            .expect("sleep");
        let dir = TempDir::new("comm");
        for (name, want) in [
            (OsStr::new("a) b (c)"), "a) b (c)"),
            (OsStr::from_bytes(b"x\xffy"), "x\u{fffd}y"),
        ] {
            let link = dir.0.join(name);
            symlink(sleep, &link).expect("symlink");
            let child = KillOnDrop(
                std::process::Command::new(&link)
                    .arg("60")
                    .spawn()
                    .expect("spawn"),
            );
            let pid = child.0.id();
            let st = proc_stat(pid).expect("child stat");
            assert_eq!((st.comm.as_str(), st.ppid), (want, me), "{st:?}");
            assert_eq!(read_comm(pid).as_deref(), Some(want));
            assert_eq!(tgid_of(pid), Some(pid));
            assert_eq!(process_euid(pid), Some(euid()));
            assert_eq!(process_info(pid).map(|i| i.comm).as_deref(), Some(want));
        }
        assert_eq!(proc_stat(u32::MAX), None);
        assert_eq!(proc_stat(i32::MAX as u32), None);
    }

    /// The header line as printed by af_unix.c.
    const HEADER: &str = "Num       RefCount Protocol Flags    Type St Inode Path";

    /// A temp dir removed on drop, unique per test and process.
    struct TempDir(PathBuf);

    impl TempDir {
        /// Creates `$TMPDIR/nri-trace-discovery-<pid>-<tag>-<nanos>`.
        fn new(tag: &str) -> TempDir {
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
    fn euid() -> u32 {
        // SAFETY: geteuid has no arguments and cannot fail.
        unsafe { libc::geteuid() }
    }

    /// Good lines: listener, accepted connection, unnamed, seqpacket.
    #[test]
    fn parse_good_lines() {
        let text = format!(
            "{HEADER}\n\
             0000000000000000: 00000002 00000000 00010000 0001 01 23456 /run/containerd/containerd.sock\n\
             0000000000000000: 00000003 00000000 00000000 0001 03 23460 /run/containerd/containerd.sock\n\
             000000003ab19994: 00000003 00000000 00000000 0001 03  6524\n\
             ffff8f0a12345678: 00000002 00000000 00010000 0005 01 99999999999 /var/run/nri/nri.sock\n\
             0000000000000000: 00000002 00000000 00000000 0002 01   123 /run/systemd/notify\n"
        );
        let e = parse_proc_net_unix(&text);
        assert_eq!(e.len(), 5);
        assert_eq!(
            e[0],
            UnixSocketEntry {
                inode: 23456,
                path: Some("/run/containerd/containerd.sock".into()),
                listening: true,
                state: 1,
                sock_type: 1,
            }
        );
        assert!(!e[1].listening);
        assert_eq!(e[1].state, 3);
        assert_eq!(e[1].inode, 23460);
        assert_eq!(e[2].path, None);
        assert_eq!(e[2].inode, 6524);
        assert_eq!(e[3].sock_type, 5);
        assert!(e[3].listening);
        assert_eq!(e[3].inode, 99_999_999_999);
        assert_eq!(e[3].path.as_deref(), Some("/var/run/nri/nri.sock"));
        assert_eq!(e[4].sock_type, 2);
        assert_eq!(e[4].inode, 123);
    }

    /// Abstract sockets keep the kernel's leading '@' (and '@' for embedded NULs).
    #[test]
    fn parse_abstract() {
        let text =
            "0000000000000000: 00000002 00000000 00010000 0001 01 777 @/containerd-shim/abc.sock\n\
                    0000000000000000: 00000002 00000000 00000000 0002 01 778 @0001f\n\
                    0000000000000000: 00000002 00000000 00000000 0002 01 779 @a@b\n";
        let e = parse_proc_net_unix(text);
        assert_eq!(e.len(), 3);
        assert_eq!(e[0].path.as_deref(), Some("@/containerd-shim/abc.sock"));
        assert_eq!(e[1].path.as_deref(), Some("@0001f"));
        assert_eq!(e[2].path.as_deref(), Some("@a@b"));
    }

    /// Paths are the rest of the line: inner, leading and trailing spaces are kept.
    #[test]
    fn parse_spaces_in_path() {
        let text = "0000000000000000: 00000002 00000000 00010000 0001 01 1 /run/my dir/a b.sock\n\
                    0000000000000000: 00000002 00000000 00010000 0001 01 2  lead\n\
                    0000000000000000: 00000002 00000000 00010000 0001 01 3 /trail \n\
                    0000000000000000: 00000002 00000000 00010000 0001 01     4 /x\r\n";
        let e = parse_proc_net_unix(text);
        assert_eq!(e.len(), 4);
        assert_eq!(e[0].path.as_deref(), Some("/run/my dir/a b.sock"));
        assert_eq!(e[1].path.as_deref(), Some(" lead"));
        assert_eq!(e[2].path.as_deref(), Some("/trail "));
        assert_eq!(e[3].path.as_deref(), Some("/x"));
        assert_eq!(e[3].inode, 4);
    }

    /// Missing path (unnamed socket) with and without a trailing separator.
    #[test]
    fn parse_missing_path() {
        let text = "0000000000000000: 00000003 00000000 00000000 0001 03 42\n\
                    0000000000000000: 00000003 00000000 00000000 0001 03 43 \n";
        let e = parse_proc_net_unix(text);
        assert_eq!(e.len(), 2);
        assert_eq!(e[0].path, None);
        assert_eq!(e[1].path, None);
    }

    /// Garbage, truncated and malformed lines are skipped, good ones around them kept.
    #[test]
    fn parse_garbage() {
        let bad = [
            "",
            "   ",
            HEADER,
            "hello world",
            "0000000000000000: 00000002 00000000 00010000 0001 01",
            "0000000000000000 00000002 00000000 00010000 0001 01 5 /no/colon",
            "zzzz: 00000002 00000000 00010000 0001 01 5 /bad/num",
            "0000000000000000: 0000000g 00000000 00010000 0001 01 5 /bad/ref",
            "0000000000000000: 00000002 00000000 0001000x 0001 01 5 /bad/flags",
            "0000000000000000: 00000002 00000000 100000000 0001 01 5 /flags/overflow",
            "0000000000000000: 00000002 00000000 00010000 10001 01 5 /type/overflow",
            "0000000000000000: 00000002 00000000 00010000 0001 100 5 /state/overflow",
            "0000000000000000: 00000002 00000000 00010000 0001 01 abc /bad/inode",
            "0000000000000000: 00000002 00000000 00010000 0001 01 +5 /signed/inode",
            "0000000000000000: 00000002 00000000 00010000 0001 01 -5 /neg/inode",
            "0000000000000000: 00000002 00000000 00010000 0001 01 99999999999999999999999 /big",
            "0000000000000000: +0000002 00000000 00010000 0001 01 5 /plus",
            "\u{fffd}\u{fffd}: 00000002 00000000 00010000 0001 01 5 /utf8",
        ];
        for line in bad {
            assert_eq!(parse_proc_net_unix(line), vec![], "line {line:?}");
        }
        let mut text = bad.join("\n");
        text.push_str("\n0000000000000000: 00000002 00000000 00010000 0001 01 9 /ok\nnot a line");
        let e = parse_proc_net_unix(&text);
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].inode, 9);
        // Arbitrary bytes must not panic.
        let noise: String = (0u32..2000)
            .filter_map(|i| char::from_u32((i * 7919) % 0x2fff))
            .collect();
        let _ = parse_proc_net_unix(&noise);
    }

    /// cmdline and status parsers.
    #[test]
    fn parse_proc_small_files() {
        assert_eq!(
            parse_nul_separated(b"/usr/bin/containerd\0--config\0/etc/c.toml\0"),
            vec!["/usr/bin/containerd", "--config", "/etc/c.toml"]
        );
        assert_eq!(
            parse_nul_separated(b"title set by process"),
            vec!["title set by process"]
        );
        assert_eq!(parse_nul_separated(b""), Vec::<String>::new());
        assert_eq!(parse_nul_separated(b"\0"), vec![""]);
        assert_eq!(parse_nul_separated(b"a\0\0b\0"), vec!["a", "", "b"]);

        let status = "Name:\tcontainerd\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t1234\nNgid:\t0\nPid:\t1240\n";
        assert_eq!(parse_status_tgid(status), Some(1234));
        assert_eq!(parse_status_tgid("Tgid:\tx\n"), None);
        assert_eq!(parse_status_tgid("Tgid:\t99999999999\n"), None);
        assert_eq!(parse_status_tgid(""), None);
    }

    /// The environ readers (procfs's map): values with '=', empty values, names that are only
    /// a prefix of a variable, and names that cannot be variables.
    #[test]
    fn environ_of_a_child() {
        let child = KillOnDrop(
            std::process::Command::new("sleep")
                .arg("60")
                .env_clear()
                .env("PATH", "/bin:/usr/bin")
                .env("NRI_SOCKET", "/var/run/nri/nri.sock")
                .env("EMPTY", "")
                .env("A", "b=c")
                .env("NRI", "x")
                .spawn()
                .expect("spawn sleep"),
        );
        let pid = child.0.id();
        let var = |n: &str| process_env_var(pid, n);
        assert_eq!(var("PATH").as_deref(), Some("/bin:/usr/bin"));
        assert_eq!(var("NRI_SOCKET").as_deref(), Some("/var/run/nri/nri.sock"));
        assert_eq!(var("NRI").as_deref(), Some("x"));
        assert_eq!(var("EMPTY").as_deref(), Some(""));
        assert_eq!(var("A").as_deref(), Some("b=c"));
        for none in ["PAT", "NRI_", "", "A=b", "A\0"] {
            assert_eq!(var(none), None, "{none:?}");
        }
        let names: Vec<String> = ["A", "EMPTY", "PAT", ""].map(String::from).into();
        let env = process_env(pid, &names);
        let want: BTreeMap<String, String> = [
            ("A".to_string(), "b=c".to_string()),
            ("EMPTY".to_string(), String::new()),
        ]
        .into();
        assert_eq!(env, want);
    }

    /// Grouping holders into listeners, without /proc.
    #[test]
    fn assemble() {
        let listening: BTreeMap<u64, String> = [(100, "/run/a.sock".to_string())].into();
        let connected: HashSet<u64> = [200, 201, 202].into();
        let holders = [
            (10, 5, 100),
            (10, 3, 100), // dup of the listener: lowest fd wins
            (10, 9, 201),
            (10, 7, 200),
            (10, 8, 999), // unrelated socket
            (20, 4, 100), // forked child sharing the listener
            (30, 6, 202), // connection passed to a process without the listener
        ];
        let l = assemble_listeners(&listening, &connected, &holders);
        assert_eq!(l.len(), 2);
        assert_eq!((l[0].pid, l[0].listen_fd, l[0].inode), (10, 3, 100));
        assert_eq!(l[0].path, PathBuf::from("/run/a.sock"));
        let fds: Vec<(u32, u64)> = l[0].connections.iter().map(|c| (c.fd, c.inode)).collect();
        assert_eq!(fds, vec![(7, 200), (9, 201)]);
        assert_eq!((l[1].pid, l[1].listen_fd), (20, 4));
        assert!(l[1].connections.is_empty());
        assert!(assemble_listeners(&listening, &connected, &[]).is_empty());
    }

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

    /// Nonexistent path: NoListener.
    #[test]
    fn no_listener() {
        let dir = TempDir::new("none");
        let p = dir.0.join("nothing.sock");
        match find_listeners(&p) {
            Err(DiscoveryError::NoListener { path }) => assert_eq!(path, p),
            other => panic!("expected NoListener, got {other:?}"),
        }
    }

    /// Path matching follows directory symlinks in both directions.
    #[test]
    fn path_matcher_symlinks() {
        let dir = TempDir::new("match");
        let real = dir.0.join("real");
        fs::create_dir(&real).expect("mkdir");
        symlink(&real, dir.0.join("link")).expect("symlink");
        fs::write(real.join("s.sock"), b"").expect("touch");
        let real_sock = fs::canonicalize(real.join("s.sock")).expect("canon");
        let link_sock = dir.0.join("link").join("s.sock");

        let mut m = PathMatcher::new(&link_sock);
        assert!(m.matches(real_sock.to_str().expect("utf8")));
        assert!(m.matches(link_sock.to_str().expect("utf8")));
        assert!(!m.matches("/elsewhere/s.sock"));
        assert!(!m.matches("@s.sock"));
        assert!(!m.matches("s.sock"));

        let mut m = PathMatcher::new(&real_sock);
        assert!(m.matches(link_sock.to_str().expect("utf8")));
        assert!(!m.matches(real.join("other.sock").to_str().expect("utf8")));
    }

    /// tgid_of a thread is the process id; process_info/env of self are readable.
    #[test]
    fn self_process() {
        let me = std::process::id();
        assert_eq!(tgid_of(me), Some(me));
        // A live second thread: its tid differs from the pid but maps back to it.
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            // SAFETY: as above.
            let tid = unsafe { libc::syscall(libc::SYS_gettid) };
            let _ = tx.send(tid);
            let _ = done_rx.recv();
        });
        let tid = u32::try_from(rx.recv().expect("tid")).expect("tid");
        assert_ne!(tid, me);
        assert_eq!(tgid_of(tid), Some(me));
        let _ = done_tx.send(());
        t.join().expect("join");

        let info = process_info(me).expect("own process info");
        assert_eq!(info.pid, me);
        assert!(!info.comm.is_empty());
        assert!(!info.cmdline.is_empty());
        assert!(info.exe.is_some());
        if let Ok(path) = std::env::var("PATH") {
            // environ is the environment at exec; PATH is not changed by the test harness.
            assert_eq!(process_env_var(me, "PATH"), Some(path));
        }
        assert_eq!(process_env_var(me, "NRI_TRACE_SURELY_UNSET_VARIABLE"), None);
        assert!(process_info(u32::MAX).is_none());
        assert!(tgid_of(u32::MAX).is_none());
    }

    /// Live: a listener with one accepted connection in this process is found, with peer creds.
    #[test]
    fn live_listener() {
        let dir = TempDir::new("live");
        let sock = dir.0.join("nri test.sock");
        let listener = UnixListener::bind(&sock).expect("bind");
        let client = UnixStream::connect(&sock).expect("connect");
        let (server, _) = listener.accept().expect("accept");
        let me = std::process::id();
        let listen_fd = u32::try_from(listener.as_raw_fd()).expect("fd");
        let server_fd = u32::try_from(server.as_raw_fd()).expect("fd");

        let listeners = find_listeners(&sock).expect("find_listeners");
        let mine: Vec<&Listener> = listeners.iter().filter(|l| l.pid == me).collect();
        assert_eq!(mine.len(), 1, "{listeners:?}");
        let l = mine[0];
        assert_eq!(l.listen_fd, listen_fd);
        assert_eq!(l.path, sock);
        assert_eq!(l.connections.len(), 1, "{l:?}");
        assert_eq!(l.connections[0].fd, server_fd);

        // The same through a symlinked directory.
        let link = dir.0.join("link");
        symlink(&dir.0, &link).expect("symlink");
        let via_link = find_listeners(&link.join("nri test.sock")).expect("via symlink");
        assert!(via_link
            .iter()
            .any(|l| l.pid == me && l.listen_fd == listen_fd));

        // socket_fds_of and find_socket_holders agree.
        let fds = socket_fds_of(me).expect("own fds");
        assert!(fds.contains(&(listen_fd, l.inode)));
        assert!(fds.contains(&(server_fd, l.connections[0].inode)));
        let holders = find_socket_holders(&[l.inode].into());
        assert!(holders.contains(&(me, listen_fd, l.inode)), "{holders:?}");
        assert!(find_socket_holders(&HashSet::new()).is_empty());

        match peer_cred(me, server_fd) {
            Some(cred) => {
                assert_eq!(cred.pid, me);
                assert_eq!(cred.uid, euid());
            }
            None if euid() != 0 => eprintln!(
                "peer_cred(self) returned None as uid {}: pidfd_getfd needs Linux >= 5.6 and \
                 may be blocked by seccomp/LSM for unprivileged users; assertion skipped",
                euid()
            ),
            None => panic!("peer_cred(self, {server_fd}) returned None as root"),
        }
        // Not a socket, not an fd, not a process: None, no panic.
        let file = fs::File::open("/proc/self/status").expect("open");
        let file_fd = u32::try_from(file.as_raw_fd()).expect("fd");
        assert_eq!(peer_cred(me, file_fd), None);
        assert_eq!(peer_cred(me, 1_000_000), None);
        assert_eq!(peer_cred(u32::MAX, 0), None);
        drop(client);
    }

    // ------------------------------------------------ sock_diag

    // The datagrams below are built byte by byte, as the kernel lays them out, so that the
    // crates' decoding is tested against the kernel's format and not against their own
    // encoder (and so that malformed ones can be made).

    /// `UNIX_DIAG_PEER` (include/uapi/linux/unix_diag.h).
    const UNIX_DIAG_PEER: u16 = 2;
    /// `UDIAG_SHOW_PEER` (include/uapi/linux/unix_diag.h).
    const UDIAG_SHOW_PEER: u32 = 1 << UNIX_DIAG_PEER;
    /// `sizeof(struct nlattr)`.
    const NLA_HDRLEN: usize = 4;

    /// Rounds up to the 4-byte alignment of netlink messages and attributes.
    fn nl_align(len: usize) -> usize {
        (len + 3) & !3
    }

    /// Native-endian u16 at `at`.
    fn ne_u16(b: &[u8], at: usize) -> u16 {
        u16::from_ne_bytes(b[at..at + 2].try_into().expect("2 bytes"))
    }

    /// Native-endian u32 at `at`.
    fn ne_u32(b: &[u8], at: usize) -> u32 {
        u32::from_ne_bytes(b[at..at + 4].try_into().expect("4 bytes"))
    }

    /// One netlink message: header with `kind`, `flags`, `seq`, then `payload`, padded to 4.
    fn nlmsg(kind: u16, flags: u16, seq: u32, payload: &[u8]) -> Vec<u8> {
        let len = u32::try_from(NLMSG_HDRLEN + payload.len()).expect("len");
        let mut m = Vec::new();
        m.extend_from_slice(&len.to_ne_bytes());
        m.extend_from_slice(&kind.to_ne_bytes());
        m.extend_from_slice(&flags.to_ne_bytes());
        m.extend_from_slice(&seq.to_ne_bytes());
        m.extend_from_slice(&4242u32.to_ne_bytes());
        m.extend_from_slice(payload);
        m.resize(nl_align(m.len()), 0);
        m
    }

    /// One attribute, padded to 4.
    fn nla(kind: u16, payload: &[u8]) -> Vec<u8> {
        let len = u16::try_from(NLA_HDRLEN + payload.len()).expect("len");
        let mut a = Vec::new();
        a.extend_from_slice(&len.to_ne_bytes());
        a.extend_from_slice(&kind.to_ne_bytes());
        a.extend_from_slice(payload);
        a.resize(nl_align(a.len()), 0);
        a
    }

    /// A `unix_diag_msg` payload for socket `inode` (stream, established) with `attrs`.
    fn diag_msg(inode: u32, attrs: &[Vec<u8>]) -> Vec<u8> {
        let mut m = vec![libc::AF_UNIX as u8, 1, 1, 0];
        m.extend_from_slice(&inode.to_ne_bytes());
        m.extend_from_slice(&[0xff; 8]); // cookie
        for a in attrs {
            m.extend_from_slice(a);
        }
        m
    }

    /// A SOCK_DIAG_BY_FAMILY message of our sequence for `inode` with peer `peer`.
    fn diag(inode: u32, peer: Option<u32>) -> Vec<u8> {
        let attrs: Vec<Vec<u8>> = peer
            .map(|p| nla(UNIX_DIAG_PEER, &p.to_ne_bytes()))
            .into_iter()
            .collect();
        nlmsg(SOCK_DIAG_BY_FAMILY, 2, DIAG_SEQ, &diag_msg(inode, &attrs))
    }

    /// NLMSG_DONE carrying `errno` (the 4-byte payload of current kernels).
    fn done(errno: i32) -> Vec<u8> {
        nlmsg(libc::NLMSG_DONE as u16, 2, DIAG_SEQ, &errno.to_ne_bytes())
    }

    fn parse(buf: &[u8]) -> (Result<DumpStep, DiscoveryError>, HashMap<u64, u64>) {
        let mut peers = HashMap::new();
        let r = parse_unix_diag_datagram(buf, DIAG_SEQ, &mut peers);
        (r, peers)
    }

    /// The request the crates build is exactly `nlmsghdr` + `unix_diag_req` as include/uapi
    /// lays them out, asking for every state (not only the two the crate names).
    #[test]
    fn sock_diag_request_layout() {
        let r = unix_diag_request(7, None);
        assert_eq!(r.len(), 40);
        assert_eq!(ne_u32(&r, 0), 40);
        assert_eq!(ne_u16(&r, 4), 20); // SOCK_DIAG_BY_FAMILY
        assert_eq!(ne_u16(&r, 6), 0x301); // NLM_F_REQUEST | NLM_F_DUMP
        assert_eq!(ne_u32(&r, 8), 7);
        assert_eq!(ne_u32(&r, 12), 0);
        assert_eq!(&r[16..20], &[1, 0, 0, 0]); // AF_UNIX, protocol 0, pad
        assert_eq!(ne_u32(&r, 20), u32::MAX); // every state
        assert_eq!(ne_u32(&r, 24), 0); // udiag_ino
        assert_eq!(ne_u32(&r, 28), UDIAG_SHOW_PEER);
        assert_eq!(&r[32..40], &[0; 8]); // cookie
    }

    /// The one-socket query: no NLM_F_DUMP, the inode, and the no-cookie value.
    #[test]
    fn sock_diag_exact_request_layout() {
        let r = unix_diag_request(7, Some(0x1234_5678));
        assert_eq!(r.len(), 40);
        assert_eq!(ne_u32(&r, 0), 40);
        assert_eq!(ne_u16(&r, 4), 20);
        assert_eq!(ne_u16(&r, 6), 0x1); // NLM_F_REQUEST only
        assert_eq!(ne_u32(&r, 8), 7);
        assert_eq!(&r[16..20], &[1, 0, 0, 0]);
        assert_eq!(ne_u32(&r, 24), 0x1234_5678);
        assert_eq!(ne_u32(&r, 28), UDIAG_SHOW_PEER);
        assert_eq!(&r[32..40], &[0xff; 8]); // INET_DIAG_NOCOOKIE twice
    }

    /// Several sockets in one datagram, then a second datagram with NLMSG_DONE.
    #[test]
    fn sock_diag_parse_dump() {
        let mut buf = diag(10, Some(11));
        buf.extend(diag(11, Some(10)));
        buf.extend(diag(12, None)); // a listener: no peer
        buf.extend(diag(13, Some(0))); // peer already released
                                       // Unknown attributes around the peer, a nested-flagged peer type.
        buf.extend(nlmsg(
            SOCK_DIAG_BY_FAMILY,
            2,
            DIAG_SEQ,
            &diag_msg(
                14,
                &[
                    nla(7, &[1, 2, 3]),
                    nla(UNIX_DIAG_PEER | 0x8000, &15u32.to_ne_bytes()),
                    nla(42, &[]),
                ],
            ),
        ));
        let (r, peers) = parse(&buf);
        assert_eq!(r.expect("parse"), DumpStep::More);
        let want: HashMap<u64, u64> = [(10, 11), (11, 10), (14, 15)].into();
        assert_eq!(peers, want);

        let mut buf = diag(20, Some(21));
        buf.extend(done(0));
        buf.extend(diag(30, Some(31))); // after DONE: not read
        let (r, peers) = parse(&buf);
        assert_eq!(r.expect("parse"), DumpStep::Done);
        assert_eq!(peers, [(20, 21)].into());

        // Old kernels: NLMSG_DONE without payload; an ACK (error 0) is skipped.
        let mut buf = nlmsg(libc::NLMSG_ERROR as u16, 0, DIAG_SEQ, &0i32.to_ne_bytes());
        buf.extend(nlmsg(libc::NLMSG_DONE as u16, 2, DIAG_SEQ, &[]));
        assert_eq!(parse(&buf).0.expect("parse"), DumpStep::Done);
        // An empty datagram, and a NOOP: nothing, more to come.
        assert_eq!(parse(&[]).0.expect("empty"), DumpStep::More);
        let noop = nlmsg(libc::NLMSG_NOOP as u16, 0, DIAG_SEQ, &[]);
        assert_eq!(parse(&noop).0.expect("noop"), DumpStep::More);
    }

    /// Messages of other sequences and sockets of other families are skipped; a trailing stub
    /// shorter than a header is ignored.
    #[test]
    fn sock_diag_parse_skips() {
        let mut buf = nlmsg(
            SOCK_DIAG_BY_FAMILY,
            2,
            DIAG_SEQ + 1,
            &diag_msg(1, &[nla(UNIX_DIAG_PEER, &2u32.to_ne_bytes())]),
        );
        let mut inet = diag_msg(3, &[nla(UNIX_DIAG_PEER, &4u32.to_ne_bytes())]);
        inet[0] = libc::AF_INET as u8;
        buf.extend(nlmsg(SOCK_DIAG_BY_FAMILY, 2, DIAG_SEQ, &inet));
        buf.extend(nlmsg(libc::NLMSG_DONE as u16, 2, DIAG_SEQ + 1, &[]));
        buf.extend(diag(5, Some(6)));
        buf.extend([0u8; 15]);
        let (r, peers) = parse(&buf);
        assert_eq!(r.expect("parse"), DumpStep::More);
        assert_eq!(peers, [(5, 6)].into());
    }

    /// Kernel errors become SockDiag with the errno.
    #[test]
    fn sock_diag_parse_kernel_errors() {
        let err = nlmsg(
            libc::NLMSG_ERROR as u16,
            0,
            DIAG_SEQ,
            &(-libc::ENOENT).to_ne_bytes(),
        );
        match parse(&err).0 {
            Err(DiscoveryError::SockDiag { error }) => {
                assert_eq!(error.raw_os_error(), Some(libc::ENOENT))
            }
            other => panic!("expected SockDiag, got {other:?}"),
        }
        let e = DiscoveryError::SockDiag {
            error: io::Error::from_raw_os_error(libc::ENOENT),
        };
        assert!(e.to_string().contains("modprobe unix_diag"), "{e}");
        match parse(&done(-libc::EINTR)).0 {
            Err(DiscoveryError::SockDiag { error }) => {
                assert_eq!(error.raw_os_error(), Some(libc::EINTR))
            }
            other => panic!("expected SockDiag, got {other:?}"),
        }
        // i32::MIN must not overflow on negation.
        assert!(matches!(
            parse(&done(i32::MIN)).0,
            Err(DiscoveryError::SockDiag { .. })
        ));
        let positive = nlmsg(libc::NLMSG_ERROR as u16, 0, DIAG_SEQ, &5i32.to_ne_bytes());
        assert!(matches!(
            parse(&positive).0,
            Err(DiscoveryError::SockDiagReply { .. })
        ));
        let short = nlmsg(libc::NLMSG_ERROR as u16, 0, DIAG_SEQ, &[1, 2]);
        assert!(matches!(
            parse(&short).0,
            Err(DiscoveryError::SockDiagReply { .. })
        ));
    }

    /// Lengths that do not fit are errors, never panics or out-of-bounds reads.
    #[test]
    fn sock_diag_parse_malformed() {
        let malformed = |buf: &[u8], what: &str| match parse(buf).0 {
            Err(DiscoveryError::SockDiagReply { reason }) => reason,
            other => panic!("{what}: expected SockDiagReply, got {other:?}"),
        };
        // nlmsg_len beyond the datagram, and below the header size.
        let mut m = diag(1, Some(2));
        m[0..4].copy_from_slice(&1000u32.to_ne_bytes());
        malformed(&m, "long nlmsg");
        m[0..4].copy_from_slice(&15u32.to_ne_bytes());
        malformed(&m, "short nlmsg");
        m[0..4].copy_from_slice(&u32::MAX.to_ne_bytes());
        malformed(&m, "huge nlmsg");
        // A unix_diag_msg cut short.
        let m = nlmsg(SOCK_DIAG_BY_FAMILY, 2, DIAG_SEQ, &[1, 1, 1, 0, 5, 0, 0]);
        let r = malformed(&m, "short unix_diag_msg");
        assert!(r.contains("netlink message at byte 0"), "{r}");
        // Attribute length 0 (would loop forever), 2, and beyond the message.
        for bad_len in [0u16, 2, 64] {
            let mut attr = nla(UNIX_DIAG_PEER, &9u32.to_ne_bytes());
            attr[0..2].copy_from_slice(&bad_len.to_ne_bytes());
            let m = nlmsg(SOCK_DIAG_BY_FAMILY, 2, DIAG_SEQ, &diag_msg(1, &[attr]));
            malformed(&m, &format!("attribute length {bad_len}"));
        }
        // A peer attribute with 2 bytes of payload.
        let m = nlmsg(
            SOCK_DIAG_BY_FAMILY,
            2,
            DIAG_SEQ,
            &diag_msg(1, &[nla(UNIX_DIAG_PEER, &[7, 7])]),
        );
        let r = malformed(&m, "short peer");
        assert!(r.contains("UNIX_DIAG_PEER"), "{r}");

        // Every prefix of a good datagram, and noise: no panic, whatever the result.
        let mut good = diag(1, Some(2));
        good.extend(diag(3, Some(4)));
        good.extend(done(0));
        for cut in 0..good.len() {
            let _ = parse(&good[..cut]);
        }
        // 1-7 bytes changed anywhere, then cut anywhere.
        let noise = (
            prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..=7),
            any::<prop::sample::Index>(),
        );
        proptest::test_runner::TestRunner::new(crate::decode::test_strategies::config(2000))
            .run(&noise, |(bytes, cut)| {
                let mut noise = good.clone();
                for (at, b) in bytes {
                    let at = at.index(noise.len());
                    noise[at] = b;
                }
                noise.truncate(cut.index(noise.len() + 1));
                let _ = parse(&noise);
                Ok(())
            })
            .unwrap();
    }

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

    /// `/proc/<pid>/status` Uid line and the multi-variable environ read.
    #[test]
    fn status_euid_and_env() {
        let status = "Name:\tx\nUid:\t1000\t0\t0\t0\nGid:\t5\t5\t5\t5\n";
        assert_eq!(parse_status_euid(status), Some(0));
        assert_eq!(parse_status_euid("Uid:\t7\t8\t9\t10\n"), Some(8));
        assert_eq!(parse_status_euid("Uid:\t7\n"), None);
        assert_eq!(parse_status_euid("Uid:\t7\tx\n"), None);
        assert_eq!(parse_status_euid(""), None);
        let me = std::process::id();
        assert_eq!(process_euid(me), Some(euid()));
        assert_eq!(process_euid(u32::MAX), None);
        let names = vec!["PATH".to_string(), "NRI_TRACE_SURELY_UNSET".to_string()];
        let env = process_env(me, &names);
        assert_eq!(env.get("PATH").cloned(), process_env_var(me, "PATH"));
        assert!(!env.contains_key("NRI_TRACE_SURELY_UNSET"));
        assert!(process_env(me, &[]).is_empty());
        assert!(process_env(u32::MAX, &names).is_empty());
    }

    /// The cgroup of `/proc/<pid>/cgroup`: v2's path, systemd's v1 one where v2 says only the
    /// root, and our own process's (which is live and readable without root).
    #[test]
    fn proc_cgroup_paths() {
        // Unified (a systemd node with cgroup v2 only).
        assert_eq!(
            parse_proc_cgroup("0::/system.slice/kubelet.service\n").as_deref(),
            Some("/system.slice/kubelet.service")
        );
        // Hybrid: systemd tracks units in v2 too; v2's path wins.
        let hybrid =
            "12:memory:/user.slice\n1:name=systemd:/user.slice/user-0.slice/session-3.scope\n\
                      0::/user.slice/user-0.slice/session-3.scope\n";
        assert_eq!(
            parse_proc_cgroup(hybrid).as_deref(),
            Some("/user.slice/user-0.slice/session-3.scope")
        );
        // Legacy (no v2 line), or v2 at its root beside a systemd path: systemd's.
        let legacy = "4:memory:/x\n1:name=systemd:/system.slice/crio.service\n";
        assert_eq!(
            parse_proc_cgroup(legacy).as_deref(),
            Some("/system.slice/crio.service")
        );
        let rooted = "9:name=systemd:/system.slice/kubelet.service\n0::/\n";
        assert_eq!(
            parse_proc_cgroup(rooted).as_deref(),
            Some("/system.slice/kubelet.service")
        );
        // Everything at the root (this lab machine's own processes): the root.
        assert_eq!(
            parse_proc_cgroup("9:name=systemd:/\n4:memory:/process_api/ab\n0::/\n").as_deref(),
            Some("/")
        );
        // A path with ':' in it is kept whole; nothing usable is None.
        assert_eq!(parse_proc_cgroup("0::/a:b\n").as_deref(), Some("/a:b"));
        assert_eq!(parse_proc_cgroup("4:memory:/x\n"), None);
        assert_eq!(parse_proc_cgroup("garbage\n0::\n"), None);
        assert_eq!(parse_proc_cgroup(""), None);
        let me = std::process::id();
        let mine = fs::read_to_string(format!("/proc/{me}/cgroup")).expect("own cgroup file");
        assert_eq!(process_cgroup(me), parse_proc_cgroup(&mine));
        assert!(process_cgroup(me).is_some(), "{mine}");
        assert_eq!(process_cgroup(u32::MAX), None);
    }

    /// Inode of an open fd.
    fn inode_of(fd: &impl AsRawFd) -> u64 {
        // SAFETY: stat is plain old data; fstat fills it for a valid fd.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: the fd is open for the duration of the call; st is a live local.
        let rc = unsafe { libc::fstat(fd.as_raw_fd(), &raw mut st) };
        assert_eq!(rc, 0, "fstat: {}", io::Error::last_os_error());
        st.st_ino
    }

    /// Live: the real dump pairs the two ends of our own socketpair (works without root).
    #[test]
    fn live_unix_peers() {
        let (a, b) = UnixStream::pair().expect("socketpair");
        let (ia, ib) = (inode_of(&a), inode_of(&b));
        // The same inodes as the /proc fd links show.
        let me = std::process::id();
        let fds = socket_fds_of(me).expect("own fds");
        assert!(fds.contains(&(u32::try_from(a.as_raw_fd()).expect("fd"), ia)));
        let peers = unix_peers().expect("sock_diag dump of AF_UNIX");
        assert_eq!(peers.get(&ia), Some(&ib), "peer of {ia}");
        assert_eq!(peers.get(&ib), Some(&ia), "peer of {ib}");
        // A listener has no peer; an accepted connection has its client as peer.
        let dir = TempDir::new("diag");
        let listener = UnixListener::bind(dir.0.join("l.sock")).expect("bind");
        let client = UnixStream::connect(dir.0.join("l.sock")).expect("connect");
        let (server, _) = listener.accept().expect("accept");
        let peers = unix_peers().expect("second dump");
        assert!(!peers.contains_key(&inode_of(&listener)));
        assert_eq!(peers.get(&inode_of(&server)), Some(&inode_of(&client)));
        assert_eq!(peers.get(&inode_of(&client)), Some(&inode_of(&server)));
        // Once one end is closed, the other is not paired with a live inode any more.
        drop(b);
        let peers = unix_peers().expect("third dump");
        assert_ne!(peers.get(&ia), Some(&ib));
    }

    /// Live: the one-socket query gives the same peer as the dump, and nothing for a
    /// listener, a closed socket's peer, or a made-up inode.
    #[test]
    fn live_unix_peer_of() {
        let (a, b) = UnixStream::pair().expect("socketpair");
        let (ia, ib) = (inode_of(&a), inode_of(&b));
        let me = std::process::id();
        assert_eq!(
            fd_socket_inode(me, u32::try_from(a.as_raw_fd()).expect("fd")),
            Some(ia)
        );
        assert_eq!(fd_socket_inode(me, u32::MAX), None);
        assert_eq!(unix_peer_of(ia).expect("query"), Some(ib));
        assert_eq!(unix_peer_of(ib).expect("query"), Some(ia));
        let dir = TempDir::new("diag-exact");
        let listener = UnixListener::bind(dir.0.join("l.sock")).expect("bind");
        let client = UnixStream::connect(dir.0.join("l.sock")).expect("connect");
        let (server, _) = listener.accept().expect("accept");
        assert_eq!(unix_peer_of(inode_of(&listener)).expect("query"), None);
        assert_eq!(
            unix_peer_of(inode_of(&server)).expect("query"),
            Some(inode_of(&client))
        );
        drop(b);
        assert_ne!(unix_peer_of(ia).expect("query"), Some(ib));
        assert_eq!(unix_peer_of(ib).expect("closed socket"), None);
        assert_eq!(unix_peer_of(0).expect("inode 0"), None);
        assert_eq!(unix_peer_of(u64::MAX).expect("64-bit inode"), None);
    }

    /// Kills and reaps a child on drop.
    struct KillOnDrop(std::process::Child);

    impl Drop for KillOnDrop {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
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
