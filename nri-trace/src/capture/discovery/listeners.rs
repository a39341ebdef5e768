//! Who listens on a unix socket path, with the connections it has
//! already accepted: /proc/net/unix matched against the path (symlinks
//! followed) and the holders of its sockets.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};

use super::proc_net_unix::read_proc_net_unix;
use super::sockets::scan_holders;
use super::DiscoveryError;

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
pub(crate) fn find_listeners(path: &Path) -> Result<Vec<Listener>, DiscoveryError> {
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

#[cfg(test)]
mod tests {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::symlink;
    use std::os::unix::net::{UnixListener, UnixStream};

    use super::*;
    use crate::capture::discovery::sockets::{find_socket_holders, peer_cred, socket_fds_of};
    use crate::capture::discovery::test_support::{euid, TempDir};

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
