//! Who a process is, from /proc: its comm, state and parent, command
//! line, executable, environment at exec, thread group, effective uid and
//! cgroup.

use std::collections::{BTreeMap, HashMap};
use std::ffi::{OsStr, OsString};
use std::fs;
use std::io::Read;

use procfs::process::Process;

use super::open_process;
use super::proc_net_unix::parse_dec_u64;

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
pub(crate) fn process_env_var(pid: u32, name: &str) -> Option<String> {
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

/// Reads the variables `names` from `/proc/<pid>/environ` with one read; absent ones are left out.
///
/// Like `process_env_var`, this is the environment at exec. An unreadable environ (process
/// gone, not root) gives an empty map: callers use it for reports only.
pub(crate) fn process_env(pid: u32, names: &[String]) -> BTreeMap<String, String> {
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
///
/// Hand-written: procfs's `status()` reads the file as UTF-8 lines, and the
/// kernel prints the comm on its Name line without escaping bytes >= 0x80
/// (fs/proc/array.c `proc_task_name`), so a process could hide from procfs
/// with a non-UTF-8 comm; this reads the one line needed, lossily.
pub(crate) fn process_euid(pid: u32) -> Option<u32> {
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
pub(crate) fn parse_proc_cgroup(text: &str) -> Option<String> {
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

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;
    use std::path::Path;

    use super::*;
    use crate::capture::discovery::test_support::{euid, KillOnDrop, TempDir};

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
            assert_eq!(process_euid(pid), Some(euid()));
            assert_eq!(process_info(pid).map(|i| i.comm).as_deref(), Some(want));
        }
        assert_eq!(proc_stat(u32::MAX), None);
        assert_eq!(proc_stat(i32::MAX as u32), None);
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
        // spawn returns once the exec closed its close-on-exec pipe, which
        // the kernel does (fs/exec.c begin_new_exec) before the ELF loader
        // sets the new environment's bounds (binfmt_elf.c
        // create_elf_tables): under load the environ read between the two
        // is empty (a run with three busy loops beside it, 2026-11-30).
        let t0 = std::time::Instant::now();
        while var("PATH").is_none() && t0.elapsed() < std::time::Duration::from_secs(5) {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
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

    /// process_info/env of self are readable.
    #[test]
    fn self_process() {
        let me = std::process::id();
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
}
