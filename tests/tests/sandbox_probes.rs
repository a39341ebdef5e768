//! Root/eBPF integration test of the sandbox probes (nri-trace-ebpf
//! src/sandbox.rs): a tracked process (a python3 script making the exact
//! syscalls a runtime makes when it tears a pod down) is watched, and every
//! event is checked against what the script did; an untracked process doing
//! the same is not reported. Twice: with every event sent (`--kernel all`)
//! and with the default filter, which counts in the kernel what explains
//! nothing (a walk's ENOTEMPTY, a successful removal of a path nothing
//! watched, cgroup creation) and still sends a failure that can hold a pod,
//! that path's later removal, and a namespace file's.
//!
//! Skips (with a reason) when not root or without an eBPF object; fails
//! instead when CI=true.

#[allow(unused_imports)]
mod common;

use std::{
    io::{BufRead, BufReader, Write},
    process::{Command, Stdio},
    time::Duration,
};

use common::*;
use nri_trace::capture::{CaptureEvent, EbpfOptions, SandboxEvent, SandboxOp};

/// What a runtime does to a pod, one syscall at a time (ctypes: exactly
/// these syscalls, no library choosing another). Prints `child N` and `done`.
const SCRIPT: &str = r#"
import ctypes, os, signal, sys, time
libc = ctypes.CDLL(None, use_errno=True)
d = sys.argv[1]
sys.stdin.readline()
pid = os.fork()
if pid == 0:
    time.sleep(30)
    os._exit(0)
print("child", pid, flush=True)
os.kill(pid, signal.SIGKILL)
os.waitpid(pid, 0)
os.makedirs(f"{d}/not-a-mount")
libc.umount2(f"{d}/not-a-mount".encode(), 2)
os.makedirs(f"{d}/full/x")
try:
    os.rmdir(f"{d}/full")
except OSError:
    pass
open(f"{d}/file", "w").close()
os.unlink(f"{d}/file")
os.unlink("relative-ignored") if os.path.exists("relative-ignored") else None
if os.fork() == 0:
    libc.unshare(0x40000000)
    os._exit(0)
os.wait()
open(f"{d}/netns", "w").close()
assert libc.mount(b"/proc/self/ns/net", f"{d}/netns".encode(), None, 4096, None) == 0
assert libc.umount2(f"{d}/netns".encode(), 2) == 0
os.unlink(f"{d}/netns")
os.makedirs(f"{d}/busy")
assert libc.mount(b"tmpfs", f"{d}/busy".encode(), b"tmpfs", 0, None) == 0
try:
    os.rmdir(f"{d}/busy")
except OSError:
    pass
assert libc.umount2(f"{d}/busy".encode(), 0) == 0
os.rmdir(f"{d}/busy")
mnt = [l.split(" - ")[0].split()[4] for l in open("/proc/self/mountinfo") if l.split(" - ")[1].split()[0] == "cgroup2"][0]
cg = f"{mnt}/nri-trace-it-{os.getpid()}"
os.mkdir(cg)
os.rmdir(cg)
print("done", flush=True)
"#;

fn run_script(
    dir: &std::path::Path,
) -> (std::process::Child, BufReader<std::process::ChildStdout>) {
    let mut c = Command::new("python3")
        .args(["-c", SCRIPT, dir.to_str().unwrap()])
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3");
    let out = BufReader::new(c.stdout.take().unwrap());
    (c, out)
}

fn line(r: &mut BufReader<std::process::ChildStdout>) -> String {
    let mut s = String::new();
    r.read_line(&mut s).expect("script output");
    s.trim().to_string()
}

fn sandbox(evs: &[CaptureEvent]) -> Vec<&SandboxEvent> {
    evs.iter()
        .filter_map(|e| match e {
            CaptureEvent::Sandbox(s) => Some(s),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_probes_report_the_runtime_tree() {
    if !guard("sandbox_probes_report_the_runtime_tree") {
        return;
    }
    report_the_runtime_tree(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_probes_send_what_explains_by_default() {
    if !guard("sandbox_probes_send_what_explains_by_default") {
        return;
    }
    report_the_runtime_tree(false).await;
}

/// The script traced; `all`: every event sent (`--kernel all`), else the
/// default filter.
async fn report_the_runtime_tree(all: bool) {
    let dir = std::env::temp_dir().join(format!(
        "nri-trace-sandbox-{}-{}",
        std::process::id(),
        if all { "all" } else { "explaining" }
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (mut tracked, mut out) = run_script(&dir);
    let (mut other, mut other_out) = {
        let d2 = dir.join("untracked");
        std::fs::create_dir_all(&d2).unwrap();
        run_script(&d2)
    };
    let cfg = nri_trace::capture::SessionConfig {
        pids: vec![tracked.id()],
        sandbox: true,
        ..session_config()
    };
    let opts = EbpfOptions {
        sandbox: true,
        all_kernel_events: all,
        ..ebpf_options()
    };
    let cap = Capture::start("sandbox", cfg, opts).await;
    let me = tracked.id();
    let (child, done) = blocking("the scripts", move || {
        for c in [&mut tracked, &mut other] {
            writeln!(c.stdin.as_mut().unwrap(), "go").unwrap();
        }
        let child: u32 = line(&mut out)
            .strip_prefix("child ")
            .and_then(|s| s.parse().ok())
            .expect("child pid");
        let done = line(&mut out);
        let _ = line(&mut other_out);
        let _ = line(&mut other_out);
        let _ = tracked.wait();
        let _ = other.wait();
        (child, done)
    })
    .await;
    assert_eq!(done, "done", "the tracked script failed");
    cap.wait_for("the cgroup rmdir", Duration::from_secs(10), |evs| {
        sandbox(evs)
            .iter()
            .any(|s| matches!(&s.op, SandboxOp::CgroupRmdir { path, .. } if path.ends_with(&format!("nri-trace-it-{me}"))))
    })
    .await;
    let evs = cap.finish().await;
    let sb = sandbox(&evs);
    let text: Vec<String> = sb.iter().map(|s| s.describe()).collect();
    let d = dir.display().to_string();
    let has = |what: &str, f: &dyn Fn(&SandboxEvent) -> bool| {
        assert!(
            sb.iter().any(|s| f(s)),
            "no {what} in:\n{}",
            text.join("\n")
        );
    };
    has("SIGKILL to the child", &|s| {
        s.tgid == me
            && matches!(s.op, SandboxOp::Signal { sig: 9, target, result: 0, .. } if target == child)
    });
    has("the child's exit, killed by SIGKILL", &|s| {
        s.tgid == child && s.op == SandboxOp::Exit { status: Some(9) }
    });
    has("umount2 EINVAL", &|s| {
        s.op == SandboxOp::Umount {
            path: format!("{d}/not-a-mount"),
            flags: 2,
            errno: libc::EINVAL,
        }
    });
    // What explains nothing: sent only when every event is.
    let walk = [
        (
            "rmdir ENOTEMPTY",
            SandboxOp::Unlink {
                path: format!("{d}/full"),
                dir: true,
                errno: libc::ENOTEMPTY,
            },
        ),
        (
            "unlink ok",
            SandboxOp::Unlink {
                path: format!("{d}/file"),
                dir: false,
                errno: 0,
            },
        ),
    ];
    for (what, op) in &walk {
        assert_eq!(
            sb.iter().any(|s| s.op == *op),
            all,
            "{what} sent: {}, every event: {all}\n{}",
            !all,
            text.join("\n")
        );
    }
    let mkdir = |s: &SandboxEvent| matches!(&s.op, SandboxOp::CgroupMkdir { path, .. } if *path == format!("/nri-trace-it-{me}"));
    assert_eq!(
        sb.iter().any(|s| mkdir(s)),
        all,
        "the cgroup mkdir, every event: {all}\n{}",
        text.join("\n")
    );
    // A removal that can hold a pod (EBUSY: mounted on), then redone: both.
    has("rmdir EBUSY", &|s| {
        s.op == SandboxOp::Unlink {
            path: format!("{d}/busy"),
            dir: true,
            errno: libc::EBUSY,
        }
    });
    has("the same rmdir, ok", &|s| {
        s.op == SandboxOp::Unlink {
            path: format!("{d}/busy"),
            dir: true,
            errno: 0,
        }
    });
    has("unshare(CLONE_NEWNET) in a forked child", &|s| {
        s.tgid != me
            && matches!(
                s.op,
                SandboxOp::Unshare {
                    flags: 0x4000_0000,
                    errno: 0
                }
            )
    });
    has("the netns bind mount", &|s| {
        matches!(&s.op, SandboxOp::NsBind { target, source, errno: 0, .. }
            if *target == format!("{d}/netns") && source == "/proc/self/ns/net")
    });
    has(
        "its unmount",
        &|s| matches!(&s.op, SandboxOp::Umount { path, errno: 0, .. } if *path == format!("{d}/netns")),
    );
    has("its file's removal", &|s| {
        s.op == SandboxOp::Unlink {
            path: format!("{d}/netns"),
            dir: false,
            errno: 0,
        }
    });
    // The caller's cgroup is resolved to a path on the live node.
    assert!(
        sb.iter()
            .filter(|s| s.tgid == me)
            .all(|s| s.cgroup.is_some()),
        "unresolved cgroup:\n{}",
        text.join("\n")
    );
    // Nothing of the untracked script, nor SIGCHLD (not in the mask), nor
    // its relative paths.
    let untracked = format!("{d}/untracked");
    assert!(
        !text
            .iter()
            .any(|t| t.contains(&untracked) || t.contains("SIGCHLD")),
        "untracked or unwanted events:\n{}",
        text.join("\n")
    );
    // No loss.
    let lost = evs.iter().rev().find_map(|e| match e {
        CaptureEvent::Loss(l) => Some(*l),
        _ => None,
    });
    assert!(
        lost.is_none_or(|l| l.sandbox_suppressed == 0
            && l.pod_map_full == 0
            && l.lost_records == 0),
        "{lost:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
