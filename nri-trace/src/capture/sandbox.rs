//! Sandbox events: what the kernel saw the runtime's process tree do to a
//! pod (signals, exits, unmounts, unlinks, namespaces, cgroups), from the
//! probes in nri-trace-ebpf/src/sandbox.rs.
//!
//! [`from_record`] parses a ring-buffer record (pure); [`SandboxContext`]
//! adds what only the live node can tell (cgroup paths of cgroup ids, the
//! target of a signal, a netns bind's target with its symlinks resolved)
//! and finds the process tree to watch ([`runtime_tree`]).
//!
//! procfs reads /proc for it: mountinfo (where cgroup v2 is), a process's
//! cgroup, the process list and each one's stat (comm, ppid). The cgroup
//! tree itself (/sys/fs/cgroup) is walked as plain directories.

use std::{
    collections::{HashMap, HashSet},
    os::unix::fs::MetadataExt,
    path::Path,
};

use nri_trace_common::{
    removal_errno_is_benign, Syscall, SANDBOX_NO_CODE, SANDBOX_PATH2_CUT, SANDBOX_PATH_CUT,
    SANDBOX_PATH_LEN, SANDBOX_RECORD_LEN,
};
use procfs::ProcessCGroup;
use serde::{Deserialize, Serialize};

use super::{discovery, ring_entry::RingEntry, Timestamp};

/// One sandbox event.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxEvent {
    pub ts: Timestamp,
    /// The process (and thread) that made the call or sent the signal; for
    /// `exit`, the process that exited.
    pub tgid: u32,
    pub tid: u32,
    pub comm: String,
    /// Its cgroup id (cgroup v2 inode number).
    pub cgroup_id: u64,
    /// Its cgroup path below the cgroup2 mount, when the node could tell.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<String>,
    #[serde(flatten)]
    pub op: SandboxOp,
    /// A path was longer than the probes copy (256 bytes) and is cut.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
}

/// What happened. `errno` is 0 on success.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum SandboxOp {
    /// A signal sent to a process of the tree (kill, tgkill,
    /// pidfd_send_signal, or by the kernel).
    Signal {
        sig: i32,
        target: u32,
        /// The target's comm and cgroup, read from /proc when the event
        /// was drained (None when it was already gone).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        target_comm: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        target_cgroup: Option<String>,
        /// The kernel's result: 0 delivered, 1 ignored, 2 already pending,
        /// 3 overflow, 4 lost (include/trace/events/signal.h).
        result: i32,
    },
    /// A signalled or exec'd process exited. `status` is in wait(2) form: the
    /// killing signal in the low 7 bits, or the exit code in bits 8-15.
    Exit {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        status: Option<i32>,
    },
    Umount {
        path: String,
        flags: u64,
        errno: i32,
    },
    /// unlink, rmdir, or unlinkat (with AT_REMOVEDIR: `dir`).
    Unlink {
        path: String,
        dir: bool,
        errno: i32,
    },
    /// A bind mount of a /proc namespace file (a pinned netns).
    NsBind {
        target: String,
        source: String,
        errno: i32,
        /// `target` with its symlinks resolved, when that is another path
        /// (filled in live, [`SandboxContext::enrich`]): the file the
        /// runtime may unmount and remove under that name. containerd
        /// resolves a netns path before it unmounts and removes it (its
        /// `pkg/netns` `unmountNS`: `symlink.FollowSymlinkInScope`), while
        /// NRI gives the plugins the path as configured: a pod's
        /// `/var/run/netns/cni-...` goes as `/run/netns/cni-...`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        resolved: Option<String>,
    },
    Unshare {
        flags: u64,
        errno: i32,
    },
    Setns {
        nstype: u64,
        errno: i32,
    },
    /// A process made in new namespaces (clone/clone3 with CLONE_NEW*).
    CloneNs {
        child: u32,
        flags: u64,
    },
    CgroupMkdir {
        id: u64,
        path: String,
    },
    CgroupRmdir {
        id: u64,
        path: String,
    },
    /// A process of the tree started a program (execve): `path` is the
    /// file executed; the event's comm is already the new program's and
    /// its cgroup the one it runs in (a container's, for a container's
    /// first process: the pod's pause process is the sandbox running).
    Exec {
        path: String,
    },
}

/// A signal's name (x86_64 numbering, include/uapi/asm-generic/signal.h).
pub(crate) fn signal_name(sig: i32) -> String {
    const NAMES: [&str; 32] = [
        "0",
        "SIGHUP",
        "SIGINT",
        "SIGQUIT",
        "SIGILL",
        "SIGTRAP",
        "SIGABRT",
        "SIGBUS",
        "SIGFPE",
        "SIGKILL",
        "SIGUSR1",
        "SIGSEGV",
        "SIGUSR2",
        "SIGPIPE",
        "SIGALRM",
        "SIGTERM",
        "SIGSTKFLT",
        "SIGCHLD",
        "SIGCONT",
        "SIGSTOP",
        "SIGTSTP",
        "SIGTTIN",
        "SIGTTOU",
        "SIGURG",
        "SIGXCPU",
        "SIGXFSZ",
        "SIGVTALRM",
        "SIGPROF",
        "SIGWINCH",
        "SIGIO",
        "SIGPWR",
        "SIGSYS",
    ];
    usize::try_from(sig)
        .ok()
        .and_then(|i| NAMES.get(i))
        .map_or_else(|| format!("signal {sig}"), ToString::to_string)
}

/// An errno as "EBUSY (Device or resource busy)"; "ok" for 0.
pub(crate) fn errno_text(errno: i32) -> String {
    let name = match errno {
        0 => return "ok".into(),
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::EINTR => "EINTR",
        libc::EACCES => "EACCES",
        libc::EBUSY => "EBUSY",
        libc::EEXIST => "EEXIST",
        libc::ENOTDIR => "ENOTDIR",
        libc::EISDIR => "EISDIR",
        libc::EINVAL => "EINVAL",
        libc::EROFS => "EROFS",
        libc::ENOTEMPTY => "ENOTEMPTY",
        _ => "",
    };
    let text = std::io::Error::from_raw_os_error(errno).to_string();
    // "Device or resource busy (os error 16)" -> "Device or resource busy".
    let text = text.split(" (os error").next().unwrap_or_default();
    if name.is_empty() {
        format!("errno {errno} ({text})")
    } else {
        format!("{name} ({text})")
    }
}

/// A wait(2) status in words: "killed by SIGKILL", "exit code 0".
pub(crate) fn status_text(status: i32) -> String {
    let sig = status & 0x7f;
    if sig != 0 {
        format!(
            "killed by {}{}",
            signal_name(sig),
            if status & 0x80 != 0 {
                " (core dumped)"
            } else {
                ""
            }
        )
    } else {
        format!("exit code {}", (status >> 8) & 0xff)
    }
}

/// CLONE_NEW* flags in words: "mnt,pid,net".
pub(crate) fn namespaces_text(flags: u64) -> String {
    const NS: [(u64, &str); 8] = [
        (0x0002_0000, "mnt"),
        (0x0200_0000, "cgroup"),
        (0x0400_0000, "uts"),
        (0x0800_0000, "ipc"),
        (0x1000_0000, "user"),
        (0x2000_0000, "pid"),
        (0x4000_0000, "net"),
        (0x80, "time"),
    ];
    let v: Vec<&str> = NS
        .iter()
        .filter(|(b, _)| flags & b != 0)
        .map(|(_, n)| *n)
        .collect();
    if v.is_empty() {
        "no new namespace".into()
    } else {
        v.join(",")
    }
}

/// 64-hex-digit ids (containerd and CRI-O container and sandbox ids) in
/// a path: "/run/containerd/.../k8s.io/<id>/rootfs",
/// "kubepods-besteffort-pod<uid>.slice/cri-containerd-<id>.scope".
pub(crate) fn ids_in(path: &str) -> impl Iterator<Item = &str> {
    path.split(|c: char| !c.is_ascii_hexdigit() || c.is_ascii_uppercase())
        .filter(|w| w.len() == 64)
}

/// Pod uids (Kubernetes object uids, 8-4-4-4-12 hex digits) in a path,
/// with dashes: kubelet's own paths name a pod by its uid, not by a
/// runtime id: "/var/lib/kubelet/pods/<uid>/volumes/...", and the pod
/// cgroup "kubepods-besteffort-pod<uid with _>.slice" (systemd driver)
/// or "kubepods/besteffort/pod<uid>" (cgroupfs driver).
pub(crate) fn pod_uids_in(path: &str) -> impl Iterator<Item = String> + '_ {
    const GROUPS: [usize; 5] = [8, 4, 4, 4, 12];
    let b = path.as_bytes();
    (0..b.len().saturating_sub(35)).filter_map(move |i| {
        let w = &b[i..i + 36];
        let edge_ok = |j: Option<&u8>| j.is_none_or(|c| !c.is_ascii_hexdigit());
        // "pod<uid>" in cgroup names: the 'd' before it is not a digit of it.
        let after_pod = i >= 3 && &b[i - 3..i] == b"pod";
        if !(after_pod || edge_ok(i.checked_sub(1).and_then(|j| b.get(j))))
            || !edge_ok(b.get(i + 36))
        {
            return None;
        }
        let mut at = 0;
        for (g, len) in GROUPS.iter().enumerate() {
            if !w[at..at + len]
                .iter()
                .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(c))
            {
                return None;
            }
            at += len;
            if g < 4 {
                if !matches!(w[at], b'-' | b'_') {
                    return None;
                }
                at += 1;
            }
        }
        Some(String::from_utf8_lossy(w).replace('_', "-"))
    })
}

impl SandboxOp {
    /// An unmount's or a removal's path and errno.
    pub fn path_result(&self) -> Option<(&str, i32)> {
        match self {
            SandboxOp::Umount { path, errno, .. } | SandboxOp::Unlink { path, errno, .. } => {
                Some((path, *errno))
            }
            _ => None,
        }
    }

    /// An unmount or a removal that failed in a way that can hold a pod
    /// (its path and errno): not one `removal_errno_is_benign` calls
    /// benign, the rule the probes filter by too.
    pub fn failure(&self) -> Option<(&str, i32)> {
        let (path, errno) = self.path_result()?;
        let umount = matches!(self, SandboxOp::Umount { .. });
        let benign = removal_errno_is_benign(umount, errno, path.contains("cgroup"));
        (!benign).then_some((path, errno))
    }
}

impl SandboxEvent {
    /// The texts that name the pod an event is about (its ids, or
    /// kubelet's uid, appear in them): a signal is about its target (its
    /// sender is the runtime's), so its target's cgroup; any other event
    /// is about the caller's cgroup and the path it names.
    pub fn pod_texts(&self) -> Vec<&str> {
        if let SandboxOp::Signal { target_cgroup, .. } = &self.op {
            return target_cgroup.as_deref().into_iter().collect();
        }
        let mut texts: Vec<&str> = self.cgroup.as_deref().into_iter().collect();
        match &self.op {
            SandboxOp::Umount { path, .. }
            | SandboxOp::Unlink { path, .. }
            | SandboxOp::CgroupMkdir { path, .. }
            | SandboxOp::CgroupRmdir { path, .. } => texts.push(path),
            SandboxOp::NsBind { target, .. } => texts.push(target),
            // The program's path names no pod; its cgroup does.
            SandboxOp::Exec { .. } => {}
            SandboxOp::Signal { .. }
            | SandboxOp::Exit { .. }
            | SandboxOp::Unshare { .. }
            | SandboxOp::Setns { .. }
            | SandboxOp::CloneNs { .. } => {}
        }
        texts
    }

    /// One line in words (unsanitized: sinks sanitize).
    pub fn describe(&self) -> String {
        let who = format!("{}[{}]", self.comm, self.tgid);
        match &self.op {
            SandboxOp::Signal {
                sig,
                target,
                target_comm,
                result,
                ..
            } => format!(
                "{who} sent {} to pid {target}{}{}",
                signal_name(*sig),
                target_comm
                    .as_ref()
                    .map(|c| format!(" ({c})"))
                    .unwrap_or_default(),
                match result {
                    0 => String::new(),
                    1 => ": ignored".into(),
                    2 => ": already pending".into(),
                    r => format!(": not delivered ({r})"),
                }
            ),
            SandboxOp::Exit { status } => format!(
                "pid {} ({}) exited: {}",
                self.tgid,
                self.comm,
                status.map_or_else(|| "status unknown".into(), status_text)
            ),
            SandboxOp::Umount { path, errno, .. } => {
                format!("{who} unmount {path}: {}", errno_text(*errno))
            }
            SandboxOp::Unlink { path, dir, errno } => format!(
                "{who} {} {path}: {}",
                if *dir { "rmdir" } else { "unlink" },
                errno_text(*errno)
            ),
            SandboxOp::NsBind {
                target,
                source,
                errno,
                ..
            } => format!(
                "{who} bind-mount {source} on {target}: {}",
                errno_text(*errno)
            ),
            SandboxOp::Unshare { flags, errno } => format!(
                "{who} unshare({}): {}",
                namespaces_text(*flags),
                errno_text(*errno)
            ),
            SandboxOp::Setns { nstype, errno } => format!(
                "{who} setns({}): {}",
                if *nstype == 0 {
                    "any".into()
                } else {
                    namespaces_text(*nstype)
                },
                errno_text(*errno)
            ),
            SandboxOp::CloneNs { child, flags } => format!(
                "{who} made pid {child} in new namespaces ({})",
                namespaces_text(*flags)
            ),
            SandboxOp::CgroupMkdir { path, .. } => format!("cgroup {path} created by {who}"),
            SandboxOp::CgroupRmdir { path, .. } => format!("cgroup {path} removed by {who}"),
            SandboxOp::Exec { path } => format!(
                "{who} started {path}{}",
                self.cgroup
                    .as_ref()
                    .map(|c| format!(" in cgroup {c}"))
                    .unwrap_or_default()
            ),
        }
    }
}

/// A NUL-terminated, possibly cut, byte string from the kernel, as text.
fn c_str(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

fn errno_of(ret: i64) -> i32 {
    if ret < 0 {
        (-ret).min(i64::from(i32::MAX)) as i32
    } else {
        0
    }
}

/// Parse a `EntryKind::Sandbox` record; None when its payload is short or
/// its syscall is not a sandbox one.
pub(crate) fn from_record(r: &RingEntry<'_>, ts: Timestamp) -> Option<SandboxEvent> {
    let p = r.payload;
    if p.len() < SANDBOX_RECORD_LEN {
        return None;
    }
    let u64_at = |o: usize| u64::from_ne_bytes(p[o..o + 8].try_into().expect("8 bytes"));
    let u32_at = |o: usize| u32::from_ne_bytes(p[o..o + 4].try_into().expect("4 bytes"));
    // Offsets of SandboxRecord's repr(C) fields (asserted in the tests).
    let cgroup_id = u64_at(0);
    let arg = u64_at(8);
    let target = u32_at(16);
    // `aux` (offset 20: dirfd, setns fd, si_code, cgroup hierarchy) is
    // not shown: the path, flags and errno say what matters.
    let comm = c_str(&p[24..40]);
    let flags = u32_at(40);
    let path = c_str(&p[48..48 + SANDBOX_PATH_LEN]);
    let path2 = c_str(&p[48 + SANDBOX_PATH_LEN..48 + 2 * SANDBOX_PATH_LEN]);
    let errno = errno_of(r.ret);
    const AT_REMOVEDIR: u64 = 0x200; // include/uapi/linux/fcntl.h
    let op = match r.syscall {
        Syscall::Signal => SandboxOp::Signal {
            sig: arg as i32,
            target,
            target_comm: None,
            target_cgroup: None,
            result: r.ret as i32,
        },
        Syscall::Exit => SandboxOp::Exit {
            status: (flags & SANDBOX_NO_CODE == 0).then_some(arg as u32 as i32),
        },
        Syscall::Umount2 => SandboxOp::Umount {
            path,
            flags: arg,
            errno,
        },
        Syscall::Unlinkat => SandboxOp::Unlink {
            path,
            dir: arg & AT_REMOVEDIR != 0,
            errno,
        },
        Syscall::Unlink => SandboxOp::Unlink {
            path,
            dir: false,
            errno,
        },
        Syscall::Rmdir => SandboxOp::Unlink {
            path,
            dir: true,
            errno,
        },
        Syscall::Mount => SandboxOp::NsBind {
            target: path,
            source: path2,
            errno,
            resolved: None,
        },
        Syscall::Unshare => SandboxOp::Unshare { flags: arg, errno },
        Syscall::Setns => SandboxOp::Setns { nstype: arg, errno },
        Syscall::CloneNs => SandboxOp::CloneNs {
            child: target,
            flags: arg,
        },
        Syscall::CgroupMkdir => SandboxOp::CgroupMkdir { id: arg, path },
        Syscall::CgroupRmdir => SandboxOp::CgroupRmdir { id: arg, path },
        Syscall::Exec => SandboxOp::Exec { path },
        _ => return None,
    };
    Some(SandboxEvent {
        ts,
        tgid: r.tgid,
        tid: r.tid,
        comm,
        cgroup_id,
        cgroup: None,
        op,
        truncated: flags & (SANDBOX_PATH_CUT | SANDBOX_PATH2_CUT) != 0,
    })
}

/// Where cgroup v2 (the unified hierarchy) is mounted: /sys/fs/cgroup, or
/// /sys/fs/cgroup/unified on a hybrid (v1 + v2) node; from mountinfo.
fn cgroup2_mount() -> Option<std::path::PathBuf> {
    procfs::process::Process::myself()
        .and_then(|p| p.mountinfo())
        .ok()?
        .into_iter()
        .find(|m| m.fs_type == "cgroup2")
        .map(|m| m.mount_point)
}
/// Most cgroups indexed; a node has hundreds to a few thousand.
const MAX_CGROUPS: usize = 65536;
/// Most signal targets remembered.
const MAX_PIDS: usize = 16384;

/// What the live node adds to sandbox events.
#[derive(Debug, Default)]
pub(crate) struct SandboxContext {
    /// cgroup id (inode of its directory) -> path below the mount.
    cgroups: HashMap<u64, String>,
    /// When the cgroup tree was last walked (monotonic ns).
    walked_ns: u64,
    /// pid -> (comm, cgroup path), read when a signal to it was seen.
    pids: HashMap<u32, (Option<String>, Option<String>)>,
    /// pid -> cgroup path of its last exec, for its exit: by then the
    /// cgroup may be gone from the index (a container's is removed as
    /// soon as it is empty) and the process from /proc.
    execs: HashMap<u32, String>,
}

impl SandboxContext {
    pub(crate) fn new() -> Self {
        let mut c = Self::default();
        c.walk(0);
        c
    }

    /// Index every cgroup directory by id (its inode number).
    fn walk(&mut self, now_ns: u64) {
        self.walked_ns = now_ns;
        let Some(root) = cgroup2_mount() else {
            return;
        };
        let root = root.as_path();
        let mut stack = vec![(root.to_path_buf(), 0usize)];
        while let Some((dir, depth)) = stack.pop() {
            if self.cgroups.len() >= MAX_CGROUPS {
                break;
            }
            let Ok(md) = std::fs::metadata(&dir) else {
                continue;
            };
            let rel = dir
                .strip_prefix(root)
                .map(|p| format!("/{}", p.display()))
                .unwrap_or_default();
            let _: &Path = &dir;
            self.cgroups.insert(md.ino(), rel);
            if depth >= 12 {
                continue;
            }
            let Ok(rd) = std::fs::read_dir(&dir) else {
                continue;
            };
            for e in rd.flatten() {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    stack.push((e.path(), depth + 1));
                }
            }
        }
    }

    fn cgroup_path(&mut self, id: u64, now_ns: u64) -> Option<String> {
        if let Some(p) = self.cgroups.get(&id) {
            return Some(p.clone());
        }
        // Unknown: walk again, at most once a second.
        if now_ns.saturating_sub(self.walked_ns) >= 1_000_000_000 {
            self.walk(now_ns);
        }
        self.cgroups.get(&id).cloned()
    }

    /// Fill in what the node can tell about `ev`, now (`now_ns`); false
    /// when it is not worth passing on (see the end).
    pub(crate) fn enrich(&mut self, ev: &mut SandboxEvent, now_ns: u64) -> bool {
        let mut unsignalled_exit = false;
        match &mut ev.op {
            // New cgroups are found by the next walk: the tracepoint's ids
            // are per hierarchy, and a v1 one may equal a v2 id.
            SandboxOp::CgroupRmdir { id, .. } => {
                self.cgroups.remove(id);
            }
            SandboxOp::Signal {
                target,
                target_comm,
                target_cgroup,
                ..
            } => {
                if !self.pids.contains_key(target) {
                    if self.pids.len() >= MAX_PIDS {
                        self.pids.clear();
                    }
                    self.pids.insert(
                        *target,
                        (discovery::read_comm(*target), proc_cgroup(*target)),
                    );
                }
                if let Some((c, g)) = self.pids.get(target) {
                    target_comm.clone_from(c);
                    target_cgroup.clone_from(g);
                }
            }
            SandboxOp::Exit { .. } => {
                // Gone from /proc by now, most likely: what was read when
                // it was signalled, or when it exec'd.
                let exec_cgroup = self.execs.remove(&ev.tgid);
                if let Some((_, g)) = self.pids.remove(&ev.tgid) {
                    ev.cgroup = g.or(exec_cgroup);
                } else {
                    unsignalled_exit = true;
                    ev.cgroup = exec_cgroup;
                }
            }
            SandboxOp::NsBind {
                target,
                errno: 0,
                resolved,
                ..
            } => *resolved = resolved_path(target),
            _ => {}
        }
        if ev.cgroup.is_none() && ev.cgroup_id != 0 {
            ev.cgroup = self
                .cgroup_path(ev.cgroup_id, now_ns)
                .filter(|p| p != "/")
                // The v2 root on a v1 (or hybrid) node: the v1 path.
                .or_else(|| proc_cgroup(ev.tgid));
        }
        // The probes report the exit of every program the tree exec'd:
        // one nobody signalled matters only in a container's or sandbox's
        // cgroup (a container ending on its own: engine/correlate.rs,
        // `container_exited`); the runtime's helpers (runc, the shims'
        // start-up) end that way all the time.
        if let (SandboxOp::Exec { .. }, Some(g)) = (&ev.op, &ev.cgroup) {
            if self.execs.len() >= MAX_PIDS {
                self.execs.clear();
            }
            self.execs.insert(ev.tgid, g.clone());
        }
        !unsignalled_exit || ev.cgroup.as_deref().is_some_and(names_an_object)
    }
}

/// `path` with its symlinks resolved (and `.`, `..`, `//` gone), when
/// that differs from `path`: the file itself, or (gone already) its
/// directory and its name.
fn resolved_path(path: &str) -> Option<String> {
    let p = Path::new(path);
    let real = std::fs::canonicalize(p).ok().or_else(|| {
        let dir = std::fs::canonicalize(p.parent()?).ok()?;
        Some(dir.join(p.file_name()?))
    })?;
    let real = real.to_str()?;
    (real != path).then(|| real.to_string())
}

/// Whether a cgroup's last component names a sandbox or container: the
/// 64 hex digits of its id, as containerd and CRI-O name them with either
/// cgroup driver (`<id>`, `cri-containerd-<id>.scope`, `crio-<id>.scope`);
/// not CRI-O's monitor cgroup `crio-conmon-<id>`, where its OCI runtime
/// and helpers run.
fn names_an_object(cgroup: &str) -> bool {
    let last = cgroup.rsplit('/').next().unwrap_or_default();
    !last.starts_with("crio-conmon-")
        && last
            .as_bytes()
            .split(|b| !b.is_ascii_hexdigit())
            .any(|run| run.len() == 64)
}

/// The cgroup path of a process: its v2 one ("0::/path" in
/// /proc/PID/cgroup), or on a v1 node (where the v2 one is "/") the
/// first v1 hierarchy's that is not the root.
pub(crate) fn proc_cgroup(pid: u32) -> Option<String> {
    let cgroups = discovery::open_process(pid).ok()?.cgroups().ok()?;
    cgroup_of(&cgroups.0)
}

/// The pick of [`proc_cgroup`] among the lines of /proc/PID/cgroup
/// (procfs's parse of "hierarchy:controllers:path").
fn cgroup_of(cgroups: &[ProcessCGroup]) -> Option<String> {
    // The v2 line is "0::path": hierarchy 0, no controllers.
    let is_v2 = |g: &&ProcessCGroup| g.hierarchy == 0 && g.controllers.is_empty();
    let v2 = cgroups.iter().find(is_v2).map(|g| g.pathname.clone());
    match v2 {
        Some(p) if p != "/" => Some(p),
        _ => cgroups
            .iter()
            .filter(|g| !is_v2(g))
            .map(|g| g.pathname.clone())
            .find(|p| p != "/")
            .or(v2),
    }
}

/// Process names whose trees make and unmake pods: the runtimes, their
/// shims and monitors, and kubelet. A shim daemonizes (its parent becomes
/// init), so it is not found as a descendant of the runtime.
const TREE_ROOTS: &[&str] = &[
    "containerd",
    "containerd-shim",
    "containerd-shim-runc-v2",
    "crio",
    "conmon",
    "kubelet",
];

/// Whether a process of this name makes and unmakes pods (its tree's
/// sandbox events count): [`TREE_ROOTS`], and any containerd shim.
pub(crate) fn makes_pods(comm: &str) -> bool {
    TREE_ROOTS.contains(&comm) || comm.starts_with("containerd-shim")
}

/// `roots` (the runtime's pids) plus every running process named in
/// `TREE_ROOTS`, and all their descendants: the processes whose sandbox
/// events count. New ones are followed in the kernel (task_newtask).
pub fn runtime_tree(roots: &[u32]) -> Vec<u32> {
    let mut parent_of: Vec<(u32, u32)> = Vec::new();
    let mut tree: HashSet<u32> = roots.iter().copied().collect();
    if let Ok(all) = procfs::process::all_processes() {
        // A process that exits while we look is skipped.
        for p in all.flatten() {
            let Ok(pid) = u32::try_from(p.pid) else {
                continue;
            };
            let Some(stat) = discovery::stat_of(&p) else {
                continue;
            };
            let comm = stat.comm.as_str();
            if makes_pods(comm) {
                tree.insert(pid);
            }
            parent_of.push((pid, stat.ppid));
        }
    }
    // Descendants: repeat until no new child joins (bounded by depth).
    for _ in 0..32 {
        let before = tree.len();
        for &(pid, ppid) in &parent_of {
            if tree.contains(&ppid) {
                tree.insert(pid);
            }
        }
        if tree.len() == before {
            break;
        }
    }
    let mut v: Vec<u32> = tree.into_iter().collect();
    v.sort_unstable();
    v
}

#[cfg(test)]
mod tests;
