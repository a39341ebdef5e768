//! `nri-trace doctor`: what works on this node, and what to fix.
//!
//! Every check is independent and reports one line; the last check really
//! loads and attaches the capture programs, which is the only proof that
//! matters (a kernel can have BTF and tracefs and still refuse a program).

use std::path::Path;

use serde::Serialize;

use crate::capture::{
    discovery,
    ebpf::{
        BackendChoice, DataBackend, EbpfBackend, EbpfOptions, KernelHelpers, CONNECTION_PROGRAMS,
        DATA_PROGRAMS, FALLBACK_STEPS, SANDBOX_PROGRAMS,
    },
    runtimes, selftest,
};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    Warn,
    Fail,
}

#[derive(Clone, Debug, Serialize)]
pub struct Check {
    pub name: String,
    pub status: Status,
    pub detail: String,
    /// What to do about it (empty when ok).
    pub fix: String,
}

fn check(name: &str, status: Status, detail: impl Into<String>, fix: impl Into<String>) -> Check {
    Check {
        name: name.into(),
        status,
        detail: detail.into(),
        fix: fix.into(),
    }
}

/// Default runtime sockets (containerd, CRI-O, NRI).
pub const DEFAULT_SOCKETS: &[(&str, &str)] = &[
    ("containerd CRI", "/run/containerd/containerd.sock"),
    ("CRI-O CRI", "/var/run/crio/crio.sock"),
    ("NRI", "/var/run/nri/nri.sock"),
];

/// Effective capabilities of this process, from /proc/self/status CapEff
/// (procfs; its status parser needs a UTF-8 Name line, and ours is the
/// name of our own binary).
fn cap_eff() -> Option<u64> {
    Some(
        procfs::process::Process::myself()
            .ok()?
            .status()
            .ok()?
            .capeff,
    )
}

pub fn privileges() -> Check {
    // CAP_SYS_ADMIN 21, CAP_PERFMON 38, CAP_BPF 39, CAP_SYS_PTRACE 19.
    let caps = cap_eff().unwrap_or(0);
    let has = |b: u32| caps & (1u64 << b) != 0;
    let euid = unsafe { libc::geteuid() };
    if euid == 0 && has(21) {
        check("privileges", Status::Ok, "root with CAP_SYS_ADMIN", "")
    } else if has(39) && has(38) && has(19) {
        check(
            "privileges",
            Status::Ok,
            "CAP_BPF + CAP_PERFMON + CAP_SYS_PTRACE",
            "",
        )
    } else {
        check(
            "privileges",
            Status::Fail,
            format!("euid {euid}, CapEff {caps:#x}"),
            "run as root (sudo nri-trace ...), or grant CAP_BPF, CAP_PERFMON and CAP_SYS_PTRACE",
        )
    }
}

pub fn btf() -> Check {
    if Path::new("/sys/kernel/btf/vmlinux").exists() {
        check("kernel BTF", Status::Ok, "/sys/kernel/btf/vmlinux", "")
    } else {
        check(
            "kernel BTF",
            Status::Fail,
            "/sys/kernel/btf/vmlinux missing",
            "use a kernel built with CONFIG_DEBUG_INFO_BTF=y (bpf_get_current_task_btf and the task_struct offsets need it)",
        )
    }
}

pub fn kernel_version() -> Check {
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    unsafe { libc::uname(&raw mut u) };
    let rel = unsafe { std::ffi::CStr::from_ptr(u.release.as_ptr()) }
        .to_string_lossy()
        .into_owned();
    let mut it = rel
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|s| s.parse::<u32>().ok());
    let (maj, min) = (it.next().unwrap_or(0), it.next().unwrap_or(0));
    // The ring buffer: 5.8. Before 5.17 (bpf_loop) and 5.15
    // (bpf_task_pt_regs) the fallback programs run (`kernel helpers`).
    if (maj, min) >= (5, 8) {
        check("kernel version", Status::Ok, rel, "")
    } else {
        check(
            "kernel version",
            Status::Fail,
            rel,
            "nri-trace needs Linux >= 5.8 (BPF ring buffer)",
        )
    }
}

pub fn tracefs() -> Check {
    let tp = Path::new("/sys/kernel/tracing/events");
    if tp.exists() {
        return check("tracefs", Status::Ok, "/sys/kernel/tracing", "");
    }
    if Path::new("/sys/kernel/debug/tracing/events").exists() {
        return check("tracefs", Status::Ok, "/sys/kernel/debug/tracing", "");
    }
    check(
        "tracefs",
        Status::Warn,
        "not mounted",
        "nri-trace mounts it when it starts; or: mount -t tracefs tracefs /sys/kernel/tracing",
    )
}

pub fn tracepoints() -> Check {
    let base = [
        "/sys/kernel/tracing/events",
        "/sys/kernel/debug/tracing/events",
    ]
    .into_iter()
    .map(Path::new)
    .find(|p| p.exists());
    let Some(base) = base else {
        return check(
            "tracepoints",
            Status::Warn,
            "tracefs not mounted: cannot list",
            "see tracefs",
        );
    };
    let all = || DATA_PROGRAMS.iter().chain(CONNECTION_PROGRAMS);
    let missing: Vec<String> = all()
        .filter(|(_, c, t)| !base.join(c).join(t).join("id").exists())
        .map(|(_, c, t)| format!("{c}/{t}"))
        .collect();
    if missing.is_empty() {
        check(
            "tracepoints",
            Status::Ok,
            format!("{} present", all().count()),
            "",
        )
    } else {
        check(
            "tracepoints",
            Status::Fail,
            format!("missing: {}", missing.join(", ")),
            "use a kernel with CONFIG_FTRACE_SYSCALLS=y",
        )
    }
}

pub fn socket(label: &str, path: &str) -> Check {
    let name = format!("socket {label}");
    if !Path::new(path).exists() {
        return check(
            &name,
            Status::Warn,
            format!("{path}: not present"),
            "pass --socket PATH if the runtime uses another path",
        );
    }
    match discovery::find_listeners(Path::new(path)) {
        Ok(ls) => {
            let who: Vec<String> = ls
                .iter()
                .map(|l| {
                    let comm = discovery::process_info(l.pid)
                        .map(|i| i.comm)
                        .unwrap_or_default();
                    format!(
                        "{comm}[{}] fd {} ({} connections)",
                        l.pid,
                        l.listen_fd,
                        l.connections.len()
                    )
                })
                .collect();
            check(&name, Status::Ok, format!("{path}: {}", who.join(", ")), "")
        }
        Err(e) => check(
            &name,
            Status::Warn,
            format!("{path}: {e}"),
            "see docs/runtimes.md",
        ),
    }
}

/// One-byte writes to each of a file, a pipe and a TCP socket in the
/// untraced-writes check (issue 34's figure).
pub const UNTRACED_WRITES: u32 = 100_000;

/// Load and attach every program (the capture's on `backend`, and the
/// sandbox probes'), then run the self-tests with them: the proof that
/// capture works on this kernel, beyond the verifier's yes
/// (capture/selftest.rs).
pub fn load(choice: BackendChoice) -> Vec<Check> {
    if EbpfBackend::object().is_empty() {
        return vec![check(
            "eBPF programs",
            Status::Fail,
            "this binary embeds no eBPF object",
            "build with `cargo xtask build`",
        )];
    }
    let t = std::time::Instant::now();
    let mut backend = match EbpfBackend::load(&EbpfOptions {
        ring_bytes: 1 << 20,
        sandbox: true,
        backend: choice,
        ..Default::default()
    }) {
        Ok(b) => b,
        Err(e) => {
            return vec![check(
                "eBPF programs",
                Status::Fail,
                crate::human::error_chain(&e),
                "see the checks above",
            )]
        }
    };
    let helpers = match backend.helpers() {
        KernelHelpers::Full => check(
            "kernel helpers",
            Status::Ok,
            "bpf_loop, bpf_task_pt_regs, bpf_get_current_task_btf",
            "",
        ),
        KernelHelpers::Fallback => check(
            "kernel helpers",
            Status::Warn,
            format!(
                "no bpf_loop (5.17) or bpf_task_pt_regs (5.15): the fallback programs run; \
                 lost: a syscall's bytes past {FALLBACK_STEPS} steps of its copy (a step \
                 copies 16 KiB or fetches one iovec: {} KiB of a plain buffer, less over \
                 several iovecs) are dropped and the call marked truncated",
                FALLBACK_STEPS * 16
            ),
            "use Linux >= 5.17 for captures of any size",
        ),
    };
    let loaded = check(
        "eBPF programs",
        Status::Ok,
        format!(
            "{} capture and {} sandbox programs loaded, verified and attached in {} ms",
            backend.data_programs().len() + CONNECTION_PROGRAMS.len(),
            SANDBOX_PROGRAMS.len(),
            t.elapsed().as_millis()
        ),
        "",
    );
    let data_backend = backend_check(backend.data_backend());
    // Before the capture self-test tracks this process: these are the
    // writes of a process nri-trace does not trace.
    let untraced = untraced_writes_check(&backend);
    let capture = match selftest::capture(&mut backend) {
        Ok(r) if r.exact() => check(
            "capture self-test",
            Status::Ok,
            format!(
                "{} bytes over a socketpair with {} syscalls, captured byte for byte both ways",
                r.sent.len(),
                r.syscalls.len()
            ),
            "",
        ),
        Ok(r) => check(
            "capture self-test",
            Status::Fail,
            r.problem(),
            "report it with this kernel's version (uname -r)",
        ),
        Err(e) => check(
            "capture self-test",
            Status::Fail,
            crate::human::error_chain(&e),
            "run as root",
        ),
    };
    let sandbox = match selftest::sandbox(&mut backend) {
        Ok(r) if r.complete() => check(
            "sandbox probes self-test",
            Status::Ok,
            "a failed rmdir (ENOTDIR), a SIGTERM and the exit it caused, all seen; an rmdir of \
             nothing (ENOENT) counted in the kernel, not sent (--kernel explaining)",
            "",
        ),
        Ok(r) => check(
            "sandbox probes self-test",
            Status::Fail,
            format!(
                "seen: rmdir {:?}, signal {}, exit {:?}; the ENOENT rmdir sent {}, counted {}",
                r.rmdir, r.signal, r.exit, r.absent_sent, r.absent_counted
            ),
            "report it with this kernel's version (uname -r)",
        ),
        Err(e) => check(
            "sandbox probes self-test",
            Status::Fail,
            crate::human::error_chain(&e),
            "run as root",
        ),
    };
    vec![loaded, helpers, data_backend, untraced, capture, sandbox]
}

/// What other processes' writes cost: how many times the data programs
/// ran while this process wrote to a file, a pipe and a TCP socket
/// (fentry: none of these runs one; the tracepoints: every read and write
/// of every process on the node does).
fn untraced_writes_check(backend: &EbpfBackend) -> Check {
    let name = "untraced writes";
    match selftest::untraced_writes(backend, UNTRACED_WRITES) {
        Ok(w) => check(
            name,
            Status::Ok,
            format!(
                "{} one-byte writes each to a file, a pipe and a TCP socket (and {} reads \
                 draining them) ran the data programs {} times (counted for every process on \
                 the node meanwhile, by the kernel's BPF statistics)",
                w.per_target, w.reads, w.runs
            ),
            "",
        ),
        Err(e) => check(
            name,
            Status::Warn,
            crate::human::error_chain(&e),
            "needs Linux >= 5.8 (BPF_ENABLE_STATS) and a loopback interface that is up",
        ),
    }
}

/// Which programs capture the data syscalls (`--backend auto` picks as
/// the live commands do), and why not fentry where it is not used.
fn backend_check(data: Option<&DataBackend>) -> Check {
    let name = "capture backend";
    match data {
        Some(DataBackend::Fentry) => check(
            name,
            Status::Ok,
            "fentry: fexit on unix_stream_sendmsg and unix_stream_recvmsg; a read or write \
             that is not on a unix stream socket runs no BPF (the connection and sandbox \
             programs' syscall tracepoints still take every syscall through the kernel's \
             tracing path: docs/kernels.md)",
            "",
        ),
        Some(DataBackend::Tracepoint { why }) => check(
            name,
            Status::Warn,
            format!(
                "tracepoint: fentry not used: {why}. Every read and write of every process on \
                 the node runs a probe (about 120 ns each: docs/benchmarks.md)"
            ),
            "a kernel that allows fentry (BTF, trampolines; Debian's 6.1 and 6.12 do) makes \
             other processes' reads and writes free",
        ),
        None => check(name, Status::Fail, "no capture programs attached", ""),
    }
}

/// The container runtimes running here and the CRI / NRI sockets `watch`
/// would follow (capture/runtimes.rs).
pub fn runtimes() -> Check {
    let name = "runtimes";
    match runtimes::find_runtimes() {
        Ok(rs) if rs.is_empty() => check(
            name,
            Status::Warn,
            "no containerd or CRI-O process found",
            "start the runtime, or give sockets to `watch` (docs/runtimes.md)",
        ),
        Ok(rs) => {
            let what: Vec<String> = rs
                .iter()
                .map(|r| {
                    format!(
                        "{:?} pid {}: CRI {}, NRI {}",
                        r.kind,
                        r.pid,
                        r.cri_socket
                            .as_ref()
                            .map_or_else(|| "none found".into(), |p| p.display().to_string()),
                        r.nri_socket
                            .as_ref()
                            .map_or_else(|| "none (NRI off?)".into(), |p| p.display().to_string())
                    )
                })
                .collect();
            let complete =
                rs.len() == 1 && rs[0].cri_socket.is_some() && rs[0].nri_socket.is_some();
            check(
                name,
                if complete { Status::Ok } else { Status::Warn },
                what.join("; "),
                if complete {
                    ""
                } else {
                    "`watch` needs one runtime with both sockets, or --cri-socket and --nri-socket (docs/runtimes.md)"
                },
            )
        }
        Err(e) => check(name, Status::Warn, e.to_string(), "run as root"),
    }
}

/// Run every check, in order, loading the capture on `backend`.
pub fn run(backend: BackendChoice) -> Vec<Check> {
    let mut v = vec![privileges(), kernel_version(), btf(), tracefs()];
    let loaded = load(backend); // mounts tracefs if needed
    v.push(tracepoints());
    v.extend(loaded);
    for (label, path) in DEFAULT_SOCKETS {
        v.push(socket(label, path));
    }
    v.push(runtimes());
    v
}
