//! What on this node still holds a container: processes whose working
//! directory, root or open files are inside its rootfs mount (an unmount
//! would fail with EBUSY), and processes still alive in its cgroup, with
//! their state (D: uninterruptible sleep, Z: zombie) and wait channel.
//! Read from /proc and /sys/fs/cgroup when `explain` runs; read-only.
//!
//! Paths are what the host's mount namespace shows: a process in another
//! mount namespace (the container's own) shows its paths relative to its
//! own root, so only host processes are found holding a rootfs this way;
//! the container's processes are found through its cgroup.
//!
//! procfs reads /proc: the process list, cwd/root/fd links, stat, wchan
//! and mountinfo. The cgroup side (/sys/fs/cgroup) is plain directory
//! reading: procfs covers /proc only.

use std::{
    fs,
    os::unix::ffi::OsStrExt,
    path::{Path, PathBuf},
};

use procfs::process::{FDTarget, Process};
use serde::Serialize;

use super::discovery;

/// A process that holds something of a container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Holder {
    pub pid: u32,
    pub comm: String,
    /// "cwd", "root", "fd 7", or "in cgroup".
    pub what: String,
    /// The path it holds (the rootfs or a file in it; the cgroup dir).
    pub path: String,
    /// /proc/PID/stat state: R, S, D (uninterruptible), Z (zombie), T...
    pub state: String,
    /// /proc/PID/wchan: where in the kernel it sleeps ("0": running).
    pub wchan: String,
    /// SIGKILL is pending for it (/proc/PID/status SigPnd or ShdPnd): it
    /// was killed and has not exited (in state D it cannot until the
    /// kernel call it waits in returns).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sigkill_pending: bool,
}

/// Most processes reported per container (a node may run thousands).
const MAX_HOLDERS: usize = 32;

/// The state letter from /proc/PID/stat.
fn state(pid: u32) -> String {
    discovery::proc_stat(pid)
        .map(|s| s.state)
        .unwrap_or_default()
}

fn wchan(pid: u32) -> String {
    discovery::open_process(pid)
        .and_then(|p| p.wchan())
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// What /proc shows of `pid` now (None: it is gone).
pub(crate) fn process(pid: u32, what: &str) -> Option<Holder> {
    discovery::open_process(pid)
        .is_ok()
        .then(|| holder(pid, what.into(), String::new()))
}

/// Whether SIGKILL is pending for `pid`, thread or process wide
/// (proc(5): SigPnd, ShdPnd; bit N-1 for signal N).
fn sigkill_pending(pid: u32) -> bool {
    const SIGKILL_BIT: u64 = 1 << (libc::SIGKILL - 1);
    discovery::open_process(pid)
        .and_then(|p| p.status())
        .is_ok_and(|s| (s.sigpnd | s.shdpnd) & SIGKILL_BIT != 0)
}

fn holder(pid: u32, what: String, path: String) -> Holder {
    Holder {
        pid,
        comm: discovery::read_comm(pid).unwrap_or_default(),
        what,
        path,
        state: state(pid),
        wchan: wchan(pid),
        sigkill_pending: sigkill_pending(pid),
    }
}

/// The node's mount table: pid 1's, the node's init when nri-trace
/// shares the node's PID namespace (on the node, or in the DaemonSet's
/// pod with `hostPID`), whose own mount namespace is the pod's and shows
/// neither the containers' rootfs nor kubelet's volumes (seen in the
/// lab's cluster, 2026-11-30: "rootfs not mounted" of a running
/// container). Our own when pid 1's cannot be read.
fn node_mountinfo() -> Option<procfs::process::MountInfos> {
    Process::new(1)
        .and_then(|p| p.mountinfo())
        .or_else(|_| Process::myself().and_then(|p| p.mountinfo()))
        .ok()
}

/// The cgroup tree. In the DaemonSet's pod it is the node's only through
/// its hostPath mount (deploy/daemonset.yaml): `/proc/1/root` of a
/// privileged hostPID pod is refused (EACCES, lab cluster, 2026-11-30),
/// and the container's own `/sys/fs/cgroup` holds only its own cgroup.
const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// Mount points (from the host's mountinfo) of container `id`'s rootfs:
/// containerd mounts it at `.../<id>/rootfs`, CRI-O under
/// `.../overlay/<layer>/merged` with the id in its options (not found
/// here).
pub(crate) fn rootfs_mounts(id: &str) -> Vec<PathBuf> {
    let Some(info) = node_mountinfo() else {
        return Vec::new();
    };
    let suffix = format!("/{id}/rootfs");
    let mut v: Vec<PathBuf> = info
        .into_iter()
        // The mount point as mountinfo prints it (proc(5)): octal escapes for spaces.
        .map(|m| m.mount_point)
        .filter(|m| m.as_os_str().as_bytes().ends_with(suffix.as_bytes()))
        .collect();
    v.sort();
    v.dedup();
    v
}

/// Mount points (from the host's mountinfo) under kubelet's directory of
/// the pod with uid `uid`: its volumes (`.../pods/<uid>/volumes/...`)
/// and the subPaths bound from them.
pub(crate) fn pod_volume_mounts(uid: &str) -> Vec<PathBuf> {
    let Some(info) = node_mountinfo() else {
        return Vec::new();
    };
    let dir = format!("/pods/{uid}/");
    let mut v: Vec<PathBuf> = info
        .into_iter()
        .map(|m| m.mount_point)
        .filter(|m| m.to_string_lossy().contains(&dir))
        .collect();
    v.sort();
    v.dedup();
    v
}

/// Processes whose cwd, root or an open file is at or under `dir`.
pub(crate) fn holding(dir: &Path) -> Vec<Holder> {
    let mut out = Vec::new();
    let under = |p: &Path| p.starts_with(dir);
    let Ok(all) = procfs::process::all_processes() else {
        return out;
    };
    let mut pids: Vec<u32> = all
        .flatten()
        .filter_map(|p| u32::try_from(p.pid).ok())
        .collect();
    pids.sort_unstable();
    for pid in pids {
        if out.len() >= MAX_HOLDERS {
            break;
        }
        // Gone since the listing: nothing to report.
        let Ok(p) = discovery::open_process(pid) else {
            continue;
        };
        for (what, link) in [("cwd", p.cwd()), ("root", p.root())] {
            match link {
                Ok(link) if under(&link) => {
                    out.push(holder(pid, what.into(), link.display().to_string()));
                }
                _ => {}
            }
        }
        // The lowest fd under `dir` (procfs skips fds closed while we read).
        let Ok(fds) = p.fd() else { continue };
        let first = fds
            .flatten()
            .filter_map(|f| match f.target {
                FDTarget::Path(path) if under(&path) => Some((f.fd, path)),
                _ => None,
            })
            .min_by_key(|(fd, _)| *fd);
        if let Some((fd, path)) = first {
            out.push(holder(pid, format!("fd {fd}"), path.display().to_string()));
        }
    }
    out
}

/// The cgroup directory of container `id` under `root` (cgroup v2: a
/// directory whose name holds the id, e.g. `cri-containerd-<id>.scope`
/// or `<id>`), at most `depth` levels down.
pub(crate) fn cgroup_dir(root: &Path, id: &str, depth: usize) -> Option<PathBuf> {
    if depth == 0 {
        return None;
    }
    let rd = fs::read_dir(root).ok()?;
    let mut subdirs = Vec::new();
    for e in rd.flatten() {
        if !e.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let name = e.file_name();
        if name.to_string_lossy().contains(id) {
            return Some(e.path());
        }
        subdirs.push(e.path());
    }
    subdirs.sort();
    subdirs
        .into_iter()
        .find_map(|d| cgroup_dir(&d, id, depth - 1))
}

/// The pod cgroup kubelet made for pod `uid`, when it is still there:
/// `pod<uid>` (cgroupfs driver) or `kubepods-...-pod<uid with _>.slice`
/// (systemd driver), under any hierarchy (k8s.io/kubernetes
/// pkg/kubelet/cm/pod_container_manager_linux.go `GetPodContainerName`).
pub(crate) fn pod_cgroup(uid: &str) -> Option<PathBuf> {
    if uid.is_empty() {
        return None;
    }
    let root = Path::new(CGROUP_ROOT);
    cgroup_dir(root, &format!("pod{uid}"), 8)
        .or_else(|| cgroup_dir(root, &format!("pod{}", uid.replace('-', "_")), 8))
}

/// Processes still in container `id`'s cgroup, with where it is.
pub(crate) fn in_cgroup(id: &str) -> (Option<PathBuf>, Vec<Holder>) {
    let Some(dir) = cgroup_dir(Path::new(CGROUP_ROOT), id, 8) else {
        return (None, Vec::new());
    };
    let procs = fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
    let holders = procs
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .take(MAX_HOLDERS)
        .map(|pid| holder(pid, "in cgroup".into(), dir.display().to_string()))
        .collect();
    (Some(dir), holders)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_a_process_whose_cwd_is_in_a_directory() {
        let dir = std::env::temp_dir().join(format!("nri-trace-holders-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .current_dir(&dir)
            .spawn()
            .unwrap();
        // The child's cwd is set before exec; give it the moment to exec.
        std::thread::sleep(std::time::Duration::from_millis(100));
        let h = holding(&dir);
        let _ = child.kill();
        let _ = child.wait();
        let _ = fs::remove_dir(&dir);
        let found = h.iter().find(|h| h.pid == child.id()).expect("the sleep");
        assert_eq!(found.what, "cwd");
        assert_eq!(found.comm, "sleep");
        assert!(!found.state.is_empty());
    }

    #[test]
    fn state_letter_survives_odd_comms() {
        // Our own stat: running or sleeping.
        let s = state(std::process::id());
        assert!(matches!(s.as_str(), "R" | "S"), "{s}");
        assert!(rootfs_mounts("no-such-container-id").is_empty());
    }
}
