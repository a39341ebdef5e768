//! Sandbox probes: what makes and unmakes a pod, seen from the kernel.
//!
//! kubelet removes a pod once no container runs, its mounts are gone and
//! its cgroup is removed (pod-stuck-terminating-zh.txt). These programs
//! report the steps of that from the runtime's process tree (`POD_TASKS`:
//! the runtime, its shims, runc and the containers, followed through fork):
//! signals sent to those processes, the exits of signalled or exec'd ones
//! with their code, unmounts, unlinks and rmdirs with their errno, namespace creation
//! and entry, netns bind mounts, and cgroup directory creation and removal.
//!
//! Never a flood: every program first checks a hash map (one lookup for any
//! other process), only rare syscalls are probed (none of the read/write
//! family), signals are limited to `Config::signal_mask` (no SIGCHLD, no
//! Go's SIGURG preemption), exits to signalled or exec'd processes, paths to absolute
//! ones, and at most `Config::sandbox_rate` records per CPU per second go
//! out; the rest are counted (`counter::SANDBOX_SUPPRESSED`).
//!
//! What explains nothing is counted, not sent (`Config::kernel_events`,
//! `--kernel all` sends it): removals failing the way a directory walk
//! probes (ENOENT, EISDIR, ENOTEMPTY but for a cgroup), successful removals
//! of paths not in `WATCHED_PATHS`, cgroup creation
//! (`counter::SANDBOX_FILTERED`). The engine uses a successful removal
//! only to say a failure was redone (engine/teardown/causes.rs) or a
//! namespace's file went (engine/conformance.rs), so those paths are
//! watched: failed ones and netns bind targets.

use core::ffi::c_void;

use aya_ebpf::{
    helpers::{
        bpf_get_current_comm, bpf_get_current_pid_tgid, bpf_ktime_get_ns, bpf_probe_read_kernel,
        generated::{
            bpf_get_current_cgroup_id, bpf_get_current_task, bpf_probe_read_kernel_str,
            bpf_probe_read_user_str, bpf_ringbuf_output,
        },
    },
    macros::{map, tracepoint},
    maps::{HashMap, LruHashMap, PerCpuArray, RingBuf},
    programs::TracePointContext,
    EbpfContext,
};
use nri_trace_common::{
    counter, Config, EntryHeader, EntryKind, SandboxRecord, Syscall, ENTRY_HEADER_LEN,
    KERNEL_EVENTS_ALL, POD_TASK_SLOTS, removal_errno_is_benign, SANDBOX_NO_CODE, SANDBOX_PATH2_CUT, SANDBOX_PATH_CUT,
    SANDBOX_PATH_LEN, SANDBOX_RECORD_LEN, TASK_WATCH_EXIT,
};

use crate::{
    bump, config, group_dead, lost, ret_of, syscall_args, wake_flags, with_fallback, EVENTS,
    SCRATCH,
};

/// The runtime's process tree: tgid -> `TASK_*` bits. Seeded by userspace
/// (runtime, shims, kubelet), grown by `sandbox_newtask`, shrunk by
/// `sandbox_exit`.
#[map]
static POD_TASKS: HashMap<u32, u32> = HashMap::with_max_entries(POD_TASK_SLOTS, 0);

/// Paths whose successful removal is sent (hashes, `path_hash`): ones
/// whose unmount or removal failed, and namespace bind-mount targets. LRU:
/// a node removes far fewer such paths than this holds at once.
#[map]
static WATCHED_PATHS: LruHashMap<u64, u8> = LruHashMap::with_max_entries(4096, 0);

#[repr(C)]
pub struct Rate {
    window_start: u64,
    count: u64,
}

/// Per-CPU one-second window of sandbox records sent.
#[map]
static SANDBOX_RATE: PerCpuArray<Rate> = PerCpuArray::with_max_entries(1, 0);

/// CLONE_NEW* bits (include/uapi/linux/sched.h): NEWNS, NEWCGROUP, NEWUTS,
/// NEWIPC, NEWUSER, NEWPID, NEWNET, NEWTIME.
const CLONE_NEW_MASK: u64 = 0x0002_0000
    | 0x0200_0000
    | 0x0400_0000
    | 0x0800_0000
    | 0x1000_0000
    | 0x2000_0000
    | 0x4000_0000
    | 0x80;
const CLONE_THREAD: u64 = 0x0001_0000;
/// include/uapi/linux/mount.h.
const MS_BIND: u64 = 4096;

#[inline(always)]
fn pod_task(tgid: u32) -> bool {
    unsafe { POD_TASKS.get(&tgid) }.is_some()
}

#[inline(always)]
fn admit(now: u64, cfg: &Config) -> bool {
    let Some(r) = SANDBOX_RATE.get_ptr_mut(0) else {
        return false;
    };
    let r = unsafe { &mut *r };
    if now.wrapping_sub(r.window_start) >= 1_000_000_000 {
        r.window_start = now;
        r.count = 0;
    }
    if r.count >= cfg.sandbox_rate as u64 {
        bump(counter::SANDBOX_SUPPRESSED, 1);
        return false;
    }
    r.count += 1;
    true
}

/// A record under construction in the per-CPU scratch buffer.
struct Draft {
    hdr: *mut EntryHeader,
    rec: *mut SandboxRecord,
    cfg: Config,
}

/// Start a sandbox record (the rate limit applies when it is sent).
#[inline(always)]
fn draft(sc: Syscall, ret: i64) -> Option<Draft> {
    let cfg = config();
    let now = unsafe { bpf_ktime_get_ns() };
    let s = SCRATCH.get_ptr_mut(0)?;
    let s = unsafe { &mut *s };
    let pid_tgid = bpf_get_current_pid_tgid();
    s.hdr = EntryHeader {
        kind: EntryKind::Sandbox as u16,
        syscall: sc as u16,
        flags: 0,
        ts_ns: now,
        tgid: (pid_tgid >> 32) as u32,
        tid: pid_tgid as u32,
        fd: -1,
        aux: 0,
        ret,
        offset: 0,
        len: SANDBOX_RECORD_LEN as u32,
    };
    // The payload area is 8-aligned (after a 48-byte header).
    let rec = s.data.as_mut_ptr() as *mut SandboxRecord;
    unsafe {
        (*rec).cgroup_id = bpf_get_current_cgroup_id();
        (*rec).arg = 0;
        (*rec).target = 0;
        (*rec).aux = 0;
        (*rec).comm = bpf_get_current_comm().unwrap_or([0; 16]);
        (*rec).flags = 0;
        (*rec).pad = 0;
        (*rec).path[0] = 0;
        (*rec).path2[0] = 0;
    }
    Some(Draft {
        hdr: &raw mut s.hdr,
        rec,
        cfg,
    })
}

impl Draft {
    fn rec(&mut self) -> &mut SandboxRecord {
        unsafe { &mut *self.rec }
    }

    /// Copy a NUL-terminated user string into `path` (or `path2`).
    #[inline(always)]
    fn user_path(&mut self, src: u64, second: bool) {
        let rec = self.rec();
        let (dst, cut) = if second {
            (&mut rec.path2, SANDBOX_PATH2_CUT)
        } else {
            (&mut rec.path, SANDBOX_PATH_CUT)
        };
        let n = unsafe {
            bpf_probe_read_user_str(
                dst.as_mut_ptr() as *mut c_void,
                SANDBOX_PATH_LEN as u32,
                src as *const c_void,
            )
        };
        if n <= 0 {
            dst[0] = 0;
            return;
        }
        if n as usize >= SANDBOX_PATH_LEN {
            rec.flags |= cut;
        }
    }

    /// Copy a tracepoint's `__data_loc char[]` field into `path`: `loc`
    /// holds the string's offset in the record in its low 16 bits (its
    /// length in the high 16; include/trace/trace_events.h).
    #[inline(always)]
    fn data_loc_path(&mut self, ctx: &TracePointContext, loc: u32) {
        let rec = self.rec();
        let n = unsafe {
            bpf_probe_read_kernel_str(
                rec.path.as_mut_ptr() as *mut c_void,
                SANDBOX_PATH_LEN as u32,
                ctx.as_ptr().add((loc & 0xffff) as usize) as *const c_void,
            )
        };
        if n as usize >= SANDBOX_PATH_LEN {
            rec.flags |= SANDBOX_PATH_CUT;
        }
    }

    /// FNV-1a of `path` up to its NUL, and whether it names a cgroup
    /// ("cgroup" in it, as userspace's `SandboxOp::failure` asks).
    #[inline(always)]
    fn path_hash(&mut self) -> (u64, bool) {
        const CGROUP: u64 = u64::from_be_bytes(*b"\0\0cgroup");
        let path = &self.rec().path;
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        let mut window: u64 = 0;
        let mut cgroup = false;
        for &b in path.iter() {
            if b == 0 {
                break;
            }
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
            window = (window << 8 | u64::from(b)) & 0xffff_ffff_ffff;
            cgroup |= window == CGROUP;
        }
        (h, cgroup)
    }

    /// Send the record, unless over the rate limit (then counted).
    #[inline(always)]
    fn send(self) {
        let size = ENTRY_HEADER_LEN + SANDBOX_RECORD_LEN;
        let ts = unsafe { (*self.hdr).ts_ns };
        if !admit(ts, &self.cfg) {
            return;
        }
        let r = unsafe {
            bpf_ringbuf_output(
                &EVENTS as *const RingBuf as *mut c_void,
                self.hdr as *mut c_void,
                size as u64,
                wake_flags(ts, self.cfg.wakeup_bytes),
            )
        };
        if r != 0 {
            lost(0);
        }
    }
}

/// task/task_newtask (runs in the parent): follow new processes of the
/// tree, and report the ones made in new namespaces (runc's clone3 of the
/// container init, containerd's pinned netns thread).
#[tracepoint]
pub fn sandbox_newtask(ctx: TracePointContext) -> u32 {
    let tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
    if !pod_task(tgid) {
        return 0;
    }
    // Format (events/task/task_newtask/format): pid at 8, clone_flags at 32.
    let flags: u64 = unsafe { ctx.read_at(32) }.unwrap_or(CLONE_THREAD);
    let child: u32 = unsafe { ctx.read_at::<i32>(8) }.unwrap_or(0) as u32;
    if flags & CLONE_THREAD == 0 && POD_TASKS.insert(&child, &0, 0).is_err() {
        bump(counter::POD_MAP_FULL, 1);
    }
    if flags & CLONE_NEW_MASK != 0 {
        if let Some(mut d) = draft(Syscall::CloneNs, child as i64) {
            d.rec().arg = flags;
            d.rec().target = child;
            d.send();
        }
    }
    0
}

/// sched/sched_process_exit: forget the process; report the exit of a
/// watched one (signalled, see `sandbox_signal`) with its exit code.
#[tracepoint]
pub fn sandbox_exit(ctx: TracePointContext) -> u32 {
    let tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
    let Some(bits) = (unsafe { POD_TASKS.get(&tgid) }).copied() else {
        return 0;
    };
    // Only the last thread's exit is the process's.
    if !group_dead(&ctx, &config(), bpf_get_current_pid_tgid()) {
        return 0;
    }
    let _ = POD_TASKS.remove(&tgid);
    if bits & TASK_WATCH_EXIT == 0 {
        return 0;
    }
    let Some(mut d) = draft(Syscall::Exit, 0) else {
        return 0;
    };
    d.rec().target = tgid;
    // task->exit_code is set before this tracepoint (kernel/exit.c
    // do_exit); its offset comes from the kernel's BTF.
    let off = d.cfg.exit_code_off;
    let code = if off == 0 {
        None
    } else {
        let task = unsafe { bpf_get_current_task() };
        unsafe { bpf_probe_read_kernel((task + off as u64) as *const i32) }.ok()
    };
    match code {
        Some(c) => d.rec().arg = c as u32 as u64,
        None => d.rec().flags |= SANDBOX_NO_CODE,
    }
    d.send();
    0
}

/// signal/signal_generate: kill, tgkill, pidfd_send_signal and signals the
/// kernel sends (a dying pid namespace's SIGKILLs) to the tree's processes.
#[tracepoint]
pub fn sandbox_signal(ctx: TracePointContext) -> u32 {
    // Format (events/signal/signal_generate/format): sig 8, code 16,
    // pid 36, result 44.
    let sig: i32 = unsafe { ctx.read_at(8) }.unwrap_or(0);
    if !(1..64).contains(&sig) {
        return 0;
    }
    let cfg = config();
    if cfg.signal_mask & (1u64 << sig) == 0 {
        return 0;
    }
    let pid: u32 = unsafe { ctx.read_at::<i32>(36) }.unwrap_or(0) as u32;
    let Some(bits) = POD_TASKS.get_ptr_mut(&pid) else {
        return 0;
    };
    let result: i32 = unsafe { ctx.read_at(44) }.unwrap_or(-1);
    // Delivered (TRACE_SIGNAL_DELIVERED = 0) and not SIGSTOP: watch for
    // the exit it should cause.
    if result == 0 && sig != 19 {
        unsafe { *bits |= TASK_WATCH_EXIT };
    }
    if let Some(mut d) = draft(Syscall::Signal, result as i64) {
        d.rec().arg = sig as u64;
        d.rec().target = pid;
        d.rec().aux = unsafe { ctx.read_at(16) }.unwrap_or(0);
        d.send();
    }
    0
}

/// A path syscall of the tree: report it when its path is absolute.
/// Relative paths (Go's os.RemoveAll walking a directory with unlinkat on
/// a dirfd, workloads' own files) are not what names a pod's blocker.
#[inline(always)]
fn path_syscall<const COMPAT: bool>(ctx: &TracePointContext, sc: Syscall, path_arg: usize) -> u32 {
    let tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
    if !pod_task(tgid) {
        return 0;
    }
    let Some(args) = syscall_args::<COMPAT>() else { return 0 };
    let ptr = args[path_arg & 3];
    let Ok(first) = (unsafe { aya_ebpf::helpers::bpf_probe_read_user(ptr as *const u8) }) else {
        return 0;
    };
    if first != b'/' {
        return 0;
    }
    let ret = ret_of(ctx);
    let Some(mut d) = draft(sc, ret) else {
        return 0;
    };
    d.user_path(ptr, false);
    if !worth_sending(&mut d, sc, ret) {
        bump(counter::SANDBOX_FILTERED, 1);
        return 0;
    }
    match sc {
        Syscall::Umount2 => d.rec().arg = args[1],
        Syscall::Unlinkat => {
            d.rec().aux = args[0] as i32;
            d.rec().arg = args[2];
        }
        _ => {}
    }
    d.send();
    0
}

/// Whether a path syscall's record explains something (see the module's
/// doc); with `KERNEL_EVENTS_ALL` every one does. Watches the path of a
/// failure that can hold a pod, so that its later success is sent.
#[inline(always)]
fn worth_sending(d: &mut Draft, sc: Syscall, ret: i64) -> bool {
    if d.cfg.kernel_events == KERNEL_EVENTS_ALL {
        return true;
    }
    // Unmounts are few (kubelet's volumes, the runtime's rootfs and
    // netns): all of them go.
    let umount = sc == Syscall::Umount2;
    let (hash, cgroup) = d.path_hash();
    if ret == 0 {
        if umount {
            return true;
        }
        // A removal: sent when its path was watched, and watched no more.
        return WATCHED_PATHS.remove(&hash).is_ok();
    }
    let benign = removal_errno_is_benign(umount, (-ret) as i32, cgroup);
    if !benign {
        let _ = WATCHED_PATHS.insert(&hash, &1, 0);
    }
    umount || !benign
}

with_fallback!(exit_umount2, exit_umount2_compat, |ctx| path_syscall(Syscall::Umount2, 0));
with_fallback!(exit_unlinkat, exit_unlinkat_compat, |ctx| path_syscall(Syscall::Unlinkat, 1));
with_fallback!(exit_unlink, exit_unlink_compat, |ctx| path_syscall(Syscall::Unlink, 0));
with_fallback!(exit_rmdir, exit_rmdir_compat, |ctx| path_syscall(Syscall::Rmdir, 0));

with_fallback!(
    /// mount(2): see `mount_exit`.
    exit_mount, exit_mount_compat, |ctx| mount_exit()
);

/// mount(2) bind mounts of a /proc/.../ns/ file: how a runtime pins a
/// namespace to a file (containerd's netns under /var/run/netns, CRI-O's
/// pinns). runc's own /proc binds (masked paths, its cloned binary) are
/// not namespaces and are left out.
#[inline(always)]
fn mount_exit<const COMPAT: bool>(ctx: &TracePointContext) -> u32 {
    let tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
    if !pod_task(tgid) {
        return 0;
    }
    let Some(args) = syscall_args::<COMPAT>() else { return 0 };
    if args[3] & MS_BIND == 0 {
        return 0;
    }
    // "/proc/<pid>/task/<tid>/ns/net" fits in 48 bytes.
    let Ok(head) = (unsafe { aya_ebpf::helpers::bpf_probe_read_user(args[0] as *const [u8; 48]) })
    else {
        return 0;
    };
    if &head[..6] != b"/proc/" {
        return 0;
    }
    let mut ns = false;
    for i in 6..44 {
        if head[i] == b'/' && head[i + 1] == b'n' && head[i + 2] == b's' && head[i + 3] == b'/' {
            ns = true;
            break;
        }
        if head[i] == 0 {
            break;
        }
    }
    if !ns {
        return 0;
    }
    let Some(mut d) = draft(Syscall::Mount, ret_of(ctx)) else {
        return 0;
    };
    d.rec().arg = args[3];
    d.user_path(args[1], false);
    d.user_path(args[0], true);
    // The namespace's file: its removal is sent (engine/conformance.rs,
    // the netns clause).
    if ret_of(ctx) == 0 {
        let (hash, _) = d.path_hash();
        let _ = WATCHED_PATHS.insert(&hash, &1, 0);
    }
    d.send();
    0
}

/// unshare(2) with CLONE_NEW* flags, and setns(2): namespace creation and
/// entry by the tree (runc, containerd's netns pinning, `exec` into a
/// container).
#[inline(always)]
fn ns_syscall<const COMPAT: bool>(ctx: &TracePointContext, sc: Syscall) -> u32 {
    let tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
    if !pod_task(tgid) {
        return 0;
    }
    let Some(args) = syscall_args::<COMPAT>() else { return 0 };
    let (arg, aux) = match sc {
        Syscall::Unshare => (args[0], 0),
        _ => (args[1], args[0] as i32),
    };
    if sc == Syscall::Unshare && arg & CLONE_NEW_MASK == 0 {
        return 0;
    }
    if let Some(mut d) = draft(sc, ret_of(ctx)) {
        d.rec().arg = arg;
        d.rec().aux = aux;
        d.send();
    }
    0
}

with_fallback!(exit_unshare, exit_unshare_compat, |ctx| ns_syscall(Syscall::Unshare));
with_fallback!(exit_setns, exit_setns_compat, |ctx| ns_syscall(Syscall::Setns));

/// cgroup/cgroup_mkdir and cgroup_rmdir (successful ones only: a failed
/// rmdir shows as the rmdir syscall's errno). Rare on a node (services,
/// sessions, pods), so every one is reported within the rate limit: with
/// the systemd cgroup driver, systemd (not the runtime's tree) makes them.
#[inline(always)]
fn cgroup_event(ctx: &TracePointContext, sc: Syscall) -> u32 {
    let Some(mut d) = draft(sc, 0) else { return 0 };
    // Format (events/cgroup/cgroup_mkdir/format): root 8, level 12, id 16,
    // __data_loc path 24 (offset in the low 16 bits, length in the high).
    let root: i32 = unsafe { ctx.read_at(8) }.unwrap_or(0);
    let level: i32 = unsafe { ctx.read_at(12) }.unwrap_or(0);
    let id: u64 = unsafe { ctx.read_at(16) }.unwrap_or(0);
    let loc: u32 = unsafe { ctx.read_at(24) }.unwrap_or(0);
    d.rec().arg = id;
    d.rec().target = level as u32;
    d.rec().aux = root;
    d.data_loc_path(ctx, loc);
    d.send();
    0
}

/// Not used by explain or the rules (a pod's cgroup appearing is not
/// what holds it): counted, unless `--kernel all`.
#[tracepoint]
pub fn sandbox_cgroup_mkdir(ctx: TracePointContext) -> u32 {
    if config().kernel_events != KERNEL_EVENTS_ALL {
        bump(counter::SANDBOX_FILTERED, 1);
        return 0;
    }
    cgroup_event(&ctx, Syscall::CgroupMkdir)
}

#[tracepoint]
pub fn sandbox_cgroup_rmdir(ctx: TracePointContext) -> u32 {
    cgroup_event(&ctx, Syscall::CgroupRmdir)
}

/// sched/sched_process_exec of a process of the tree: a container's
/// process (the pod's pause process first) starts running its image's
/// program. When it comes before or after the runtime tells the plugins
/// RunPodSandbox is the contract draft's "the sandbox is running" (nri
/// PR 286; docs/contract.md). `comm` is already the new program's.
#[tracepoint]
pub fn sandbox_exec(ctx: TracePointContext) -> u32 {
    let tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
    let Some(bits) = POD_TASKS.get_ptr_mut(&tgid) else {
        return 0;
    };
    // Its exit is reported too (`sandbox_exit`), signalled or not: a
    // container's program ending on its own is what makes the runtime
    // send the plugins StopContainer with no CRI call (engine/correlate.rs,
    // `container_exited`).
    unsafe { *bits |= TASK_WATCH_EXIT };
    let Some(mut d) = draft(Syscall::Exec, 0) else {
        return 0;
    };
    // Format (events/sched/sched_process_exec/format): __data_loc filename
    // 8 (offset in the low 16 bits, length in the high), pid 12, old_pid 16.
    let loc: u32 = unsafe { ctx.read_at(8) }.unwrap_or(0);
    let pid: i32 = unsafe { ctx.read_at(12) }.unwrap_or(0);
    let old_pid: i32 = unsafe { ctx.read_at(16) }.unwrap_or(0);
    d.rec().target = pid as u32;
    d.rec().aux = old_pid;
    d.data_loc_path(&ctx, loc);
    d.send();
    0
}
