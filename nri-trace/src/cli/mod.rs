//! The command line: what each command takes (clap), apart from what the
//! commands do (`commands/`). Conventions of kubectl, crictl and
//! Inspektor Gadget: `-o` is always an output format, `-n` a namespace,
//! `--pod` / `--plugin` filters.

pub(crate) mod args;

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use nri_trace::store::flight_recorder::{parse_duration, parse_size};

use args::{
    CaptureOutput, DecodeArgs, FilterArgs, LineOutput, ProbeArgs, ReplayOutput, TargetArgs,
    WaitArgs, WatchOutput,
};

#[derive(Parser)]
#[command(
    name = "nri-trace",
    // The crate version and the commit it was built from (build.rs).
    version = concat!(env!("CARGO_PKG_VERSION"), " (", env!("NRI_TRACE_GIT_COMMIT"), ")"),
    about = "See what a container runtime and its NRI plugins do to each pod, live, with eBPF",
    after_help = "Without a command, on a terminal: the live TUI (`nri-trace watch -o tui`).\n\
                  Docs: docs/ in the source tree (README.md lists them)."
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub cmd: Option<Cmd>,
}

#[derive(Subcommand)]
pub(crate) enum Cmd {
    /// Trace the runtime live: each CRI call with the NRI hooks it caused,
    /// their times, the contract findings (TUI on a terminal, else text).
    Watch(WatchArgs),
    /// The flight recorder: trace the runtime live as `watch` does and keep
    /// the last calls on disk, bounded in size (and age), for `explain`,
    /// `report` and `replay` to read later.
    Record(RecordArgs),
    /// Run a saved file (`watch --save`, or a raw `--save-raw` capture)
    /// through the engine again: the TUI on a terminal, else the report.
    Replay(ReplayArgs),
    /// Summarize a saved file: pods and where their time went, the slowest
    /// hooks, latency tables, findings (`replay -o report`).
    Report(ReportArgs),
    /// Why is this pod (stuck in Terminating) not gone? Its teardown (from
    /// a saved file, the flight recorder, or kubelet's next attempt watched
    /// now): the blocker in one sentence with its evidence, and what this
    /// node still holds of it.
    Explain(ExplainArgs),
    /// Check that this node can run nri-trace, and say what to fix.
    Doctor {
        #[arg(short, long, value_enum, default_value = "text")]
        output: LineOutput,
        /// Check the capture on this backend (as the live commands'
        /// `--backend`).
        #[arg(long, value_enum, default_value = "auto")]
        backend: nri_trace::capture::BackendChoice,
    },
    /// One stage of the pipeline alone, for debugging nri-trace itself.
    #[command(subcommand)]
    Debug(DebugCmd),
    /// Attach a program set and hold it (benchmarks: design floors).
    #[command(hide = true)]
    Hold(HoldArgs),
    /// Time one-byte writes of this untraced process to a file, a pipe, TCP
    /// and a unix socket with the capture attached (benchmarks).
    #[command(hide = true)]
    WriteCost(WriteCostArgs),
}

/// `nri-trace write-cost`.
#[derive(clap::Args)]
pub(crate) struct WriteCostArgs {
    /// The programs attached while the writes run.
    #[arg(long, value_enum)]
    pub probes: WriteCostProbes,
    /// Timed writes per target.
    #[arg(long, default_value_t = 50_000)]
    pub writes: u32,
}

/// What `write-cost` attaches: nothing, or the capture on a backend.
#[derive(Clone, Copy, clap::ValueEnum)]
pub(crate) enum WriteCostProbes {
    None,
    Tracepoint,
    Fentry,
}

/// `nri-trace watch`.
#[derive(clap::Args, Clone)]
pub(crate) struct WatchArgs {
    /// Output format [default: tui on a terminal, else text].
    #[arg(short, long, value_enum)]
    pub output: Option<WatchOutput>,
    #[command(flatten)]
    pub filter: FilterArgs,
    #[command(flatten)]
    pub target: TargetArgs,
    #[command(flatten)]
    pub wait: WaitArgs,
    /// Also write the decoded calls to FILE, as `replay` reads them
    /// (versioned NDJSON, created 0600, secrets redacted: docs/schema.md).
    #[arg(long, value_name = "FILE")]
    pub save: Option<PathBuf>,
    /// Keep secrets (exec command lines, NAME=value in messages) in
    /// everything this run shows and saves.
    #[arg(long)]
    pub no_redact: bool,
    /// Also write the raw capture to FILE: every byte the runtime read and
    /// wrote, unredacted (created 0600; for debugging decoders).
    #[arg(long, value_name = "FILE")]
    pub save_raw: Option<PathBuf>,
    /// Stop after this many seconds, a wait for the runtime included
    /// (default: until Ctrl-C or SIGTERM).
    #[arg(long, value_name = "SECS")]
    pub duration: Option<f64>,
    /// Serve Prometheus metrics on ADDR, e.g. 127.0.0.1:9464 (docs/trace.md).
    #[arg(long, value_name = "ADDR")]
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// Also export spans over OTLP/gRPC to URL, e.g. http://127.0.0.1:4317
    /// (docs/trace.md, "OpenTelemetry spans"); without it the standard
    /// OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT turns export on.
    #[arg(long, value_name = "URL")]
    pub otlp_endpoint: Option<String>,
    #[command(flatten)]
    pub decode: DecodeArgs,
    /// Where the TUI's `e`/`E` write their exports.
    #[arg(long, value_name = "DIR", default_value = ".")]
    pub export_dir: PathBuf,
    #[command(flatten)]
    pub probe: ProbeArgs,
}

/// `nri-trace record`.
#[derive(clap::Args, Clone)]
pub(crate) struct RecordArgs {
    /// Where the segments go [default: $NRI_TRACE_RECORDER_DIR, else
    /// /var/lib/nri-trace/recorder].
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Keep at most this much on disk, the oldest deleted first (B, KiB,
    /// MiB, GiB; at least 64KiB).
    #[arg(long, value_name = "SIZE", default_value = "256MiB", value_parser = parse_size)]
    pub max_size: u64,
    /// Also delete what was written longer ago than this (s, m, h, d)
    /// [default: only the size bounds it].
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub max_age: Option<std::time::Duration>,
    #[command(flatten)]
    pub target: TargetArgs,
    #[command(flatten)]
    pub wait: WaitArgs,
    /// Keep secrets (exec command lines, NAME=value in messages) in the
    /// segments.
    #[arg(long)]
    pub no_redact: bool,
    /// Stop after this many seconds, a wait for the runtime included
    /// (default: until Ctrl-C or SIGTERM).
    #[arg(long, value_name = "SECS")]
    pub duration: Option<f64>,
    /// Serve Prometheus metrics on ADDR, e.g. 127.0.0.1:9464 (docs/trace.md).
    #[arg(long, value_name = "ADDR")]
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// Also export spans over OTLP/gRPC to URL, e.g. http://127.0.0.1:4317
    /// (docs/trace.md, "OpenTelemetry spans"); without it the standard
    /// OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT turns export on.
    #[arg(long, value_name = "URL")]
    pub otlp_endpoint: Option<String>,
    #[command(flatten)]
    pub decode: DecodeArgs,
    #[command(flatten)]
    pub probe: ProbeArgs,
}

/// `nri-trace replay`.
#[derive(clap::Args)]
pub(crate) struct ReplayArgs {
    /// The file (`-`: a record file on standard input), gzipped or not, or
    /// a flight recorder's directory [default: the recorder's
    /// (`nri-trace record`), when it exists].
    pub file: Option<PathBuf>,
    /// Output format [default: tui on a terminal, else report].
    #[arg(short, long, value_enum)]
    pub output: Option<ReplayOutput>,
    #[command(flatten)]
    pub filter: FilterArgs,
    /// A raw capture: keep its secrets (exec command lines, NAME=value in
    /// messages) in the output. A record file stays as it was saved.
    #[arg(long)]
    pub no_redact: bool,
    #[command(flatten)]
    pub decode: DecodeArgs,
    /// Also export spans over OTLP/gRPC to URL, e.g. http://127.0.0.1:4317
    /// (docs/trace.md, "OpenTelemetry spans"); without it the standard
    /// OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT turns export on.
    #[arg(long, value_name = "URL")]
    pub otlp_endpoint: Option<String>,
}

/// `nri-trace report`.
#[derive(clap::Args)]
pub(crate) struct ReportArgs {
    /// The file (`-`: a record file on standard input), or a flight
    /// recorder's directory [default: the recorder's, when it exists].
    pub file: Option<PathBuf>,
    #[command(flatten)]
    pub filter: FilterArgs,
    /// A raw capture: keep its secrets (exec command lines, NAME=value in
    /// messages) in the output. A record file stays as it was saved.
    #[arg(long)]
    pub no_redact: bool,
    #[command(flatten)]
    pub decode: DecodeArgs,
}

/// `nri-trace explain`.
#[derive(clap::Args)]
pub(crate) struct ExplainArgs {
    /// The pod: namespace/name, name, or sandbox id (or its start).
    pub pod: String,
    /// The file `watch --save` wrote (or a raw --save-raw capture), or a
    /// flight recorder's directory [default: the recorder's (`nri-trace
    /// record`), when it exists and saw the pod]. Without either: attach
    /// to the runtime now, watch kubelet's next teardown attempts of the
    /// pod (up to --wait), then explain.
    pub file: Option<PathBuf>,
    /// Attach and watch now even when a flight recorder saw the pod.
    #[arg(long, conflicts_with = "file")]
    pub live: bool,
    /// Live: how long to watch for kubelet's next teardown attempt, in
    /// seconds (kubelet retries a terminating pod every few seconds).
    #[arg(long, value_name = "SECONDS", default_value_t = 60.0)]
    pub wait: f64,
    #[command(flatten)]
    pub target: TargetArgs,
    #[command(flatten)]
    pub probe: ProbeArgs,
    #[arg(short, long, value_enum, default_value = "text")]
    pub output: LineOutput,
    /// Do not look at this node's processes, mounts and cgroups.
    #[arg(long)]
    pub no_proc: bool,
}

#[derive(Subcommand)]
pub(crate) enum DebugCmd {
    /// The capture stage: the raw byte streams of a process's unix-socket
    /// connections (docs/capture.md).
    Capture(CaptureArgs),
    /// The NRI decoder: every NRI call between the runtime and its
    /// plugins, as decoded (docs/nri.md).
    Nri(NriStageArgs),
    /// The CRI decoder: every CRI call on the runtime's CRI socket, as
    /// decoded (docs/cri.md).
    Cri(StageArgs),
}

/// `nri-trace debug capture`.
#[derive(clap::Args)]
pub(crate) struct CaptureArgs {
    /// A listening unix socket: capture the server side of its connections.
    #[arg(long = "socket", value_name = "PATH")]
    pub sockets: Vec<PathBuf>,
    /// Also track this process (its socketpairs; its connects to --connect-path).
    #[arg(long = "pid")]
    pub pids: Vec<u32>,
    /// Capture connect() calls of tracked processes to this path.
    #[arg(long = "connect-path", value_name = "PATH")]
    pub connect_paths: Vec<PathBuf>,
    /// Also capture the connections that already exist at start and whose
    /// peer process has VAR in its environment: NRI_PLUGIN_SOCKET for the
    /// runtime's pre-launched NRI plugins (docs/capture.md).
    #[arg(long, value_name = "VAR")]
    pub socketpair_env: Option<String>,
    #[arg(short, long, value_enum, default_value = "text")]
    pub output: CaptureOutput,
    /// Text: dump at most this many bytes per syscall.
    #[arg(long, default_value_t = 256)]
    pub dump_bytes: usize,
    /// Stop after this many seconds, a wait for the sockets included
    /// (default: until Ctrl-C or SIGTERM).
    #[arg(long, value_name = "SECS")]
    pub duration: Option<f64>,
    /// Exit when nothing listens on a --socket yet [default: wait for a
    /// process to bind it, and capture it from its bind].
    #[arg(long)]
    pub no_wait: bool,
    #[command(flatten)]
    pub probe: ProbeArgs,
}

/// `nri-trace debug nri|cri`.
#[derive(clap::Args)]
pub(crate) struct StageArgs {
    /// Decode this raw capture (`--save-raw`, `debug capture -o json`)
    /// instead of tracing live.
    pub file: Option<PathBuf>,
    /// The socket [default: the runtime's, found as `watch` finds it].
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    #[arg(short, long, value_enum, default_value = "text")]
    pub output: LineOutput,
    /// Stop after this many seconds, a wait for the runtime included
    /// (default: until Ctrl-C or SIGTERM).
    #[arg(long, value_name = "SECS")]
    pub duration: Option<f64>,
    #[command(flatten)]
    pub wait: WaitArgs,
    #[command(flatten)]
    pub probe: ProbeArgs,
}

/// `nri-trace debug nri`.
#[derive(clap::Args)]
pub(crate) struct NriStageArgs {
    #[command(flatten)]
    pub stage: StageArgs,
    /// Capture only the runtime's end of plugin connections.
    #[arg(long)]
    pub no_plugin_end: bool,
}

/// `nri-trace hold`.
#[derive(clap::Args)]
pub(crate) struct HoldArgs {
    #[arg(long, value_enum)]
    pub programs: nri_trace::capture::ProgramSet,
    /// Track this pid (the filter then has one entry, as in real use).
    #[arg(long)]
    pub pid: Option<u32>,
    /// Also attach the sandbox probes (watching --pid's process tree).
    #[arg(long)]
    pub sandbox: bool,
    /// With `--programs capture`: which programs capture the data syscalls.
    #[arg(long, value_enum, default_value = "auto")]
    pub backend: nri_trace::capture::BackendChoice,
    #[arg(long)]
    pub duration: f64,
}
