//! Finding the container runtimes on this machine and the unix sockets they
//! serve: containerd and CRI-O processes (by `/proc/PID/comm`), and, among
//! the sockets each one listens on, its CRI socket and its NRI socket. The
//! lab's private containerd is found the same way as a node's.
//!
//! A runtime is told by what it runs as; its sockets by their names
//! (containerd: `containerd.sock`, not its `.ttrpc` twin; CRI-O:
//! `crio.sock`; NRI: `nri.sock`), since their directories are
//! configurable.
//!
//! The processes come from procfs (via `discovery`); the sockets from
//! /proc/PID/net/unix, read by `discovery`'s own parser (procfs's lacks
//! the listening flag).

use std::path::PathBuf;

use serde::Serialize;

use super::discovery::{self, DiscoveryError, UnixSocketEntry};

/// Which runtime.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RuntimeKind {
    Containerd,
    CriO,
}

impl RuntimeKind {
    /// From a process's comm.
    pub fn from_comm(comm: &str) -> Option<Self> {
        match comm {
            "containerd" => Some(RuntimeKind::Containerd),
            "crio" => Some(RuntimeKind::CriO),
            _ => None,
        }
    }

    fn is_cri_socket(self, path: &str) -> bool {
        let name = path.rsplit('/').next().unwrap_or(path);
        match self {
            RuntimeKind::Containerd => name == "containerd.sock",
            RuntimeKind::CriO => name == "crio.sock",
        }
    }
}

/// A runtime process and the sockets it serves.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Runtime {
    pub pid: u32,
    pub kind: RuntimeKind,
    pub cri_socket: Option<PathBuf>,
    pub nri_socket: Option<PathBuf>,
    /// Every unix socket path it listens on.
    pub listening: Vec<PathBuf>,
}

/// The runtime of `kind` at `pid`, given the sockets it listens on.
pub(crate) fn runtime_from(pid: u32, kind: RuntimeKind, listening: &[String]) -> Runtime {
    let mut listening: Vec<String> = listening.to_vec();
    listening.sort();
    listening.dedup();
    let cri = listening.iter().find(|p| kind.is_cri_socket(p));
    let nri = listening
        .iter()
        .find(|p| p.rsplit('/').next() == Some("nri.sock"));
    Runtime {
        pid,
        kind,
        cri_socket: cri.map(PathBuf::from),
        nri_socket: nri.map(PathBuf::from),
        listening: listening.iter().map(PathBuf::from).collect(),
    }
}

/// Listening, path-bound unix sockets among `entries` whose inodes `pid`
/// holds.
fn listening_paths(entries: &[UnixSocketEntry], inodes: &[(u32, u64)]) -> Vec<String> {
    entries
        .iter()
        .filter(|e| e.listening && inodes.iter().any(|(_, i)| *i == e.inode))
        .filter_map(|e| e.path.clone())
        .filter(|p| p.starts_with('/'))
        .collect()
}

/// Every containerd and CRI-O process on this machine, by pid.
pub(crate) fn find_runtimes() -> Result<Vec<Runtime>, DiscoveryError> {
    let mut out = Vec::new();
    // The pids first, then one process at a time: a procfs handle holds an fd.
    let all = procfs::process::all_processes()
        .map_err(|e| discovery::proc_error(std::path::Path::new("/proc"), None, e))?;
    let mut pids: Vec<u32> = all
        .flatten()
        .filter_map(|p| u32::try_from(p.pid).ok())
        .collect();
    pids.sort_unstable();
    for pid in pids {
        let Some(kind) = discovery::process_info(pid).and_then(|p| RuntimeKind::from_comm(&p.comm))
        else {
            continue;
        };
        // A runtime that exits while we look is skipped.
        let (Ok(inodes), Ok(entries)) = (
            discovery::socket_fds_of(pid),
            discovery::read_proc_net_unix(Some(pid)),
        ) else {
            continue;
        };
        out.push(runtime_from(pid, kind, &listening_paths(&entries, &inodes)));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn containerd_sockets_by_name() {
        let r = runtime_from(
            7,
            RuntimeKind::Containerd,
            &[
                "/run/containerd/containerd.sock.ttrpc".into(),
                "/run/containerd/containerd.sock".into(),
                "/var/run/nri/nri.sock".into(),
                "/run/containerd/debug.sock".into(),
            ],
        );
        assert_eq!(r.cri_socket, Some("/run/containerd/containerd.sock".into()));
        assert_eq!(r.nri_socket, Some("/var/run/nri/nri.sock".into()));
        assert_eq!(r.listening.len(), 4);
    }

    #[test]
    fn crio_and_no_nri() {
        let r = runtime_from(9, RuntimeKind::CriO, &["/var/run/crio/crio.sock".into()]);
        assert_eq!(r.cri_socket, Some("/var/run/crio/crio.sock".into()));
        assert_eq!(r.nri_socket, None);
        assert_eq!(RuntimeKind::from_comm("crio"), Some(RuntimeKind::CriO));
        assert_eq!(RuntimeKind::from_comm("containerd-shim"), None);
    }

    #[test]
    fn only_listening_path_sockets_of_the_process() {
        let text = "Num       RefCount Protocol Flags    Type St Inode Path\n\
            0000000000000000: 00000002 00000000 00010000 0001 01 100 /run/containerd/containerd.sock\n\
            0000000000000000: 00000002 00000000 00010000 0001 01 101 /run/other.sock\n\
            0000000000000000: 00000003 00000000 00000000 0001 03 102 /run/containerd/containerd.sock\n\
            0000000000000000: 00000002 00000000 00010000 0001 01 103 @abstract\n";
        let entries = discovery::parse_proc_net_unix(text);
        let got = listening_paths(&entries, &[(3, 100), (4, 102), (5, 103)]);
        assert_eq!(got, vec!["/run/containerd/containerd.sock".to_string()]);
    }
}
