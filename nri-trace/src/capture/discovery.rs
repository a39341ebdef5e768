//! Finding the processes and existing connections behind a unix socket path, from /proc.
//!
//! Userspace support for the eBPF capture: the probes see traffic of sockets created after
//! they attach, but a runtime (containerd, CRI-O) and its NRI plugins usually connected long
//! before nri-trace started. This module finds who listens on a socket path, which fds of that
//! process are already-accepted connections, and who sits on the other end of them.
//!
//! Layout: pure parsers (`parse_*`, `assemble_listeners`, `PathMatcher`) take text or bytes and
//! are unit-tested without root; the thin I/O wrappers around them read /proc.
//!
//! Limits (by design of /proc, not bugs):
//! * /proc/self/net/unix lists only sockets of *our* network namespace; a runtime in another
//!   netns is found with `read_proc_net_unix(Some(pid))` only.
//! * Paths are compared and canonicalized in *our* mount namespace.
//! * Non-UTF-8 bytes in socket paths are replaced by U+FFFD (lossy decoding).
//! * A listener bound to a path that was later unlinked and re-bound by someone else still shows
//!   the old path in /proc/net/unix; both listeners are reported.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ffi::OsStr;
use std::fs;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};

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
    for field in fields.iter_mut() {
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

/// Reads /proc/<pid>/net/unix (the netns of `pid`) or, for `None`, /proc/self/net/unix.
pub fn read_proc_net_unix(pid: Option<u32>) -> Result<Vec<UnixSocketEntry>, DiscoveryError> {
    let path = match pid {
        Some(pid) => PathBuf::from(format!("/proc/{pid}/net/unix")),
        None => PathBuf::from("/proc/self/net/unix"),
    };
    let bytes = fs::read(&path).map_err(|e| io_error(&path, pid, e))?;
    Ok(parse_proc_net_unix(&String::from_utf8_lossy(&bytes)))
}

/// Parses an fd link target `socket:[12345]` into the socket inode 12345.
pub fn parse_socket_link(link: &str) -> Option<u64> {
    // Format from fs/proc/fd.c via sockfs_dname (net/socket.c): "socket:[%lu]".
    parse_dec_u64(link.strip_prefix("socket:[")?.strip_suffix(']')?)
}

/// Lists `(fd, socket inode)` for every socket fd of `pid`, sorted by fd.
pub fn socket_fds_of(pid: u32) -> Result<Vec<(u32, u64)>, DiscoveryError> {
    let dir = PathBuf::from(format!("/proc/{pid}/fd"));
    let entries = fs::read_dir(&dir).map_err(|e| io_error(&dir, Some(pid), e))?;
    let mut out = Vec::new();
    for entry in entries {
        // Entries vanish when the process closes fds or exits while we read: skip them.
        let Ok(entry) = entry else { continue };
        let Some(fd) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(target) = fs::read_link(entry.path()) else {
            continue;
        };
        if let Some(inode) = target.to_str().and_then(parse_socket_link) {
            out.push((fd, inode));
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

/// Result of a scan over /proc/<tgid>/fd.
struct HolderScan {
    /// `(tgid, fd, inode)`, sorted.
    holders: Vec<(u32, u32, u64)>,
    /// First fd directory we were refused, if any (for the "run as root" hint).
    denied: Option<PathBuf>,
}

/// Scans all /proc/<tgid>/fd for sockets in `inodes`, noting permission failures.
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
    let proc_dir = match fs::read_dir("/proc") {
        Ok(d) => d,
        Err(e) => {
            log::warn!("cannot list /proc: {e}");
            return scan;
        }
    };
    for entry in proc_dir.flatten() {
        let Some(tgid) = pid_from_name(&entry.file_name()) else {
            continue;
        };
        match socket_fds_of(tgid) {
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

/// Parses a /proc directory entry name as a pid (`None` for "self", "net", ...).
fn pid_from_name(name: &OsStr) -> Option<u32> {
    let s = name.to_str()?;
    parse_dec_u64(s).and_then(|v| u32::try_from(v).ok())
}

/// Lists `(tgid, fd, inode)` for every fd in any /proc/<tgid>/fd whose socket inode is in `inodes`.
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
/// Read-only: the duplicate is only passed to getsockopt() and closed; no data is read, written
/// or shut down. Needs PTRACE_MODE_ATTACH_REALCREDS on `pid` (kernel/pid.c `pidfd_getfd`), i.e.
/// root/CAP_SYS_PTRACE for other processes; always allowed for our own process. Linux >= 5.6.
pub fn peer_cred(pid: u32, fd: u32) -> Option<PeerCred> {
    let pid = libc::pid_t::try_from(pid).ok()?;
    let fd = libc::c_int::try_from(fd).ok()?;
    // SAFETY: pidfd_open(pid_t, unsigned int) has no memory arguments.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0 as libc::c_uint) };
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
            0 as libc::c_uint,
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
    let mut len = libc::socklen_t::try_from(std::mem::size_of::<libc::ucred>()).ok()?;
    // SAFETY: cred/len point to live, correctly sized locals for the duration of the call.
    let rc = unsafe {
        libc::getsockopt(
            dup.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            std::ptr::addr_of_mut!(cred).cast::<libc::c_void>(),
            &mut len,
        )
    };
    drop(dup);
    if rc != 0 || usize::try_from(len).ok()? != std::mem::size_of::<libc::ucred>() {
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
    /// /proc/<pid>/comm (at most 15 bytes, set by the process itself).
    pub comm: String,
    /// /proc/<pid>/cmdline split at NULs; empty for kernel threads and zombies.
    pub cmdline: Vec<String>,
    /// /proc/<pid>/exe target (may end in " (deleted)"); `None` if unreadable (not root).
    pub exe: Option<String>,
}

/// Reads comm, cmdline and exe of `pid`; `None` if the process is gone.
pub fn process_info(pid: u32) -> Option<ProcessInfo> {
    let comm = fs::read(format!("/proc/{pid}/comm")).ok()?;
    let cmdline = fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| parse_nul_separated(&b))
        .unwrap_or_default();
    let exe = fs::read_link(format!("/proc/{pid}/exe"))
        .ok()
        .map(|p| p.to_string_lossy().into_owned());
    Some(ProcessInfo {
        pid,
        comm: parse_comm(&comm),
        cmdline,
        exe,
    })
}

/// Decodes /proc/<pid>/comm, dropping the newline the kernel appends.
fn parse_comm(bytes: &[u8]) -> String {
    let bytes = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    String::from_utf8_lossy(bytes).into_owned()
}

/// Splits NUL-separated /proc data (cmdline, environ); a trailing NUL ends the last item.
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

/// Reads variable `name` from /proc/<pid>/environ (the environment at exec, not later setenv).
pub fn process_env_var(pid: u32, name: &str) -> Option<String> {
    let bytes = fs::read(format!("/proc/{pid}/environ")).ok()?;
    parse_environ_var(&bytes, name)
}

/// Finds the first `name=value` in NUL-separated environ bytes.
fn parse_environ_var(bytes: &[u8], name: &str) -> Option<String> {
    if name.is_empty() || name.contains('=') || name.contains('\0') {
        return None;
    }
    bytes.split(|&b| b == 0).find_map(|item| {
        let value = item.strip_prefix(name.as_bytes())?.strip_prefix(b"=")?;
        Some(String::from_utf8_lossy(value).into_owned())
    })
}

/// Returns the thread-group id of `pid` (which may be a thread id), from /proc/<pid>/status.
pub fn tgid_of(pid: u32) -> Option<u32> {
    let bytes = fs::read(format!("/proc/{pid}/status")).ok()?;
    parse_status_tgid(&String::from_utf8_lossy(&bytes))
}

/// Parses the `Tgid:` line of /proc/<pid>/status (fs/proc/array.c `task_state`).
fn parse_status_tgid(status: &str) -> Option<u32> {
    status.lines().find_map(|line| {
        let v = line.strip_prefix("Tgid:")?.trim();
        parse_dec_u64(v).and_then(|v| u32::try_from(v).ok())
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;
    use std::os::unix::net::{UnixListener, UnixStream};

    /// The header line as printed by af_unix.c.
    const HEADER: &str = "Num       RefCount Protocol Flags    Type St Inode Path";

    /// A temp dir removed on drop, unique per test and process.
    struct TempDir(PathBuf);

    impl TempDir {
        /// Creates `$TMPDIR/nri-trace-discovery-<pid>-<tag>-<nanos>`.
        fn new(tag: &str) -> TempDir {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0);
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

    /// Socket fd link targets.
    #[test]
    fn socket_link() {
        assert_eq!(parse_socket_link("socket:[12345]"), Some(12345));
        assert_eq!(parse_socket_link("socket:[0]"), Some(0));
        assert_eq!(
            parse_socket_link("socket:[18446744073709551615]"),
            Some(u64::MAX)
        );
        for bad in [
            "",
            "socket:[]",
            "socket:[12a]",
            "socket:[+1]",
            "socket:[-1]",
            "socket:[ 1]",
            "socket:[18446744073709551616]",
            "socket:[1",
            "socket:[1] ",
            "pipe:[123]",
            "anon_inode:[eventfd]",
            "/dev/null",
            "[123]",
        ] {
            assert_eq!(parse_socket_link(bad), None, "link {bad:?}");
        }
    }

    /// cmdline/environ/comm/status parsers.
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

        let env = b"PATH=/bin\0NRI_SOCKET=/var/run/nri/nri.sock\0EMPTY=\0A=b=c\0NRI=x";
        assert_eq!(parse_environ_var(env, "PATH").as_deref(), Some("/bin"));
        assert_eq!(
            parse_environ_var(env, "NRI_SOCKET").as_deref(),
            Some("/var/run/nri/nri.sock")
        );
        assert_eq!(parse_environ_var(env, "NRI").as_deref(), Some("x"));
        assert_eq!(parse_environ_var(env, "EMPTY").as_deref(), Some(""));
        assert_eq!(parse_environ_var(env, "A").as_deref(), Some("b=c"));
        assert_eq!(parse_environ_var(env, "PAT"), None);
        assert_eq!(parse_environ_var(env, ""), None);
        assert_eq!(parse_environ_var(env, "A=b"), None);
        assert_eq!(parse_environ_var(b"", "PATH"), None);

        assert_eq!(parse_comm(b"containerd\n"), "containerd");
        assert_eq!(parse_comm(b""), "");

        let status = "Name:\tcontainerd\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t1234\nNgid:\t0\nPid:\t1240\n";
        assert_eq!(parse_status_tgid(status), Some(1234));
        assert_eq!(parse_status_tgid("Tgid:\tx\n"), None);
        assert_eq!(parse_status_tgid("Tgid:\t99999999999\n"), None);
        assert_eq!(parse_status_tgid(""), None);

        assert_eq!(pid_from_name(OsStr::new("42")), Some(42));
        assert_eq!(pid_from_name(OsStr::new("self")), None);
        assert_eq!(pid_from_name(OsStr::new("+42")), None);
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
}
