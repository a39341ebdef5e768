//! The driver's share of a pod's volumes, as kubelet's volume manager does
//! it: an `emptyDir` with `medium: Memory` is a tmpfs that kubelet mounts at
//! `<kubelet root>/pods/<pod uid>/volumes/kubernetes.io~empty-dir/<name>`
//! before the pod's sandbox is made (kubelet `getPodVolumeDir`: `pods`,
//! the uid, `volumes`, the plugin name with `/` escaped as `~`, the volume
//! name) and hands to the runtime as a CRI `Mount` (host_path ->
//! container_path). At teardown kubelet unmounts it once no container of
//! the pod runs, removes the directory, and only then lets the pod go
//! (`podVolumesExist`, `PodCouldHaveRunningContainers`).
//!
//! The lab's kubelet root is `<lab dir>/kubelet`, so that every mount stays
//! under the lab directory and `lab.sh down` finds what a test left.
//! The mount and unmount are the driver's own syscalls (mount(2),
//! umount2(2)): a tracer watching the CRI client's process sees them, as it
//! would see kubelet's.

use std::{
    ffi::CString,
    io,
    os::unix::ffi::OsStrExt,
    path::{Path, PathBuf},
};

/// kubelet's plugin directory name of emptyDir (`kubernetes.io/empty-dir`).
pub const EMPTY_DIR_PLUGIN: &str = "kubernetes.io~empty-dir";

/// The lab's kubelet root: `<lab dir>/kubelet`.
pub fn kubelet_root(lab_dir: &Path) -> PathBuf {
    lab_dir.join("kubelet")
}

/// `<kubelet root>/pods/<uid>`.
pub fn pod_dir(kubelet_root: &Path, uid: &str) -> PathBuf {
    kubelet_root.join("pods").join(uid)
}

/// `<kubelet root>/pods/<uid>/volumes/kubernetes.io~empty-dir/<name>`.
pub fn empty_dir(kubelet_root: &Path, uid: &str, name: &str) -> PathBuf {
    pod_dir(kubelet_root, uid)
        .join("volumes")
        .join(EMPTY_DIR_PLUGIN)
        .join(name)
}

/// Where the container sees volume `name`.
pub fn container_path(name: &str) -> String {
    format!("/volumes/{name}")
}

/// The volume directories of a pod on disk (every plugin, every name), as
/// kubelet's volume manager reconstructs them after a restart: what the
/// teardown unmounts.
pub fn pod_volumes(kubelet_root: &Path, uid: &str) -> Vec<PathBuf> {
    let mut out = vec![];
    let Ok(plugins) = std::fs::read_dir(pod_dir(kubelet_root, uid).join("volumes")) else {
        return out;
    };
    for p in plugins.flatten() {
        if let Ok(vols) = std::fs::read_dir(p.path()) {
            out.extend(vols.flatten().map(|v| v.path()));
        }
    }
    out.sort();
    out
}

/// Is `path` a mount point (listed in /proc/self/mountinfo)?
pub fn is_mounted(path: &Path) -> bool {
    let Ok(mi) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let want = path.to_string_lossy();
    mi.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .any(|m| unescape_mountinfo(m) == want)
}

/// mountinfo escapes space, tab, newline and backslash as octal.
fn unescape_mountinfo(s: &str) -> String {
    s.replace("\\040", " ")
        .replace("\\011", "\t")
        .replace("\\012", "\n")
        .replace("\\134", "\\")
}

fn c_path(p: &Path) -> io::Result<CString> {
    CString::new(p.as_os_str().as_bytes()).map_err(io::Error::other)
}

/// Create `path` and mount a tmpfs on it (emptyDir, medium Memory).
pub fn mount_tmpfs(path: &Path) -> io::Result<()> {
    std::fs::create_dir_all(path)?;
    let target = c_path(path)?;
    let fstype = c"tmpfs";
    let data = c"mode=0777,size=16m";
    // SAFETY: every pointer is a valid NUL-terminated string for the call.
    let rc = unsafe {
        libc::mount(
            fstype.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV,
            data.as_ptr().cast(),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// umount2(path, 0), as kubelet's mounter does (no lazy detach: a busy
/// mount fails with EBUSY and is tried again on the next sync).
pub fn unmount(path: &Path) -> io::Result<()> {
    let target = c_path(path)?;
    // SAFETY: a valid NUL-terminated path.
    if unsafe { libc::umount2(target.as_ptr(), 0) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Remove the pod's directory once nothing is mounted under it (never
/// `remove_dir_all` across a mount point).
pub fn remove_pod_dir(kubelet_root: &Path, uid: &str) -> io::Result<()> {
    let dir = pod_dir(kubelet_root, uid);
    if let Some(m) = pod_volumes(kubelet_root, uid)
        .into_iter()
        .find(|v| is_mounted(v))
    {
        return Err(io::Error::new(
            io::ErrorKind::ResourceBusy,
            format!("{} is still mounted", m.display()),
        ));
    }
    match std::fs::remove_dir_all(&dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        r => r,
    }
}

/// `EBUSY`, `ENOENT`, ... for an errno.
pub fn errno_name(errno: i32) -> &'static str {
    match errno {
        libc::EBUSY => "EBUSY",
        libc::ENOENT => "ENOENT",
        libc::EINVAL => "EINVAL",
        libc::EPERM => "EPERM",
        libc::EACCES => "EACCES",
        libc::ENOTEMPTY => "ENOTEMPTY",
        libc::ENOTDIR => "ENOTDIR",
        _ => "E?",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubelet_layout() {
        let root = kubelet_root(Path::new("/var/lib/nri-trace-lab"));
        assert_eq!(
            empty_dir(&root, "u-1", "data"),
            Path::new(
                "/var/lib/nri-trace-lab/kubelet/pods/u-1/volumes/kubernetes.io~empty-dir/data"
            )
        );
        assert_eq!(container_path("data"), "/volumes/data");
        assert_eq!(unescape_mountinfo("/a\\040b"), "/a b");
        assert_eq!(errno_name(libc::EBUSY), "EBUSY");
    }

    #[test]
    fn volumes_found_on_disk() {
        let root = std::env::temp_dir().join(format!("lab-volume-{}", std::process::id()));
        let v = empty_dir(&root, "uid", "cache");
        std::fs::create_dir_all(&v).unwrap();
        assert_eq!(pod_volumes(&root, "uid"), vec![v.clone()]);
        assert!(!is_mounted(&v));
        remove_pod_dir(&root, "uid").unwrap();
        assert!(!pod_dir(&root, "uid").exists());
        assert!(pod_volumes(&root, "uid").is_empty());
        let _ = std::fs::remove_dir_all(root);
    }
}
