//! Argument groups several commands share, and the output formats.

use std::path::PathBuf;

use clap::ValueEnum;
use nri_trace::capture::BackendChoice;
use nri_trace_common::{DEFAULT_RING_BYTES, DEFAULT_SNAP};

/// `watch -o`.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum WatchOutput {
    /// Per pod, each CRI call with the NRI hooks it caused (docs/trace.md).
    Text,
    /// NDJSON records (docs/schema.md).
    Json,
    /// The TUI (docs/tui.md).
    Tui,
}

/// `replay -o`.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum ReplayOutput {
    Tui,
    /// `report`'s summary.
    Report,
    Text,
    Json,
}

/// Commands that print lines: text for people, JSON for pipelines.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum LineOutput {
    Text,
    Json,
}

/// `debug capture -o`.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum CaptureOutput {
    Text,
    /// The raw capture format `replay` and `--save-raw` use.
    Json,
    /// Only the totals at the end (connections, chunks, bytes, losses).
    Count,
}

/// Which records reach the output (docs/trace.md, "Filters").
#[derive(clap::Args, Clone, Default)]
pub(crate) struct FilterArgs {
    /// Only records about pods of this namespace.
    #[arg(short = 'n', long, value_name = "NAMESPACE")]
    pub namespace: Option<String>,
    /// Only records about this pod (its name).
    #[arg(long, value_name = "NAME")]
    pub pod: Option<String>,
    /// Only records about this NRI plugin (IDX-NAME, or NAME).
    #[arg(long, value_name = "NAME")]
    pub plugin: Option<String>,
    /// Only the CRI calls of this client, by its command (comm: kubelet,
    /// crictl) or the systemd unit it runs in (kubelet.service,
    /// session-3.scope, or without the suffix), with its connections and
    /// the findings about its calls.
    #[arg(long, value_name = "NAME")]
    pub client: Option<String>,
}

/// What the engine is told, and what text output leaves out.
#[derive(clap::Args, Clone, Default)]
pub(crate) struct DecodeArgs {
    /// Hook budget for the hook-over-budget rule (default: half of each
    /// request's plugin timeout; docs/contract.md).
    #[arg(long, value_name = "MS")]
    pub hook_budget_ms: Option<u64>,
    /// Kernel events of the runtime's process tree: the ones that explain
    /// something (signals to and exits of pod processes, failures the
    /// rules count), or all of them. Live, the others are counted in the
    /// kernel and not sent (runc's cleanup probing, successful removals,
    /// cgroup creation: about 60 % of a pod's); text shows only explaining
    /// ones in either case unless all (docs/explain.md).
    #[arg(long, value_enum, default_value = "explaining")]
    pub kernel: KernelEvents,
    /// Text: leave out the latency tables at the end.
    #[arg(long)]
    pub no_tables: bool,
    /// Text: the CRI calls that only read (kubelet's relists, status and
    /// stats calls, exec probes) that ended ok without an NRI hook, as one
    /// line per client every 10 s (summary), or every call (all). -o json
    /// keeps every call.
    #[arg(long, value_enum, default_value = "summary")]
    pub calls: CallLines,
}

#[derive(Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub(crate) enum KernelEvents {
    #[default]
    Explaining,
    All,
}

/// `--calls`: how text shows the steady-state polls (sinks/polls.rs).
#[derive(Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub(crate) enum CallLines {
    #[default]
    Summary,
    All,
}

/// The runtime to trace.
#[derive(clap::Args, Clone, Default)]
pub(crate) struct TargetArgs {
    /// The runtime's CRI socket [default: found from the running
    /// containerd or CRI-O].
    #[arg(long, value_name = "PATH")]
    pub cri_socket: Option<PathBuf>,
    /// The runtime's NRI socket [default: found as --cri-socket is].
    #[arg(long, value_name = "PATH")]
    pub nri_socket: Option<PathBuf>,
    /// Capture only the runtime's end of plugin connections (no plugin own
    /// time; the plugins' socket syscalls then cost nothing).
    #[arg(long)]
    pub no_plugin_end: bool,
    /// Do not watch the runtime's process tree (signals, exits, unmounts,
    /// unlinks, namespaces, cgroups; docs/explain.md).
    #[arg(long)]
    pub no_sandbox: bool,
    /// Do not ask the runtime for its pods and containers (ListPodSandbox,
    /// ListContainers on its CRI socket, at start and after a restart):
    /// pods made before the trace then show by sandbox id until a traced
    /// call names them (docs/cri.md).
    #[arg(long)]
    pub no_cri_state: bool,
}

/// Whether a live run waits for the runtime (docs/trace.md, "Started
/// before the runtime").
#[derive(clap::Args, Clone, Default)]
pub(crate) struct WaitArgs {
    /// Exit when the runtime is not running or does not serve its sockets
    /// yet [default: wait for it and trace it from when it serves them].
    #[arg(long)]
    pub no_wait: bool,
}

/// How the probes capture.
#[derive(clap::Args, Clone)]
pub(crate) struct ProbeArgs {
    /// Bytes captured per syscall at most.
    #[arg(long, default_value_t = DEFAULT_SNAP)]
    pub snap_len: u32,
    /// Ring buffer size in bytes (rounded up to a power of two).
    #[arg(long, default_value_t = DEFAULT_RING_BYTES)]
    pub ring_bytes: u32,
    /// Wake the reader once this many bytes wait (default: a quarter of the ring).
    #[arg(long)]
    pub wakeup_bytes: Option<u32>,
    /// Drain the ring buffer at least this often, in milliseconds.
    #[arg(long, default_value_t = 2)]
    pub drain_ms: u64,
    /// Which probes capture the sockets' bytes: fexit on the unix socket
    /// functions (nothing runs for other reads and writes), the syscall
    /// exit tracepoints (every process's reads and writes run one), or
    /// fentry where the kernel allows it (`nri-trace doctor` says which).
    #[arg(long, value_enum, default_value = "auto")]
    pub backend: BackendChoice,
}
