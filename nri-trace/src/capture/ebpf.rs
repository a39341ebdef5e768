//! The eBPF capture backend: loads the embedded object, attaches the
//! exit-only syscall tracepoints, and manages the tracking maps.

use std::{
    os::fd::{AsRawFd, RawFd},
    path::Path,
};

use aya::{
    maps::{Array, HashMap, MapData, PerCpuArray, PerCpuValues, ProgramArray, RingBuf},
    programs::{FExit, RawTracePoint, TracePoint},
    Btf, Ebpf, EbpfLoader,
};
use nri_trace_common::{
    counter, fd_table_index, Config, FdKey, FdState, SunPath, DEFAULT_RING_BYTES, DEFAULT_SNAP,
    FD_TABLE_FDS, KERNEL_EVENTS_ALL, KERNEL_EVENTS_EXPLAINING, MAX_SNAP, SUN_PATH_LEN,
};

use super::{
    backend::{BackendError, CaptureBackend},
    tgid_filter::{slot_of, TgidFilter},
    Loss,
};

/// The eBPF object built by `cargo xtask build`, embedded at compile time.
/// Aligned: the ELF parser reads it in place.
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/nri-trace-ebpf.o"));

/// (program, tracepoint category, tracepoint) of the tracepoint backend's
/// data programs: the read and write families, whose exits run for every
/// process's reads and writes. The fentry backend's `FENTRY_PROGRAMS`
/// capture the same bytes in their place.
pub(crate) const DATA_PROGRAMS: &[(&str, &str, &str)] = &[
    ("exit_read", "syscalls", "sys_exit_read"),
    ("exit_readv", "syscalls", "sys_exit_readv"),
    ("exit_recvfrom", "syscalls", "sys_exit_recvfrom"),
    ("exit_recvmsg", "syscalls", "sys_exit_recvmsg"),
    ("exit_write", "syscalls", "sys_exit_write"),
    ("exit_writev", "syscalls", "sys_exit_writev"),
    ("exit_sendto", "syscalls", "sys_exit_sendto"),
    ("exit_sendmsg", "syscalls", "sys_exit_sendmsg"),
];

/// (program, kernel function) of the fentry backend: fexit on the unix
/// stream socket's send and receive (nri-trace-ebpf/src/socket_fexit.rs).
pub(crate) const FENTRY_PROGRAMS: &[(&str, &str)] = &[
    ("fexit_sendmsg", "unix_stream_sendmsg"),
    ("fexit_recvmsg", "unix_stream_recvmsg"),
];

/// (program, tracepoint category, tracepoint) of the rest of the capture,
/// on either backend: the syscalls that start and stop tracking fds, and
/// the processes' fork and exit.
pub(crate) const CONNECTION_PROGRAMS: &[(&str, &str, &str)] = &[
    ("enter_close", "syscalls", "sys_enter_close"),
    ("exit_accept", "syscalls", "sys_exit_accept"),
    ("exit_accept4", "syscalls", "sys_exit_accept4"),
    ("exit_connect", "syscalls", "sys_exit_connect"),
    ("exit_bind", "syscalls", "sys_exit_bind"),
    ("exit_socketpair", "syscalls", "sys_exit_socketpair"),
    ("exit_dup", "syscalls", "sys_exit_dup"),
    ("exit_dup2", "syscalls", "sys_exit_dup2"),
    ("exit_dup3", "syscalls", "sys_exit_dup3"),
    ("exit_fcntl", "syscalls", "sys_exit_fcntl"),
    ("task_newtask", "task", "task_newtask"),
    ("sched_exit", "sched", "sched_process_exit"),
];

/// (program, tracepoint category, tracepoint) of the sandbox probes
/// (nri-trace-ebpf/src/sandbox.rs), attached with `EbpfOptions::sandbox`.
pub(crate) const SANDBOX_PROGRAMS: &[(&str, &str, &str)] = &[
    ("sandbox_newtask", "task", "task_newtask"),
    ("sandbox_exit", "sched", "sched_process_exit"),
    ("sandbox_signal", "signal", "signal_generate"),
    ("exit_umount2", "syscalls", "sys_exit_umount"),
    ("exit_unlinkat", "syscalls", "sys_exit_unlinkat"),
    ("exit_unlink", "syscalls", "sys_exit_unlink"),
    ("exit_rmdir", "syscalls", "sys_exit_rmdir"),
    ("exit_mount", "syscalls", "sys_exit_mount"),
    ("exit_unshare", "syscalls", "sys_exit_unshare"),
    ("exit_setns", "syscalls", "sys_exit_setns"),
    ("sandbox_cgroup_mkdir", "cgroup", "cgroup_mkdir"),
    ("sandbox_cgroup_rmdir", "cgroup", "cgroup_rmdir"),
    ("sandbox_exec", "sched", "sched_process_exec"),
];

/// The programs that read syscall arguments (bpf_task_pt_regs) or copy in
/// a loop (bpf_loop), and so have a fallback twin, `<name>_compat`, in the
/// object for kernels without those helpers (nri-trace-ebpf/src/main.rs,
/// "fallback programs").
pub(crate) const FALLBACK_PROGRAMS: &[&str] = &[
    "exit_read",
    "exit_readv",
    "exit_recvfrom",
    "exit_recvmsg",
    "exit_write",
    "exit_writev",
    "exit_sendto",
    "exit_sendmsg",
    "exit_accept",
    "exit_accept4",
    "exit_connect",
    "exit_bind",
    "exit_socketpair",
    "exit_dup",
    "exit_dup2",
    "exit_dup3",
    "exit_fcntl",
    "exit_umount2",
    "exit_unlinkat",
    "exit_unlink",
    "exit_rmdir",
    "exit_mount",
    "exit_unshare",
    "exit_setns",
];

/// Chunks or iovecs one syscall's capture may take with the fallback
/// programs (their `copy_tail`, nri-trace-common `COMPAT_STEPS`).
pub(crate) const FALLBACK_STEPS: u32 = nri_trace_common::COMPAT_STEPS;

/// Which helpers the running kernel gave the programs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelHelpers {
    /// bpf_loop (5.17), bpf_task_pt_regs (5.15) and
    /// bpf_get_current_task_btf (5.11): the programs as designed.
    Full,
    /// One of them is missing: the fallback programs run (`task->stack`
    /// read with bpf_probe_read_kernel for the registers, a bounded loop
    /// of `FALLBACK_STEPS` for the copy).
    Fallback,
}

impl KernelHelpers {
    /// The program to load for `name`: its fallback twin when the kernel
    /// lacks the helpers it calls.
    fn program_name(self, name: &str) -> String {
        if self == Self::Fallback && FALLBACK_PROGRAMS.contains(&name) {
            format!("{name}_compat")
        } else {
            name.to_owned()
        }
    }
}

/// Which programs capture the data syscalls' bytes (`--backend`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum BackendChoice {
    /// fentry where the kernel allows it, else tracepoints.
    #[default]
    Auto,
    /// fexit on the unix stream socket functions; an error where refused.
    Fentry,
    /// The syscall exit tracepoints.
    Tracepoint,
}

/// The backend a capture runs on, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DataBackend {
    /// fexit on unix_stream_sendmsg and unix_stream_recvmsg: no BPF runs
    /// for a write to a file, a pipe or a TCP socket.
    Fentry,
    /// The syscall exit tracepoints (every read and write of every process
    /// runs one); `why`: why not fentry.
    Tracepoint { why: String },
}

impl DataBackend {
    /// `fentry` or `tracepoint`, as `--backend` names it.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Fentry => "fentry",
            Self::Tracepoint { .. } => "tracepoint",
        }
    }
}

/// Which programs to attach. Only `Capture` captures anything; the others
/// exist to measure design floors in benchmarks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ProgramSet {
    /// The real capture programs.
    Capture,
    /// An empty program on every tracepoint the capture uses (its floor).
    FloorClassic,
    /// An empty raw tracepoint on sys_exit: the raw design's floor.
    FloorRaw,
    /// A raw sys_exit program with the same tgid filter as the capture.
    FloorRawFiltered,
}

#[derive(Clone, Debug)]
pub struct EbpfOptions {
    /// Ring buffer bytes (power of two, >= page size).
    pub ring_bytes: u32,
    /// Bytes captured per syscall at most.
    pub snap_len: u32,
    /// Wake the reader once this many bytes wait; 0 wakes it per record.
    pub wakeup_bytes: u32,
    pub programs: ProgramSet,
    /// Also attach the sandbox probes (`SANDBOX_PROGRAMS`); with
    /// `FloorClassic`, an empty program on their tracepoints too.
    pub sandbox: bool,
    /// The sandbox probes send every event they see, not only the ones
    /// that explain something (`Config::kernel_events`; `--kernel all`).
    pub all_kernel_events: bool,
    /// Which programs capture the data syscalls (`--backend`).
    pub backend: BackendChoice,
}

impl Default for EbpfOptions {
    fn default() -> Self {
        Self {
            ring_bytes: DEFAULT_RING_BYTES,
            snap_len: DEFAULT_SNAP,
            wakeup_bytes: DEFAULT_RING_BYTES / 4,
            programs: ProgramSet::Capture,
            sandbox: false,
            all_kernel_events: false,
            backend: BackendChoice::Auto,
        }
    }
}

pub struct EbpfBackend {
    ring: RingBuf<MapData>,
    fds: HashMap<MapData, FdKey, FdState>,
    fd_table: Array<MapData, FdState>,
    tgids: HashMap<MapData, u32, u32>,
    filter: Array<MapData, u32>,
    connect_paths: HashMap<MapData, SunPath, u32>,
    listen_paths: HashMap<MapData, SunPath, u32>,
    counters: PerCpuArray<MapData, u64>,
    /// The runtime's process tree, for the sandbox probes.
    pod_tasks: HashMap<MapData, u32, u32>,
    /// Non-zero while the reader sleeps until a record wakes it (the
    /// programs then force the ring's wakeup: nri-trace-ebpf emit.rs).
    reader_asleep: Array<MapData, u32>,
    /// Userspace copy of the filter: tracked tgids, their slots and rows.
    view: TgidFilter,
    helpers: KernelHelpers,
    /// Which programs capture the data syscalls (`None`: not `Capture`).
    data_backend: Option<DataBackend>,
    // Keeps programs and links alive; dropped last.
    ebpf: Ebpf,
}

fn map_err(map: &'static str) -> impl Fn(aya::maps::MapError) -> BackendError {
    move |source| BackendError::Map {
        map,
        source: Box::new(source),
    }
}

/// Mount tracefs at /sys/kernel/tracing if it is not there: aya finds
/// tracepoint ids under it. Fresh Debian VMs boot without it mounted.
pub(crate) fn ensure_tracefs() -> std::io::Result<bool> {
    let events = Path::new("/sys/kernel/tracing/events");
    if events.exists() || Path::new("/sys/kernel/debug/tracing/events").exists() {
        return Ok(false);
    }
    let r = unsafe {
        libc::mount(
            c"tracefs".as_ptr(),
            c"/sys/kernel/tracing".as_ptr(),
            c"tracefs".as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(true)
}

impl EbpfBackend {
    /// The embedded eBPF object (empty when built without `cargo xtask build`).
    pub fn object() -> &'static [u8] {
        OBJECT
    }

    /// Counter `i` (`counter::*`) summed over all CPUs.
    fn counter(&self, i: u32) -> Result<u64, BackendError> {
        Ok(self
            .counters
            .get(&i, 0)
            .map_err(map_err("COUNTERS"))?
            .iter()
            .sum())
    }

    pub fn load(opts: &EbpfOptions) -> Result<Self, BackendError> {
        if OBJECT.is_empty() {
            return Err(BackendError::NoObject);
        }
        match ensure_tracefs() {
            Ok(true) => log::info!("mounted tracefs at /sys/kernel/tracing"),
            Ok(false) => {}
            Err(e) => log::warn!("tracefs is not mounted and mounting it failed: {e}"),
        }
        // Kernels before 5.11 charge BPF memory to RLIMIT_MEMLOCK.
        let rl = libc::rlimit {
            rlim_cur: libc::RLIM_INFINITY,
            rlim_max: libc::RLIM_INFINITY,
        };
        unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &raw const rl) };

        let ring = opts.ring_bytes.max(4096).next_power_of_two();
        let mut ebpf = EbpfLoader::new()
            .map_max_entries("EVENTS", ring)
            .load(OBJECT)
            .map_err(|source| BackendError::Object {
                summary: short_error(&source),
                source: Box::new(source),
            })?;
        let helpers = probe_helpers(&mut ebpf);
        let pick = |name: &str| helpers.program_name(name);
        if helpers == KernelHelpers::Fallback {
            install_copy_tail(&mut ebpf)?;
        }
        let take = |ebpf: &mut Ebpf, name: &'static str| {
            ebpf.take_map(name)
                .ok_or(BackendError::MapMissing { map: name })
        };
        // The configuration before any program runs: an Array's entry
        // reads as zeros until set (a 0 `sandbox_rate` suppresses every
        // sandbox record; found by sandbox_probes.rs, two sessions at once).
        let mut config: Array<MapData, Config> =
            Array::try_from(take(&mut ebpf, "CONFIG")?).map_err(map_err("CONFIG"))?;
        let kernel = KernelOffsets::read();
        config
            .set(
                0,
                Config {
                    snap_len: opts.snap_len.clamp(1, MAX_SNAP),
                    wakeup_bytes: opts.wakeup_bytes,
                    exit_code_off: if opts.sandbox { kernel.exit_code } else { 0 },
                    sandbox_rate: Config::DEFAULT_SANDBOX_RATE,
                    signal_mask: Config::DEFAULT_SIGNAL_MASK,
                    task_stack_off: if helpers == KernelHelpers::Fallback {
                        kernel.stack
                    } else {
                        0
                    },
                    exit_group_dead_off: kernel.exit_group_dead,
                    task_signal_off: kernel.signal,
                    signal_live_off: kernel.live,
                    kernel_events: if opts.all_kernel_events {
                        KERNEL_EVENTS_ALL
                    } else {
                        KERNEL_EVENTS_EXPLAINING
                    },
                    pad: 0,
                },
                0,
            )
            .map_err(map_err("CONFIG"))?;
        let mut data_backend = None;
        match opts.programs {
            ProgramSet::Capture => {
                data_backend = Some(attach_data(&mut ebpf, opts.backend, helpers)?);
                for (name, cat, tp) in CONNECTION_PROGRAMS {
                    attach_tp(&mut ebpf, &pick(name), &[(cat, tp)])?;
                }
                if opts.sandbox {
                    for (name, cat, tp) in SANDBOX_PROGRAMS {
                        attach_tp(&mut ebpf, &pick(name), &[(cat, tp)])?;
                    }
                }
            }
            ProgramSet::FloorClassic => {
                let sandbox = if opts.sandbox { SANDBOX_PROGRAMS } else { &[] };
                let mut tps: Vec<(&str, &str)> = DATA_PROGRAMS
                    .iter()
                    .chain(CONNECTION_PROGRAMS)
                    .chain(sandbox)
                    .map(|(_, c, t)| (*c, *t))
                    .collect();
                // task_newtask and sched_process_exit carry a program of
                // each set; a program attaches once per tracepoint, so the
                // floor has one there (neither is in the measured loops).
                tps.sort_unstable();
                tps.dedup();
                // The exec probe's floor has a program of its own, so that
                // its BPF statistics count execs only (xtask's exec_cost.rs).
                let exec = ("sched", "sched_process_exec");
                if tps.contains(&exec) {
                    tps.retain(|t| *t != exec);
                    attach_tp(&mut ebpf, "floor_exec", &[exec])?;
                }
                attach_tp(&mut ebpf, "floor_empty", &tps)?;
            }
            ProgramSet::FloorRaw => attach_raw(&mut ebpf, "floor_raw_empty")?,
            ProgramSet::FloorRawFiltered => attach_raw(&mut ebpf, "floor_raw_filtered")?,
        }
        Ok(Self {
            ring: RingBuf::try_from(take(&mut ebpf, "EVENTS")?).map_err(map_err("EVENTS"))?,
            fds: HashMap::try_from(take(&mut ebpf, "FDS")?).map_err(map_err("FDS"))?,
            fd_table: Array::try_from(take(&mut ebpf, "FD_TABLE")?).map_err(map_err("FD_TABLE"))?,
            tgids: HashMap::try_from(take(&mut ebpf, "TRACKED_TGIDS")?)
                .map_err(map_err("TRACKED_TGIDS"))?,
            filter: Array::try_from(take(&mut ebpf, "TGID_FILTER")?)
                .map_err(map_err("TGID_FILTER"))?,
            connect_paths: HashMap::try_from(take(&mut ebpf, "CONNECT_PATHS")?)
                .map_err(map_err("CONNECT_PATHS"))?,
            listen_paths: HashMap::try_from(take(&mut ebpf, "LISTEN_PATHS")?)
                .map_err(map_err("LISTEN_PATHS"))?,
            counters: PerCpuArray::try_from(take(&mut ebpf, "COUNTERS")?)
                .map_err(map_err("COUNTERS"))?,
            pod_tasks: HashMap::try_from(take(&mut ebpf, "POD_TASKS")?)
                .map_err(map_err("POD_TASKS"))?,
            reader_asleep: Array::try_from(take(&mut ebpf, "READER_ASLEEP")?)
                .map_err(map_err("READER_ASLEEP"))?,
            view: TgidFilter::default(),
            helpers,
            data_backend,
            ebpf,
        })
    }

    /// Which helpers the kernel gave the programs (the fallback programs
    /// run without them).
    pub fn helpers(&self) -> KernelHelpers {
        self.helpers
    }

    /// Which programs capture the data syscalls, and why (None for the
    /// benchmarks' floor program sets).
    pub fn data_backend(&self) -> Option<&DataBackend> {
        self.data_backend.as_ref()
    }

    /// The names of the programs that capture the data syscalls, as
    /// loaded (none for the floor program sets).
    pub fn data_programs(&self) -> Vec<String> {
        match &self.data_backend {
            Some(DataBackend::Fentry) => FENTRY_PROGRAMS
                .iter()
                .map(|(name, _)| (*name).to_owned())
                .collect(),
            Some(DataBackend::Tracepoint { .. }) => DATA_PROGRAMS
                .iter()
                .map(|(name, ..)| self.helpers.program_name(name))
                .collect(),
            None => Vec::new(),
        }
    }

    /// How many times the attached data programs have run, by the
    /// kernel's BPF statistics: counted only while they are enabled
    /// (`aya::sys::enable_stats`), by any process that ran them.
    pub fn data_program_runs(&self) -> Result<u64, BackendError> {
        let mut runs = 0;
        for name in &self.data_programs() {
            let info = self
                .ebpf
                .program(name)
                .ok_or_else(|| BackendError::Program {
                    program: name.clone(),
                    problem: "is missing from the object",
                })?
                .info()
                .map_err(|source| BackendError::ProgramInfo {
                    program: name.clone(),
                    source: Box::new(source),
                })?;
            runs += info.run_count();
        }
        Ok(runs)
    }

    fn write_slot(&mut self, slot: u32) -> Result<(), BackendError> {
        let v = self.view.slot_value(slot);
        self.filter.set(slot, v, 0).map_err(map_err("TGID_FILTER"))
    }
}

/// Insert `key` only if it is absent (BPF_NOEXIST); whether it was.
fn insert_new<K: aya::Pod, V: aya::Pod>(
    map: &mut HashMap<MapData, K, V>,
    key: K,
    value: V,
) -> Result<bool, aya::maps::MapError> {
    const BPF_NOEXIST: u64 = 1; // include/uapi/linux/bpf.h
    match map.insert(key, value, BPF_NOEXIST) {
        Ok(()) => Ok(true),
        Err(aya::maps::MapError::SyscallError(e))
            if e.io_error.raw_os_error() == Some(libc::EEXIST) =>
        {
            Ok(false)
        }
        Err(e) => Err(e),
    }
}

/// `path` as the kernel programs compare it: sun_path's bytes, NUL-padded.
fn sun_path(path: &Path) -> Result<SunPath, BackendError> {
    let bytes = path.as_os_str().as_encoded_bytes();
    if bytes.len() >= SUN_PATH_LEN {
        return Err(BackendError::PathTooLong(path.display().to_string()));
    }
    let mut key = SunPath {
        bytes: [0; SUN_PATH_LEN],
    };
    key.bytes[..bytes.len()].copy_from_slice(bytes);
    Ok(key)
}

/// What the programs need to know of the running kernel's layout; 0 for
/// what could not be read (`Config` says what each one costs then).
struct KernelOffsets {
    /// `task_struct.exit_code`, `.stack`, `.signal`; `signal_struct.live`.
    exit_code: u32,
    stack: u32,
    signal: u32,
    live: u32,
    /// `group_dead` in the sched_process_exit record (tracefs format).
    exit_group_dead: u32,
}

impl KernelOffsets {
    /// From the kernel's BTF (read and parsed once: 5 MB) and tracefs.
    fn read() -> Self {
        let btf =
            super::btf::read_btf_file(Path::new(super::btf::KERNEL_BTF_PATH)).and_then(|blob| {
                let index = super::btf::BtfIndex::parse(&blob)?;
                let off = |s: &str, m: &str| match index.member_offset(s, m) {
                    Ok(o) => o,
                    Err(e) => {
                        log::warn!("{e}");
                        0
                    }
                };
                Ok([
                    off("task_struct", "exit_code"),
                    off("task_struct", "stack"),
                    off("task_struct", "signal"),
                    off("signal_struct", "live"),
                ])
            });
        let [exit_code, stack, signal, live] = btf.unwrap_or_else(|e| {
            log::warn!("{e}");
            [0; 4]
        });
        Self {
            exit_code,
            stack,
            // Both or neither.
            signal: if live == 0 { 0 } else { signal },
            live,
            exit_group_dead: tracepoint_field_offset("sched", "sched_process_exit", "group_dead")
                .unwrap_or(0),
        }
    }
}

/// The offset of `field` in tracepoint `cat/tp`'s record, from its tracefs
/// format file (`field:bool group_dead;\toffset:32;\tsize:1;...`).
fn tracepoint_field_offset(cat: &str, tp: &str, field: &str) -> Option<u32> {
    let format = [
        "/sys/kernel/tracing/events",
        "/sys/kernel/debug/tracing/events",
    ]
    .iter()
    .find_map(|base| {
        std::fs::read_to_string(Path::new(base).join(cat).join(tp).join("format")).ok()
    })?;
    parse_field_offset(&format, field)
}

fn parse_field_offset(format: &str, field: &str) -> Option<u32> {
    format.lines().find_map(|line| {
        let mut parts = line.trim().split(';');
        let decl = parts.next()?.strip_prefix("field:")?;
        if decl.rsplit(' ').next()? != field {
            return None;
        }
        parts.find_map(|p| p.trim().strip_prefix("offset:")?.parse().ok())
    })
}

/// Attach the programs that capture the data syscalls: the fentry
/// backend's where `choice` and the kernel allow it, else the tracepoint
/// backend's (their fallback twins where the helpers lack).
fn attach_data(
    ebpf: &mut Ebpf,
    choice: BackendChoice,
    helpers: KernelHelpers,
) -> Result<DataBackend, BackendError> {
    let why = match (choice, helpers) {
        (BackendChoice::Tracepoint, _) => "--backend tracepoint".to_owned(),
        (_, KernelHelpers::Fallback) => {
            let reason = "the fentry programs need bpf_loop and bpf_task_pt_regs (5.17), which \
                          this kernel lacks";
            if choice == BackendChoice::Fentry {
                return Err(BackendError::Fentry {
                    reason: reason.into(),
                });
            }
            reason.to_owned()
        }
        (_, KernelHelpers::Full) => match attach_fentry(ebpf) {
            Ok(()) => return Ok(DataBackend::Fentry),
            Err(reason) if choice == BackendChoice::Auto => {
                log::info!("fentry backend: {reason}; attaching the tracepoints");
                reason
            }
            Err(reason) => return Err(BackendError::Fentry { reason }),
        },
    };
    for (name, cat, tp) in DATA_PROGRAMS {
        attach_tp(ebpf, &helpers.program_name(name), &[(cat, tp)])?;
    }
    Ok(DataBackend::Tracepoint { why })
}

/// Load and attach `FENTRY_PROGRAMS`, all or none (a half-attached set
/// would capture the sends twice once the tracepoints join it): what
/// failed, as a sentence, else.
fn attach_fentry(ebpf: &mut Ebpf) -> Result<(), String> {
    let btf = Btf::from_sys_fs().map_err(|e| format!("reading the kernel's BTF: {e}"))?;
    let attached = FENTRY_PROGRAMS
        .iter()
        .try_for_each(|(name, func)| attach_fexit(ebpf, name, func, &btf));
    if attached.is_err() {
        for (name, _) in FENTRY_PROGRAMS {
            if let Some(Ok(prog)) = ebpf.program_mut(name).map(<&mut FExit>::try_from) {
                // Not loaded: nothing to undo.
                let _ = prog.unload();
            }
        }
    }
    attached
}

/// Load fexit program `name` on kernel function `func` and attach it.
fn attach_fexit(ebpf: &mut Ebpf, name: &str, func: &str, btf: &Btf) -> Result<(), String> {
    let prog: &mut FExit = match ebpf.program_mut(name).map(TryInto::try_into) {
        Some(Ok(prog)) => prog,
        Some(Err(_)) => return Err(format!("{name} is not an fexit program in the object")),
        None => return Err(format!("{name} is missing from the object")),
    };
    prog.load(func, btf).map_err(|e| {
        // An empty verifier log says nothing: the kernel refused before
        // verifying (EPERM where function tracing is blocked).
        let chain = crate::human::error_chain(&e);
        let chain = chain.trim_end();
        let chain = chain
            .strip_suffix("Verifier output:")
            .map_or(chain, |c| c.trim_end_matches(['.', ' ']));
        format!("loading {name} on {func}: {}", short_error(&chain))
    })?;
    prog.attach().map(drop).map_err(|e| {
        format!(
            "attaching {name} to {func}: {}",
            crate::human::error_chain(&e)
        )
    })
}

/// Load `copy_tail` and put it in slot 0 of `COPY_TAIL`, where the
/// fallback programs tail-call it to copy a syscall's bytes.
fn install_copy_tail(ebpf: &mut Ebpf) -> Result<(), BackendError> {
    let prog: &mut TracePoint = load_program(ebpf, "copy_tail")?;
    let fd = prog
        .fd()
        .ok()
        .and_then(|fd| fd.try_clone().ok())
        .ok_or(BackendError::Program {
            program: "copy_tail".into(),
            problem: "has no file descriptor after loading",
        })?;
    let map = ebpf
        .map_mut("COPY_TAIL")
        .ok_or(BackendError::MapMissing { map: "COPY_TAIL" })?;
    let mut slots: ProgramArray<&mut MapData> =
        ProgramArray::try_from(map).map_err(map_err("COPY_TAIL"))?;
    slots.set(0, &fd, 0).map_err(map_err("COPY_TAIL"))
}

/// Whether the kernel has bpf_loop, bpf_task_pt_regs and
/// bpf_get_current_task_btf: the verifier's answer to `probe_helpers`, a
/// program that calls the three (a kernel rejects an unknown helper id
/// at load). Never attached.
fn probe_helpers(ebpf: &mut Ebpf) -> KernelHelpers {
    let Some(prog) = ebpf.program_mut("probe_helpers") else {
        return KernelHelpers::Full;
    };
    let Ok(prog): Result<&mut TracePoint, _> = prog.try_into() else {
        return KernelHelpers::Full;
    };
    match prog.load() {
        Ok(()) => KernelHelpers::Full,
        Err(e) => {
            log::info!("loading the fallback programs: probe_helpers: {e:#}");
            KernelHelpers::Fallback
        }
    }
}

/// A verifier log can be thousands of lines: keep its head and the lines
/// that say why the program was rejected (at the end).
fn short_error(e: &dyn std::fmt::Display) -> String {
    let full = format!("{e:#}");
    let lines: Vec<&str> = full.lines().collect();
    if lines.len() <= 12 {
        return full;
    }
    format!(
        "{}\n  ... {} verifier lines omitted (run with RUST_LOG=debug for all) ...\n{}",
        lines[0],
        lines.len() - 9,
        lines[lines.len() - 8..].join("\n")
    )
}

/// Find program `name`, check its type and load (verify) it.
fn load_program<'a, T>(ebpf: &'a mut Ebpf, name: &str) -> Result<&'a mut T, BackendError>
where
    &'a mut T: TryFrom<&'a mut aya::programs::Program, Error = aya::programs::ProgramError>,
    T: LoadProgram + 'a,
{
    let prog: &mut T = ebpf
        .program_mut(name)
        .ok_or_else(|| BackendError::Program {
            program: name.into(),
            problem: "is missing from the object",
        })?
        .try_into()
        .map_err(|_wrong_type| BackendError::Program {
            program: name.into(),
            problem: "is not of the type nri-trace attaches it as",
        })?;
    prog.load_program().map_err(|source| {
        log::debug!("loading {name}: {source:#}");
        BackendError::ProgramLoad {
            program: name.into(),
            summary: short_error(&source),
            source: Box::new(source),
        }
    })?;
    Ok(prog)
}

/// The `load()` every aya program type has, as a trait.
trait LoadProgram {
    fn load_program(&mut self) -> Result<(), aya::programs::ProgramError>;
}
impl LoadProgram for TracePoint {
    fn load_program(&mut self) -> Result<(), aya::programs::ProgramError> {
        self.load()
    }
}
impl LoadProgram for RawTracePoint {
    fn load_program(&mut self) -> Result<(), aya::programs::ProgramError> {
        self.load()
    }
}

fn attach_error(
    program: &str,
    tracepoint: String,
    source: aya::programs::ProgramError,
) -> BackendError {
    BackendError::Attach {
        program: program.into(),
        tracepoint,
        source: Box::new(source),
    }
}

fn attach_tp(ebpf: &mut Ebpf, name: &str, tps: &[(&str, &str)]) -> Result<(), BackendError> {
    let prog: &mut TracePoint = load_program(ebpf, name)?;
    for (cat, tp) in tps {
        prog.attach(cat, tp)
            .map_err(|e| attach_error(name, format!("{cat}/{tp}"), e))?;
    }
    Ok(())
}

fn attach_raw(ebpf: &mut Ebpf, name: &str) -> Result<(), BackendError> {
    let prog: &mut RawTracePoint = load_program(ebpf, name)?;
    prog.attach("sys_exit")
        .map_err(|e| attach_error(name, "raw sys_exit".into(), e))?;
    Ok(())
}

impl CaptureBackend for EbpfBackend {
    fn track_process(&mut self, tgid: u32) -> Result<(), BackendError> {
        // Tracked by the kernel already (its bind of a watched path): keep
        // its value, without a row (see tgid_filter.rs).
        let kernel = self.tgids.get(&tgid, 0).ok();
        let v = self.view.add(tgid, kernel);
        if kernel.is_none() {
            match insert_new(&mut self.tgids, tgid, v) {
                Ok(true) => {}
                Ok(false) => {
                    // The kernel's bind got there in between: its value wins.
                    let kv = self.tgids.get(&tgid, 0).map_err(map_err("TRACKED_TGIDS"))?;
                    self.view.set_value(tgid, kv);
                }
                Err(e) => {
                    self.view.remove(tgid);
                    return Err(map_err("TRACKED_TGIDS")(e));
                }
            }
        }
        self.write_slot(slot_of(tgid))
    }

    fn untrack_process(&mut self, tgid: u32) -> Result<(), BackendError> {
        let row = self.view.row(tgid);
        self.view.remove(tgid);
        self.write_slot(slot_of(tgid))?;
        let _ = self.tgids.remove(&tgid);
        // Its table row too, if it had one: a later process with the same
        // pid and row must not find its entries (one update per fd: a few
        // ms, at a process's exit).
        if let Some(first) = fd_table_index(row, 0) {
            for i in first..first + FD_TABLE_FDS {
                let _ = self.fd_table.set(i, FdState::new(0, 0), 0);
            }
        }
        // Its fds too: a later process reusing the pid must not match them.
        let stale: Vec<FdKey> = self
            .fds
            .keys()
            .filter_map(Result::ok)
            .filter(|k| k.tgid == tgid)
            .collect();
        for k in stale {
            let _ = self.fds.remove(&k);
        }
        Ok(())
    }

    fn track_fd(&mut self, tgid: u32, fd: u32, flags: u32) -> Result<(), BackendError> {
        // The programs' placement rule (nri-trace-common `fd_table_index`).
        let st = FdState::new(tgid, flags);
        match fd_table_index(self.view.row(tgid), fd) {
            Some(i) => self.fd_table.set(i, st, 0).map_err(map_err("FD_TABLE")),
            None => self
                .fds
                .insert(FdKey { tgid, fd }, st, 0)
                .map_err(map_err("FDS")),
        }
    }

    fn track_connect_path(&mut self, path: &Path) -> Result<(), BackendError> {
        self.connect_paths
            .insert(sun_path(path)?, 1, 0)
            .map_err(map_err("CONNECT_PATHS"))
    }

    fn watch_bind_path(&mut self, path: &Path, name: u32) -> Result<(), BackendError> {
        self.listen_paths
            .insert(sun_path(path)?, name, 0)
            .map_err(map_err("LISTEN_PATHS"))
    }

    fn watch_tasks(&mut self, tgids: &[u32]) -> Result<(), BackendError> {
        for &t in tgids {
            // A process already watched keeps its bits.
            match insert_new(&mut self.pod_tasks, t, 0) {
                Ok(_) => {}
                Err(e) => {
                    log::debug!("adding pid {t} to POD_TASKS: {e}");
                    return Err(map_err("POD_TASKS")(e));
                }
            }
        }
        Ok(())
    }

    fn loss(&self) -> Result<Loss, BackendError> {
        let sum = |i: u32| self.counter(i);
        Ok(Loss {
            lost_records: sum(counter::LOST_RECORDS)?,
            lost_bytes: sum(counter::LOST_BYTES)?,
            read_faults: sum(counter::READ_FAULTS)?,
            fd_map_full: sum(counter::FD_MAP_FULL)?,
            malformed: 0,
            sandbox_suppressed: sum(counter::SANDBOX_SUPPRESSED)?,
            pod_map_full: sum(counter::POD_MAP_FULL)?,
            lost_from: None,
            lost_to: None,
        })
    }

    fn kernel_filtered(&self) -> Result<u64, BackendError> {
        self.counter(counter::SANDBOX_FILTERED)
    }

    fn take_loss_times(&mut self) -> Result<(Option<u64>, u64), BackendError> {
        let first = self
            .counters
            .get(&counter::LOST_FIRST_NS, 0)
            .map_err(map_err("COUNTERS"))?;
        let first_ns = first.iter().copied().filter(|t| *t != 0).min();
        if first_ns.is_some() {
            // A drop between the read and this clear loses its stamp: the
            // session then takes its previous reading's time instead.
            // (One value per possible CPU, as read: the conversion
            // cannot fail.)
            if let Ok(zeros) = PerCpuValues::try_from(vec![0u64; first.len()]) {
                self.counters
                    .set(counter::LOST_FIRST_NS, zeros, 0)
                    .map_err(map_err("COUNTERS"))?;
            }
        }
        if first_ns.is_none() {
            return Ok((None, 0));
        }
        let last_ns = self
            .counters
            .get(&counter::LOST_LAST_NS, 0)
            .map_err(map_err("COUNTERS"))?
            .iter()
            .copied()
            .max()
            .unwrap_or(0);
        Ok((first_ns, last_ns))
    }

    fn drain(&mut self, budget: usize, f: &mut dyn FnMut(&[u8])) -> bool {
        let mut used = 0usize;
        while used < budget {
            let Some(item) = self.ring.next() else {
                return false;
            };
            used += item.len() + super::backend::RECORD_COST;
            f(&item);
        }
        true
    }

    fn poll_fd(&self) -> RawFd {
        self.ring.as_raw_fd()
    }

    fn set_reader_asleep(&mut self, asleep: bool) -> Result<bool, BackendError> {
        self.reader_asleep
            .set(0, u32::from(asleep), 0)
            .map_err(map_err("READER_ASLEEP"))?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::parse_field_offset;

    /// sched_process_exit's format on 6.18 (with group_dead) and on 6.1
    /// (without), as the kernels' tracefs print them.
    #[test]
    fn tracepoint_field_offsets_from_format() {
        let with = "name: sched_process_exit\nID: 316\nformat:\n\
            \tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
            \tfield:char comm[16];\toffset:8;\tsize:16;\tsigned:1;\n\
            \tfield:pid_t pid;\toffset:24;\tsize:4;\tsigned:1;\n\
            \tfield:int prio;\toffset:28;\tsize:4;\tsigned:1;\n\
            \tfield:bool group_dead;\toffset:32;\tsize:1;\tsigned:0;\n\n\
            print fmt: \"comm=%s pid=%d prio=%d group_dead=%s\"";
        assert_eq!(parse_field_offset(with, "group_dead"), Some(32));
        assert_eq!(parse_field_offset(with, "pid"), Some(24));
        let without = with.replace(
            "\tfield:bool group_dead;\toffset:32;\tsize:1;\tsigned:0;\n",
            "",
        );
        assert_eq!(parse_field_offset(&without, "group_dead"), None);
        assert_eq!(parse_field_offset(&without, "dead"), None);
    }
}
