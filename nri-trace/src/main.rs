//! The `nri-trace` command line (anyhow at this edge; library errors are
//! typed and name their fix).

use std::{
    io::{IsTerminal, Write},
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::{Context, Result};
use clap::{Parser, Subcommand, ValueEnum};
use nri_trace::{
    capture::{
        ebpf::{EbpfBackend, EbpfOptions, ProgramSet},
        holders, recording,
        runtimes::{self, RuntimeKind},
        session::{self, SessionConfig},
        CaptureEvent,
    },
    doctor,
    engine::{
        contract::ContractConfig,
        cri_analysis::{CriAnalysis, CriRecord},
        nri_analysis::{NriAnalysis, NriRecord},
        pods::PodModel,
        record::Record,
        teardown::TeardownLog,
        trace_analysis::{TraceAnalysis, TraceEngine},
    },
    model::{
        nri_call::{ENV_PLUGIN_IDX, ENV_PLUGIN_NAME},
        observation::Observation,
        record_file::{self, RecordLine, RecordWriter, SessionInfo},
        trace_decoder::TraceDecoder,
    },
    output,
    sinks::{cri_lines, explain_text, metrics, nri_lines, report, trace_lines, tui},
};
use nri_trace_common::{DEFAULT_RING_BYTES, DEFAULT_SNAP};

#[derive(Parser)]
#[command(
    name = "nri-trace",
    version,
    about = "Trace what a container runtime and its NRI plugins do to each pod, live, with eBPF"
)]
struct Cli {
    /// Without a command, on a terminal: the live TUI (`nri-trace tui`).
    #[command(subcommand)]
    cmd: Option<Cmd>,
}

#[derive(Clone, Copy, ValueEnum)]
enum Format {
    Text,
    Ndjson,
    /// Only a summary at the end (connections, chunks, bytes, losses).
    Count,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ReplayFormat {
    /// The TUI (docs/tui.md); the default on a terminal.
    Tui,
    /// `report`'s summary; the default otherwise.
    Report,
    /// The records `trace` prints, as text.
    Text,
    /// The records `trace --format ndjson` prints.
    Ndjson,
}

#[derive(Clone, Copy, ValueEnum)]
enum LineFormat {
    Text,
    Ndjson,
}

#[derive(clap::Args, Clone)]
struct ProbeArgs {
    /// Bytes captured per syscall at most.
    #[arg(long, default_value_t = DEFAULT_SNAP)]
    snap_len: u32,
    /// Ring buffer size in bytes (rounded up to a power of two).
    #[arg(long, default_value_t = DEFAULT_RING_BYTES)]
    ring_bytes: u32,
    /// Wake the reader once this many bytes wait (default: a quarter of the ring).
    #[arg(long)]
    wakeup_bytes: Option<u32>,
    /// Drain the ring buffer at least this often, in milliseconds.
    #[arg(long, default_value_t = 2)]
    drain_ms: u64,
    /// Do not watch the runtime's process tree (signals, exits, unmounts,
    /// unlinks, namespaces, cgroups; docs/explain.md). `trace`, `record`
    /// and `tui` watch it by default, the other commands never do.
    #[arg(long)]
    no_sandbox: bool,
}

/// What the decoding commands (`nri`, `cri`, `trace`) share.
#[derive(clap::Args, Clone)]
struct DecodeArgs {
    /// Decode a recording (`--record`, or `capture --format ndjson`)
    /// instead of tracing live.
    #[arg(long, value_name = "FILE")]
    replay: Option<PathBuf>,
    /// While tracing live, also save the raw capture to FILE (created 0600:
    /// it holds everything the runtime read and wrote).
    #[arg(long, value_name = "FILE", conflicts_with = "replay")]
    record: Option<PathBuf>,
    #[arg(long, value_enum, default_value = "text")]
    format: LineFormat,
    /// Do not print the latency tables at the end.
    #[arg(long)]
    no_summary: bool,
    /// Stop after this many seconds (default: until Ctrl-C or SIGTERM).
    #[arg(long)]
    duration: Option<f64>,
    #[command(flatten)]
    probe: ProbeArgs,
}

/// `nri-trace capture`.
#[derive(clap::Args)]
struct CaptureArgs {
    /// A listening unix socket: capture the server side of its connections.
    #[arg(long = "socket", value_name = "PATH")]
    sockets: Vec<PathBuf>,
    /// Also track this process (its socketpairs; its connects to --connect-path).
    #[arg(long = "pid")]
    pids: Vec<u32>,
    /// Capture connect() calls of tracked processes to this path.
    #[arg(long = "connect-path", value_name = "PATH")]
    connect_paths: Vec<PathBuf>,
    /// Also capture the connections that already exist at start and whose
    /// peer process has VAR in its environment: NRI_PLUGIN_SOCKET for the
    /// runtime's pre-launched NRI plugins (docs/capture.md).
    #[arg(long, value_name = "VAR")]
    socketpair_env: Option<String>,
    #[arg(long, value_enum, default_value = "text")]
    format: Format,
    /// Text format: dump at most this many bytes per syscall.
    #[arg(long, default_value_t = 256)]
    dump_bytes: usize,
    /// Stop after this many seconds (default: until Ctrl-C or SIGTERM).
    #[arg(long)]
    duration: Option<f64>,
    #[command(flatten)]
    probe: ProbeArgs,
}

#[derive(Subcommand)]
enum Cmd {
    /// Print the raw byte streams of a process's unix-socket connections
    /// (the capture stage alone, for debugging).
    Capture(CaptureArgs),
    /// Decode every NRI call between the runtime and its plugins, live (or
    /// from a recording), with each plugin's hook time.
    Nri {
        /// The runtime's NRI socket (its external plugins' connections), and
        /// the runtime process behind it (its pre-launched plugins).
        #[arg(long, value_name = "PATH", default_value = "/var/run/nri/nri.sock")]
        socket: PathBuf,
        /// Also track this runtime process (pre-launched plugins), when no
        /// process listens on --socket.
        #[arg(long = "pid")]
        pids: Vec<u32>,
        #[command(flatten)]
        out: DecodeArgs,
        /// Capture only the runtime's end of plugin connections (no plugin
        /// own time; the plugins' socket syscalls then cost nothing).
        #[arg(long)]
        no_plugin_end: bool,
    },
    /// Decode every CRI call kubelet (or crictl) makes on the runtime's CRI
    /// socket, live (or from a recording): method, pod/container, deadline,
    /// outcome; methods hidden by HPACK on connections opened before the
    /// trace are inferred, with evidence, or reported unknown.
    Cri {
        /// The runtime's CRI socket.
        #[arg(
            long,
            value_name = "PATH",
            default_value = "/run/containerd/containerd.sock"
        )]
        socket: PathBuf,
        #[command(flatten)]
        out: DecodeArgs,
    },
    /// Trace the runtime's CRI and NRI sockets together: each CRI call with
    /// the NRI hooks it caused (plugin, event, hook time) and the share of
    /// its time spent in them; NRI calls with no CRI cause, labeled.
    Trace {
        /// The runtime's CRI socket [default: found from the running
        /// containerd or CRI-O, or, with --replay, from the recording].
        #[arg(long, value_name = "PATH")]
        cri_socket: Option<PathBuf>,
        /// The runtime's NRI socket [default: found as --cri-socket is].
        #[arg(long, value_name = "PATH")]
        nri_socket: Option<PathBuf>,
        #[command(flatten)]
        out: DecodeArgs,
        /// Capture only the runtime's end of plugin connections.
        #[arg(long)]
        no_plugin_end: bool,
        /// Hook budget for the hook-over-budget rule (default: half of each
        /// request's plugin timeout; docs/contract.md).
        #[arg(long, value_name = "MS")]
        hook_budget_ms: Option<u64>,
        /// Serve Prometheus metrics (hook and CRI latency histograms,
        /// findings, capture loss) on ADDR, e.g. 127.0.0.1:9464.
        #[arg(long, value_name = "ADDR")]
        metrics_addr: Option<std::net::SocketAddr>,
        /// While tracing live, also write the decoded observations to FILE
        /// as `record` does (created 0600; redacted unless --no-redact).
        #[arg(long, value_name = "FILE", conflicts_with = "replay")]
        observations: Option<PathBuf>,
        /// Keep secrets in the --observations file (see `record`).
        #[arg(long, requires = "observations")]
        no_redact: bool,
    },
    /// Record the decoded CRI and NRI calls of the runtime, live, as NDJSON
    /// (one versioned record per line: docs/schema.md), for `replay` and
    /// `report` here or elsewhere, or for a pipeline.
    Record {
        /// Write to FILE (created 0600) instead of standard output.
        #[arg(short, long, value_name = "FILE")]
        output: Option<PathBuf>,
        /// See `trace`.
        #[arg(long, value_name = "PATH")]
        cri_socket: Option<PathBuf>,
        #[arg(long, value_name = "PATH")]
        nri_socket: Option<PathBuf>,
        /// Keep secrets (exec command lines, `NAME=value` in messages) in
        /// the records; redacted by default.
        #[arg(long)]
        no_redact: bool,
        /// Decode a raw capture (`trace --record FILE`) instead of tracing
        /// live.
        #[arg(long, value_name = "FILE")]
        replay: Option<PathBuf>,
        /// Capture only the runtime's end of plugin connections.
        #[arg(long)]
        no_plugin_end: bool,
        /// Stop after this many seconds (default: until Ctrl-C or SIGTERM).
        #[arg(long)]
        duration: Option<f64>,
        #[command(flatten)]
        probe: ProbeArgs,
    },
    /// The live TUI on the runtime found here (the default command on a
    /// terminal): pods, timelines, plugins, findings, calls (docs/tui.md).
    Tui {
        /// See `trace`.
        #[arg(long, value_name = "PATH")]
        cri_socket: Option<PathBuf>,
        #[arg(long, value_name = "PATH")]
        nri_socket: Option<PathBuf>,
        /// Also record the decoded calls to FILE, as `record` does.
        #[arg(long, value_name = "FILE")]
        observations: Option<PathBuf>,
        /// Keep secrets in the --observations file (see `record`).
        #[arg(long, requires = "observations")]
        no_redact: bool,
        /// Capture only the runtime's end of plugin connections.
        #[arg(long)]
        no_plugin_end: bool,
        #[arg(long, value_name = "MS")]
        hook_budget_ms: Option<u64>,
        /// Where `e`/`E` write their exports.
        #[arg(long, value_name = "DIR", default_value = ".")]
        export_dir: PathBuf,
        #[command(flatten)]
        probe: ProbeArgs,
    },
    /// Feed a recording through the engine again: a `record` file (or a
    /// raw `trace --record` capture) to the TUI on a terminal, else to the
    /// report (or, with --format, the records `trace` prints).
    Replay {
        /// The recording (gzipped or not).
        file: PathBuf,
        /// [default: tui on a terminal, else report]
        #[arg(long, value_enum)]
        format: Option<ReplayFormat>,
        /// See `trace`.
        #[arg(long, value_name = "MS")]
        hook_budget_ms: Option<u64>,
    },
    /// Summarize a recording: pods and where their time went, the slowest
    /// hooks, latency tables, findings. Reads a `record` file (or a raw
    /// capture made with `trace --record`).
    Report {
        /// The recording [default: a `record` stream on standard input].
        file: Option<PathBuf>,
        /// See `trace`.
        #[arg(long, value_name = "PATH")]
        cri_socket: Option<PathBuf>,
        #[arg(long, value_name = "PATH")]
        nri_socket: Option<PathBuf>,
        #[arg(long, value_name = "MS")]
        hook_budget_ms: Option<u64>,
    },
    /// Why is this pod (stuck in Terminating) not gone? Its teardown in a
    /// recording: the blocker in one sentence with its evidence (a failed
    /// or timed-out CRI call, a plugin hook that failed, a call kubelet
    /// never made), and what this node still holds of its containers.
    Explain {
        /// The pod: namespace/name, name, or sandbox id (or its start).
        pod: String,
        /// The recording: a `record` file (or `tui --observations`,
        /// `trace --observations`), or a raw `trace --record` capture.
        #[arg(long, value_name = "FILE")]
        from: PathBuf,
        #[arg(long, value_enum, default_value = "text")]
        format: LineFormat,
        /// Do not look at this node's processes and cgroups.
        #[arg(long)]
        no_proc: bool,
    },
    /// Check that this node can run nri-trace, and say what to fix.
    Doctor {
        #[arg(long, value_enum, default_value = "text")]
        format: Format,
    },
    /// Attach a program set and hold it (benchmarks: design floors).
    #[command(hide = true)]
    Hold {
        #[arg(long, value_enum)]
        programs: ProgramSet,
        /// Track this pid (the filter then has one entry, as in real use).
        #[arg(long)]
        pid: Option<u32>,
        /// Also attach the sandbox probes (watching --pid's process tree).
        #[arg(long)]
        sandbox: bool,
        #[arg(long)]
        duration: f64,
    },
}

fn main() -> Result<()> {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let cli = Cli::parse();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let cmd = match cli.cmd {
        Some(c) => c,
        // `nri-trace tui` with its defaults, as clap gives them.
        None if std::io::stdout().is_terminal() && std::io::stdin().is_terminal() => {
            Cli::parse_from(["nri-trace", "tui"])
                .cmd
                .expect("`tui` parses to a command")
        }
        None => {
            use clap::CommandFactory;
            Cli::command().print_help()?;
            anyhow::bail!(
                "no command given, and this is not a terminal (the TUI needs one): \
                 choose a command, e.g. `nri-trace trace`"
            );
        }
    };
    rt.block_on(async move {
        match cmd {
            Cmd::Capture(args) => capture(args).await,
            Cmd::Nri {
                socket,
                pids,
                no_plugin_end,
                out,
            } => {
                let a = NriAnalysis::new(vec![socket.clone()]);
                decode(a, out, None, None, "NRI", |probe| {
                    nri_config(&socket, pids, probe, no_plugin_end)
                })
                .await
            }
            Cmd::Cri { socket, out } => {
                decode(CriAnalysis::new(), out, None, None, "CRI", |probe| {
                    cri_config(&socket, probe)
                })
                .await
            }
            Cmd::Trace {
                cri_socket,
                nri_socket,
                no_plugin_end,
                hook_budget_ms,
                metrics_addr,
                observations,
                no_redact,
                out,
            } => {
                let target = trace_target(cri_socket, nri_socket, out.replay.as_deref())?;
                let mut a = TraceAnalysis::new(vec![target.cri.clone()], vec![target.nri.clone()])
                    .with_contract(contract_config(hook_budget_ms));
                let tap = match &observations {
                    Some(path) => {
                        a.tap();
                        Some(record_writer(path, &target, !no_redact)?)
                    }
                    None => None,
                };
                decode(a, out, metrics_addr, tap, "CRI and NRI", |probe| {
                    trace_config(&target, probe, no_plugin_end)
                })
                .await
            }
            Cmd::Record {
                output,
                cri_socket,
                nri_socket,
                no_redact,
                replay,
                no_plugin_end,
                duration,
                probe,
            } => {
                let target = trace_target(cri_socket, nri_socket, replay.as_deref())?;
                let out: Box<dyn Write> = match &output {
                    Some(path) => Box::new(
                        recording::create_private(path)
                            .with_context(|| format!("creating {}", path.display()))?,
                    ),
                    None => Box::new(std::io::stdout().lock()),
                };
                let w = RecordWriter::new(out, &session_info(&target, !no_redact))
                    .context("writing the record file")?;
                match replay {
                    Some(raw) => record_capture(&target, &raw, w),
                    None => {
                        eprintln!(
                            "nri-trace: recording CRI {} and NRI {} to {}",
                            target.cri.display(),
                            target.nri.display(),
                            output
                                .as_ref()
                                .map_or("standard output".into(), |p| p.display().to_string())
                        );
                        record(&target, w, no_plugin_end, duration, &probe).await
                    }
                }
            }
            Cmd::Tui {
                cri_socket,
                nri_socket,
                observations,
                no_redact,
                no_plugin_end,
                hook_budget_ms,
                export_dir,
                probe,
            } => {
                let target = trace_target(cri_socket, nri_socket, None)?;
                let tap = match &observations {
                    Some(path) => Some(record_writer(path, &target, !no_redact)?),
                    None => None,
                };
                let opts = tui::TuiOptions {
                    export_dir,
                    color: None,
                };
                tui_live(
                    target,
                    contract_config(hook_budget_ms),
                    tap,
                    opts,
                    no_plugin_end,
                    &probe,
                )
                .await
            }
            Cmd::Replay {
                file,
                format,
                hook_budget_ms,
            } => {
                let terminal = std::io::stdout().is_terminal() && std::io::stdin().is_terminal();
                let format = format.unwrap_or(if terminal {
                    ReplayFormat::Tui
                } else {
                    ReplayFormat::Report
                });
                replay_records(
                    &file,
                    ReplaySink::new(format),
                    contract_config(hook_budget_ms),
                )
            }
            Cmd::Report {
                file,
                cri_socket,
                nri_socket,
                hook_budget_ms,
            } => {
                let cfg = contract_config(hook_budget_ms);
                match file {
                    Some(f) if !record_file::is_record_file(&f).unwrap_or(false) => replay_capture(
                        &f,
                        (cri_socket, nri_socket),
                        ReplaySink::new(ReplayFormat::Report),
                        cfg,
                    ),
                    Some(f) => replay_records(&f, ReplaySink::new(ReplayFormat::Report), cfg),
                    None => {
                        replay_records(Path::new("-"), ReplaySink::new(ReplayFormat::Report), cfg)
                    }
                }
            }
            Cmd::Explain {
                pod,
                from,
                format,
                no_proc,
            } => replay_records(
                &from,
                ReplaySink::Explain(Box::default(), pod, format, !no_proc),
                ContractConfig::default(),
            ),
            Cmd::Doctor { format } => doctor_cmd(format),
            Cmd::Hold {
                programs,
                pid,
                sandbox,
                duration,
            } => hold(programs, pid, sandbox, duration).await,
        }
    })
}

/// The probes a session needs (`sandbox`: `SessionConfig::sandbox`).
fn options(p: &ProbeArgs, programs: ProgramSet, sandbox: bool) -> EbpfOptions {
    EbpfOptions {
        ring_bytes: p.ring_bytes,
        snap_len: p.snap_len,
        wakeup_bytes: p.wakeup_bytes.unwrap_or(p.ring_bytes / 4),
        programs,
        sandbox,
    }
}

async fn until_signal(duration: Option<f64>) {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM handler");
    let sleep = async {
        match duration {
            Some(s) => tokio::time::sleep(Duration::from_secs_f64(s)).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
        _ = sleep => {}
    }
}

async fn capture(args: CaptureArgs) -> Result<()> {
    let CaptureArgs {
        sockets,
        pids,
        connect_paths,
        socketpair_env,
        format,
        dump_bytes,
        duration,
        probe,
    } = args;
    let backend = EbpfBackend::load(&options(&probe, ProgramSet::Capture, false))?;
    let cfg = SessionConfig {
        sockets,
        pids,
        connect_paths,
        drain_interval: Duration::from_millis(probe.drain_ms.max(1)),
        existing_socketpair_env: socketpair_env.clone(),
        ..Default::default()
    };
    let mut s = session::start(cfg, Box::new(backend)).await?;
    for l in &s.info.listeners {
        eprintln!(
            "nri-trace: capturing {} (pid {}, listening fd {}, {} open connections)",
            l.path.display(),
            l.pid,
            l.listen_fd,
            l.connections.len()
        );
    }
    for p in &s.info.existing_socketpairs {
        eprintln!(
            "nri-trace: capturing pid {} fd {} (its peer, pid {}, has {})",
            p.pid,
            p.fd,
            p.peer_pid,
            socketpair_env.as_deref().unwrap_or_default()
        );
    }
    eprintln!("nri-trace: ready (tracking pids {:?})", s.info.tracked_pids);
    let stdout = std::io::stdout();
    let mut w = std::io::BufWriter::new(stdout.lock());
    let mut counts = output::Counts::default();
    each_event(
        &mut s,
        duration,
        |ev, more_queued| {
            match format {
                Format::Text => output::text(&mut w, &ev, dump_bytes)?,
                Format::Ndjson => output::ndjson(&mut w, &ev)?,
                Format::Count => {
                    counts.add(&ev);
                    return Ok(());
                }
            }
            if !matches!(ev, CaptureEvent::Chunk(_)) || !more_queued {
                w.flush()?;
            }
            Ok(())
        },
        || Ok(()),
    )
    .await?;
    if let Format::Count = format {
        writeln!(w, "{}", serde_json::to_string(&counts)?)?;
    }
    w.flush()?;
    s.stop().await;
    Ok(())
}

/// An analysis `nri` and `cri` print: records as they come, a table at the
/// end.
trait Analyzer {
    type Record;
    fn on_capture(&mut self, ev: &CaptureEvent, out: &mut Vec<Self::Record>);
    fn finish(&mut self, out: &mut Vec<Self::Record>);
    fn write_record(w: &mut dyn Write, r: &Self::Record, format: LineFormat)
        -> std::io::Result<()>;
    fn write_summary(&self, w: &mut dyn Write, format: LineFormat) -> std::io::Result<()>;
    /// Prometheus exposition of the state now, for analyses that have one.
    fn metrics(&self) -> Option<String> {
        None
    }
    /// The observations tapped since the last call (`trace --observations`).
    fn take_observations(&mut self) -> Vec<Observation> {
        Vec::new()
    }
}

/// `Analyzer` for an analysis whose records and summary a `sinks` module
/// prints (`text`, `ndjson`, `summary_text`, `summary_ndjson`).
macro_rules! analyzer {
    ($analysis:ty, $record:ty, $lines:ident) => {
        impl Analyzer for $analysis {
            type Record = $record;
            fn on_capture(&mut self, ev: &CaptureEvent, out: &mut Vec<$record>) {
                <$analysis>::on_capture(self, ev, out)
            }
            fn finish(&mut self, out: &mut Vec<$record>) {
                <$analysis>::finish(self, out)
            }
            fn write_record(
                mut w: &mut dyn Write,
                r: &$record,
                format: LineFormat,
            ) -> std::io::Result<()> {
                match format {
                    LineFormat::Text => $lines::text(&mut w, r),
                    LineFormat::Ndjson => $lines::ndjson(&mut w, r),
                }
            }
            fn write_summary(
                &self,
                mut w: &mut dyn Write,
                format: LineFormat,
            ) -> std::io::Result<()> {
                let s = self.summary();
                match format {
                    LineFormat::Text => {
                        writeln!(w)?;
                        $lines::summary_text(&mut w, &s)
                    }
                    LineFormat::Ndjson => $lines::summary_ndjson(&mut w, &s),
                }
            }
        }
    };
}

analyzer!(NriAnalysis, NriRecord, nri_lines);

impl Analyzer for TraceAnalysis {
    type Record = Record;
    fn on_capture(&mut self, ev: &CaptureEvent, out: &mut Vec<Record>) {
        TraceAnalysis::on_capture(self, ev, out)
    }
    fn finish(&mut self, out: &mut Vec<Record>) {
        TraceAnalysis::finish(self, out)
    }
    fn write_record(mut w: &mut dyn Write, r: &Record, format: LineFormat) -> std::io::Result<()> {
        match format {
            LineFormat::Text => trace_lines::text(&mut w, r),
            LineFormat::Ndjson => trace_lines::ndjson(&mut w, r),
        }
    }
    fn write_summary(&self, mut w: &mut dyn Write, format: LineFormat) -> std::io::Result<()> {
        let (h, m) = (self.hook_summary(), self.method_summary());
        match format {
            LineFormat::Text => {
                writeln!(w)?;
                trace_lines::summary_text(&mut w, &h, &m)
            }
            LineFormat::Ndjson => trace_lines::summary_ndjson(&mut w, &h, &m),
        }
    }
    fn metrics(&self) -> Option<String> {
        Some(metrics::render(self.engine()))
    }
    fn take_observations(&mut self) -> Vec<Observation> {
        self.take_tapped()
    }
}
analyzer!(CriAnalysis, CriRecord, cri_lines);

/// Prints records as they come, and the summary at the end.
struct Printer<A: Analyzer, W: Write> {
    a: A,
    w: W,
    format: LineFormat,
    summary: bool,
    buf: Vec<A::Record>,
    /// Where tapped observations go (`trace --observations`).
    observations: Option<RecordWriter<std::fs::File>>,
}

impl<A: Analyzer> Printer<A, std::io::BufWriter<std::io::StdoutLock<'static>>> {
    fn stdout(a: A, format: LineFormat, summary: bool) -> Self {
        Printer {
            a,
            w: std::io::BufWriter::new(std::io::stdout().lock()),
            format,
            summary,
            buf: Vec::new(),
            observations: None,
        }
    }
}

impl<A: Analyzer, W: Write> Printer<A, W> {
    fn feed(&mut self, ev: &CaptureEvent) -> Result<()> {
        self.a.on_capture(ev, &mut self.buf);
        self.print()
    }

    fn print(&mut self) -> Result<()> {
        for r in self.buf.drain(..) {
            A::write_record(&mut self.w, &r, self.format)?;
        }
        if let Some(o) = self.observations.as_mut() {
            for obs in self.a.take_observations() {
                o.write(obs).context("writing the observations")?;
            }
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        self.w.flush()?;
        if let Some(o) = self.observations.as_mut() {
            o.flush().context("writing the observations")?;
        }
        Ok(())
    }

    fn end(&mut self) -> Result<()> {
        self.a.finish(&mut self.buf);
        self.print()?;
        if let Some(o) = self.observations.take() {
            o.finish().context("writing the observations")?;
        }
        if self.summary {
            self.a.write_summary(&mut self.w, self.format)?;
        }
        self.w.flush()?;
        Ok(())
    }
}

/// Run analysis `a` on a recording (`--replay`) or live, with the session
/// `config` makes, printing as `out` says (and serving metrics on
/// `metrics_addr` while live).
async fn decode<A: Analyzer>(
    a: A,
    out: DecodeArgs,
    metrics_addr: Option<std::net::SocketAddr>,
    observations: Option<RecordWriter<std::fs::File>>,
    what: &str,
    config: impl FnOnce(&ProbeArgs) -> Result<SessionConfig>,
) -> Result<()> {
    let mut p = Printer::stdout(a, out.format, !out.no_summary);
    p.observations = observations;
    match &out.replay {
        Some(file) => replay(&mut p, file),
        None => {
            let cfg = config(&out.probe)?;
            live(&mut p, cfg, &out, metrics_addr, what).await
        }
    }
}

/// Serve `GET /metrics` on `addr` from the returned text, which the caller
/// updates; the server only reads it, so a slow scraper never holds up the
/// trace.
async fn serve_metrics(
    addr: std::net::SocketAddr,
) -> Result<std::sync::Arc<std::sync::Mutex<String>>> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| {
        format!("metrics: cannot listen on {addr} (in use? choose another --metrics-addr)")
    })?;
    eprintln!(
        "nri-trace: metrics on http://{}/metrics",
        listener.local_addr()?
    );
    let text = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let shared = text.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut conn, _)) = listener.accept().await else {
                continue;
            };
            let shared = shared.clone();
            tokio::spawn(async move {
                // Read the request head (bounded, with a timeout): it may
                // come in several segments.
                let mut buf = [0u8; 1024];
                let mut n = 0;
                let read_head = async {
                    while n < buf.len() {
                        match conn.read(&mut buf[n..]).await {
                            Ok(0) | Err(_) => break,
                            Ok(k) => n += k,
                        }
                        if buf[..n].windows(4).any(|w| w == b"\r\n\r\n") {
                            break;
                        }
                    }
                };
                if tokio::time::timeout(Duration::from_secs(5), read_head)
                    .await
                    .is_err()
                {
                    return;
                }
                let req = String::from_utf8_lossy(&buf[..n]);
                let (status, body) = if req.starts_with("GET /metrics") {
                    (
                        "200 OK",
                        shared.lock().map(|t| t.clone()).unwrap_or_default(),
                    )
                } else {
                    ("404 Not Found", "only /metrics is served\n".to_string())
                };
                let head = format!(
                    "HTTP/1.0 {status}\r\nContent-Type: text/plain; version=0.0.4\r\n\
                     Content-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = conn.write_all(head.as_bytes()).await;
                let _ = conn.write_all(body.as_bytes()).await;
            });
        }
    });
    Ok(text)
}

fn replay<A: Analyzer, W: Write>(p: &mut Printer<A, W>, file: &std::path::Path) -> Result<()> {
    let reader =
        recording::open(file).with_context(|| format!("opening recording {}", file.display()))?;
    for ev in reader {
        let ev = ev.with_context(|| format!("reading recording {}", file.display()))?;
        p.feed(&ev)?;
    }
    p.end()
}

/// Trace live with `cfg`, printing through `p` (and recording to `record`).
async fn live<A: Analyzer, W: Write>(
    p: &mut Printer<A, W>,
    cfg: SessionConfig,
    out: &DecodeArgs,
    metrics_addr: Option<std::net::SocketAddr>,
    what: &str,
) -> Result<()> {
    let (record, duration, probe) = (&out.record, out.duration, &out.probe);
    let exposition = match metrics_addr {
        Some(addr) => Some(serve_metrics(addr).await?),
        None => None,
    };
    // Metrics are re-rendered on the periodic tick when something changed.
    let dirty = std::cell::Cell::new(false);
    let mut recorder = match &record {
        Some(path) => Some(recording::RecordingWriter::new(
            recording::create_private(path)
                .with_context(|| format!("creating recording {}", path.display()))?,
        )),
        None => None,
    };
    let backend = EbpfBackend::load(&options(probe, ProgramSet::Capture, cfg.sandbox))?;
    let mut s = session::start(cfg, Box::new(backend)).await?;
    for l in &s.info.listeners {
        eprintln!(
            "nri-trace: tracing {what} on {} (runtime pid {}, {} connections open)",
            l.path.display(),
            l.pid,
            l.connections.len()
        );
    }
    eprintln!("nri-trace: ready (tracking pids {:?})", s.info.tracked_pids);
    let shared = std::cell::RefCell::new(&mut *p);
    each_event(
        &mut s,
        duration,
        |ev, more_queued| {
            if let Some(r) = recorder.as_mut() {
                r.write(&ev).context("writing the recording")?;
            }
            let mut p = shared.borrow_mut();
            p.feed(&ev)?;
            dirty.set(true);
            if !more_queued {
                p.flush()?;
            }
            Ok(())
        },
        || {
            if let (Some(e), true) = (&exposition, dirty.replace(false)) {
                if let Some(text) = shared.borrow().a.metrics() {
                    *e.lock().expect("metrics lock") = text;
                }
            }
            Ok(())
        },
    )
    .await?;
    if let Some(r) = recorder {
        r.finish().context("writing the recording")?;
    }
    p.end()?;
    s.stop().await;
    Ok(())
}

fn nri_config(
    socket: &std::path::Path,
    pids: Vec<u32>,
    probe: &ProbeArgs,
    no_plugin_end: bool,
) -> Result<SessionConfig> {
    let listening = std::fs::metadata(socket).is_ok();
    if !listening && pids.is_empty() {
        anyhow::bail!(
            "NRI socket {} not found: is NRI enabled in the runtime? (containerd 1.7: \
             [plugins.\"io.containerd.nri.v1.nri\"] disable = false; see docs/runtimes.md), \
             or give the socket with --socket",
            socket.display()
        );
    }
    Ok(SessionConfig {
        sockets: if listening {
            vec![socket.to_path_buf()]
        } else {
            vec![]
        },
        pids,
        drain_interval: Duration::from_millis(probe.drain_ms.max(1)),
        // Pre-launched plugins: their socketpair with the runtime, and
        // their name and index (nri pkg/adaptation plugin.go).
        peer_env: vec![ENV_PLUGIN_NAME.into(), ENV_PLUGIN_IDX.into()],
        existing_socketpair_env: Some("NRI_PLUGIN_SOCKET".into()),
        // The plugin's end of each connection times the plugin's own work
        // apart from the runtime's pickup delay (docs/nri.md).
        follow_peer_ends: !no_plugin_end,
        ..Default::default()
    })
}

/// The runtime `trace` and `record` follow.
struct Target {
    cri: PathBuf,
    nri: PathBuf,
    /// The runtime process, when found.
    runtime: Option<(RuntimeKind, u32)>,
}

/// The CRI and NRI sockets `trace` follows: as given, else those of the
/// one runtime running here (or, replaying, the ones the recording names).
fn trace_target(
    cri: Option<PathBuf>,
    nri: Option<PathBuf>,
    replay: Option<&std::path::Path>,
) -> Result<Target> {
    if let (Some(c), Some(n)) = (&cri, &nri) {
        return Ok(Target {
            cri: c.clone(),
            nri: n.clone(),
            runtime: None,
        });
    }
    let found = match replay {
        Some(file) => {
            let mut paths = std::collections::BTreeSet::new();
            for ev in recording::open(file)
                .with_context(|| format!("opening recording {}", file.display()))?
            {
                if let Ok(CaptureEvent::Open(o)) = ev {
                    if let Some(p) = o.socket_path {
                        paths.insert(p.to_string_lossy().into_owned());
                    }
                }
            }
            let paths: Vec<String> = paths.into_iter().collect();
            let kind = if paths.iter().any(|p| p.ends_with("/crio.sock")) {
                RuntimeKind::CriO
            } else {
                RuntimeKind::Containerd
            };
            vec![runtimes::runtime_from(0, kind, &paths)]
        }
        None => runtimes::find_runtimes().context("looking for the container runtime")?,
    };
    let runtime = match found.as_slice() {
        [one] => one,
        [] => anyhow::bail!(
            "no containerd or CRI-O process found: is the runtime running? \
             Give its sockets with --cri-socket and --nri-socket (docs/runtimes.md)"
        ),
        many => anyhow::bail!(
            "{} runtimes found ({}): choose one with --cri-socket and --nri-socket",
            many.len(),
            many.iter()
                .map(|r| format!("{:?} pid {} {:?}", r.kind, r.pid, r.cri_socket))
                .collect::<Vec<_>>()
                .join("; ")
        ),
    };
    let cri = cri.or(runtime.cri_socket.clone()).with_context(|| {
        format!(
            "{:?} (pid {}) serves no CRI socket nri-trace recognizes ({:?}): give --cri-socket",
            runtime.kind, runtime.pid, runtime.listening
        )
    })?;
    let nri = nri.or(runtime.nri_socket.clone()).with_context(|| {
        format!(
            "{:?} (pid {}) serves no NRI socket: is NRI enabled? (containerd 1.7: \
             [plugins.\"io.containerd.nri.v1.nri\"] disable = false; see docs/runtimes.md), \
             or give --nri-socket",
            runtime.kind, runtime.pid
        )
    })?;
    if replay.is_none() {
        eprintln!(
            "nri-trace: runtime {:?} pid {}: CRI {}, NRI {}",
            runtime.kind,
            runtime.pid,
            cri.display(),
            nri.display()
        );
    }
    Ok(Target {
        cri,
        nri,
        runtime: replay.is_none().then_some((runtime.kind, runtime.pid)),
    })
}

/// The session `trace` and `record` run: both sockets of the runtime.
fn trace_config(target: &Target, probe: &ProbeArgs, no_plugin_end: bool) -> Result<SessionConfig> {
    let cri = cri_config(&target.cri, probe)?;
    let mut cfg = nri_config(&target.nri, vec![], probe, no_plugin_end)?;
    cfg.sockets.extend(cri.sockets);
    // kubelet's end of the CRI connections is not followed.
    cfg.no_follow_sockets = vec![target.cri.clone()];
    cfg.sandbox = !probe.no_sandbox;
    Ok(cfg)
}

fn contract_config(hook_budget_ms: Option<u64>) -> ContractConfig {
    ContractConfig {
        hook_budget_ns: hook_budget_ms.map(|ms| ms * 1_000_000),
    }
}

/// A record file on `path` (created 0600: even redacted, it names every
/// pod on the node), opened with its `session` line.
fn record_writer(
    path: &Path,
    target: &Target,
    redact: bool,
) -> Result<RecordWriter<std::fs::File>> {
    let f =
        recording::create_private(path).with_context(|| format!("creating {}", path.display()))?;
    RecordWriter::new(f, &session_info(target, redact))
        .with_context(|| format!("writing {}", path.display()))
}

fn session_info(target: &Target, redact: bool) -> SessionInfo {
    SessionInfo {
        tool: format!("nri-trace {}", env!("CARGO_PKG_VERSION")),
        runtime: target.runtime.map(|(k, _)| {
            match k {
                RuntimeKind::Containerd => "containerd",
                RuntimeKind::CriO => "cri-o",
            }
            .to_string()
        }),
        runtime_pid: target.runtime.map(|(_, pid)| pid),
        cri_socket: target.cri.display().to_string(),
        nri_socket: target.nri.display().to_string(),
        started_unix_ns: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64),
        redacted: redact,
    }
}

/// The live TUI: the capture feeds the TUI's state from a task while the
/// TUI runs on a blocking thread; quitting it stops the capture.
async fn tui_live(
    target: Target,
    cfg: ContractConfig,
    mut tap: Option<RecordWriter<std::fs::File>>,
    opts: tui::TuiOptions,
    no_plugin_end: bool,
    probe: &ProbeArgs,
) -> Result<()> {
    use std::sync::{Arc, Mutex};
    let session_cfg = trace_config(&target, probe, no_plugin_end)?;
    let backend = EbpfBackend::load(&options(probe, ProgramSet::Capture, session_cfg.sandbox))?;
    let mut s = session::start(session_cfg, Box::new(backend)).await?;
    let mut a =
        TraceAnalysis::new(vec![target.cri.clone()], vec![target.nri.clone()]).with_contract(cfg);
    if tap.is_some() {
        a.tap();
    }
    let shared = Arc::new(Mutex::new(tui::TuiState::default()));
    let recording = tap.as_ref().map(|_| "observations".to_string());
    let status = |events_per_s| tui::StatusInfo {
        runtime: target
            .runtime
            .map(|(k, pid)| format!("{k:?} pid {pid}").to_lowercase()),
        cri_sockets: vec![target.cri.display().to_string()],
        nri_sockets: vec![target.nri.display().to_string()],
        source: "live".into(),
        recording: recording.clone(),
        events_per_s,
    };
    shared.lock().expect("fresh lock").set_status(status(None));
    let (quit_tx, mut quit) = tokio::sync::oneshot::channel();
    let ui = {
        let shared = shared.clone();
        tokio::task::spawn_blocking(move || {
            let r = tui::run(shared, opts);
            let _ = quit_tx.send(());
            r
        })
    };
    let mut ticks = tokio::time::interval(Duration::from_millis(500));
    // Capture events per tick over the last 10 s (teardowns wait seconds
    // in silence: one tick alone would swing to 0).
    let mut per_tick: std::collections::VecDeque<u64> = std::collections::VecDeque::new();
    let (mut events, started) = (0u64, std::time::Instant::now());
    let mut buf = Vec::new();
    let write_tap = |a: &mut TraceAnalysis, tap: &mut Option<RecordWriter<std::fs::File>>| {
        if let Some(w) = tap.as_mut() {
            for o in a.take_tapped() {
                w.write(o).context("writing the observations")?;
            }
        }
        anyhow::Ok(())
    };
    loop {
        tokio::select! {
            _ = &mut quit => break,
            _ = ticks.tick() => {
                per_tick.push_back(std::mem::take(&mut events));
                if per_tick.len() > 20 {
                    per_tick.pop_front();
                }
                let secs = (per_tick.len() as f64 * 0.5).min(started.elapsed().as_secs_f64());
                let rate = (per_tick.iter().sum::<u64>() as f64 / secs.max(0.5)) as u64;
                let mut st = tui::lock(&shared);
                st.set_now(session::monotonic_ns());
                st.set_summaries(a.hook_summary(), a.method_summary());
                st.set_status(status(Some(rate)));
                drop(st);
                if let Some(w) = tap.as_mut() {
                    w.flush().context("writing the observations")?;
                }
            }
            ev = s.events.recv() => {
                let Some(ev) = ev else { break };
                events += 1;
                a.on_capture(&ev, &mut buf);
                write_tap(&mut a, &mut tap)?;
                let mut st = tui::lock(&shared);
                if let Some(t) = tui::event_mono_ns(&ev) {
                    st.set_now(t);
                }
                for r in buf.drain(..) {
                    st.on_record(&r);
                }
            }
        }
    }
    s.stop().await;
    a.finish(&mut buf);
    write_tap(&mut a, &mut tap)?;
    if let Some(w) = tap {
        w.finish().context("writing the observations")?;
    }
    ui.await.context("the TUI thread")?.context("the TUI")
}

/// `nri-trace record` live: decode, write observations, no engine.
async fn record(
    target: &Target,
    w: RecordWriter<Box<dyn Write>>,
    no_plugin_end: bool,
    duration: Option<f64>,
    probe: &ProbeArgs,
) -> Result<()> {
    let cfg = trace_config(target, probe, no_plugin_end)?;
    let backend = EbpfBackend::load(&options(probe, ProgramSet::Capture, cfg.sandbox))?;
    let mut s = session::start(cfg, Box::new(backend)).await?;
    eprintln!("nri-trace: ready (tracking pids {:?})", s.info.tracked_pids);
    let rec = std::cell::RefCell::new(Recorder::new(target, w));
    each_event(
        &mut s,
        duration,
        |ev, more_queued| rec.borrow_mut().feed(&ev, more_queued),
        || Ok(()),
    )
    .await?;
    rec.into_inner().finish()?;
    s.stop().await;
    Ok(())
}

/// `nri-trace record --replay`: a raw capture decoded into a record file.
fn record_capture(target: &Target, raw: &Path, w: RecordWriter<Box<dyn Write>>) -> Result<()> {
    let mut rec = Recorder::new(target, w);
    for ev in recording::open(raw).with_context(|| format!("opening {}", raw.display()))? {
        let ev = ev.with_context(|| format!("reading {}", raw.display()))?;
        rec.feed(&ev, true)?;
    }
    rec.finish()
}

/// Capture events decoded into a record file.
struct Recorder {
    decoder: TraceDecoder,
    obs: Vec<Observation>,
    w: RecordWriter<Box<dyn Write>>,
    cri_calls: u64,
    nri_calls: u64,
}

impl Recorder {
    fn new(target: &Target, w: RecordWriter<Box<dyn Write>>) -> Self {
        Recorder {
            decoder: TraceDecoder::new(vec![target.cri.clone()], vec![target.nri.clone()]),
            obs: Vec::new(),
            w,
            cri_calls: 0,
            nri_calls: 0,
        }
    }

    fn feed(&mut self, ev: &CaptureEvent, more_queued: bool) -> Result<()> {
        self.decoder.on_capture(ev, &mut self.obs);
        self.write()?;
        if !more_queued {
            self.w.flush().context("writing the record file")?;
        }
        Ok(())
    }

    fn write(&mut self) -> Result<()> {
        for o in self.obs.drain(..) {
            match &o {
                Observation::CriCall(_) => self.cri_calls += 1,
                Observation::NriCall(_) => self.nri_calls += 1,
                _ => {}
            }
            self.w.write(o).context("writing the record file")?;
        }
        Ok(())
    }

    fn finish(mut self) -> Result<()> {
        self.decoder.finish(&mut self.obs);
        self.write()?;
        eprintln!(
            "nri-trace: recorded {} CRI calls and {} NRI calls",
            self.cri_calls, self.nri_calls
        );
        self.w.finish().context("writing the record file")?;
        Ok(())
    }
}

/// Where replayed records go.
enum ReplaySink {
    Report(ReportState),
    Text,
    Ndjson,
    Tui(Box<tui::TuiState>),
    /// `explain POD`: the teardown log, the pod, the format, and whether
    /// to inspect this node.
    Explain(Box<TeardownLog>, String, LineFormat, bool),
}

impl ReplaySink {
    fn new(format: ReplayFormat) -> Self {
        match format {
            ReplayFormat::Report => ReplaySink::Report(ReportState::default()),
            ReplayFormat::Text => ReplaySink::Text,
            ReplayFormat::Ndjson => ReplaySink::Ndjson,
            ReplayFormat::Tui => ReplaySink::Tui(Box::default()),
        }
    }

    fn take(&mut self, buf: &mut Vec<Record>, mut w: &mut dyn Write) -> Result<()> {
        for r in buf.drain(..) {
            match self {
                ReplaySink::Report(st) => st.take(r),
                ReplaySink::Text => trace_lines::text(&mut w, &r)?,
                ReplaySink::Ndjson => trace_lines::ndjson(&mut w, &r)?,
                ReplaySink::Tui(st) => st.on_record(&r),
                ReplaySink::Explain(log, ..) => log.on_record(&r),
            }
        }
        Ok(())
    }

    /// Capture time reached `mono_ns` (the TUI's ages).
    fn now(&mut self, mono_ns: u64) {
        if let ReplaySink::Tui(st) = self {
            st.set_now(mono_ns);
        }
    }

    /// The end: summaries, and the TUI opened on the whole replay.
    fn end(
        self,
        hooks: Vec<nri_trace::engine::hook_latency::HookSummary>,
        methods: Vec<nri_trace::engine::cri_analysis::MethodSummary>,
        status: tui::StatusInfo,
    ) -> Result<()> {
        let mut w = std::io::BufWriter::new(std::io::stdout().lock());
        match self {
            ReplaySink::Report(st) => {
                report::render(&mut w, &st.model, &st.findings, &hooks, &methods)?
            }
            ReplaySink::Text => {
                writeln!(w)?;
                trace_lines::summary_text(&mut w, &hooks, &methods)?
            }
            ReplaySink::Ndjson => trace_lines::summary_ndjson(&mut w, &hooks, &methods)?,
            ReplaySink::Explain(log, pod, format, inspect) => {
                drop(w);
                return explain(&log, &pod, format, inspect);
            }
            ReplaySink::Tui(mut st) => {
                drop(w);
                st.set_summaries(hooks, methods);
                st.set_status(status);
                let shared = std::sync::Arc::new(std::sync::Mutex::new(*st));
                return tui::run(shared, tui::TuiOptions::default()).context("the TUI");
            }
        }
        w.flush()?;
        Ok(())
    }
}

/// `nri-trace replay` (and `report` of a record file): the observations
/// of `file` ("-": standard input) through the engine, out as `format`; a
/// raw capture recording goes through the decoders first.
fn replay_records(file: &Path, mut sink: ReplaySink, cfg: ContractConfig) -> Result<()> {
    let name = file.display().to_string();
    if file != Path::new("-") && !record_file::is_record_file(file).unwrap_or(false) {
        return replay_capture(file, (None, None), sink, cfg);
    }
    let lines: Box<dyn Iterator<Item = Result<RecordLine, recording::RecordingError>>> =
        if file == Path::new("-") {
            Box::new(recording::RecordingReader::<_, RecordLine>::new(
                std::io::BufReader::new(std::io::stdin()),
            ))
        } else {
            Box::new(record_file::open(file).with_context(|| format!("opening {name}"))?)
        };
    let mut engine = TraceEngine::new(cfg);
    let mut w = std::io::BufWriter::new(std::io::stdout().lock());
    let mut buf = Vec::new();
    let (mut session, mut ended, mut skipped) = (None, false, 0u64);
    for line in lines {
        let line = match line {
            Ok(l) => l,
            Err(e @ recording::RecordingError::Truncated { .. }) => {
                eprintln!("nri-trace: {name}: {e}; replaying what came before");
                break;
            }
            Err(e) => return Err(e).with_context(|| format!("reading {name}")),
        };
        match line {
            RecordLine::Session(s) => session = Some(s),
            RecordLine::Observation(o) => {
                if session.is_none() {
                    anyhow::bail!(
                        "{name} is not a `nri-trace record` file (no session line first)"
                    );
                }
                if let Observation::Clock { now_ns, .. } = &o {
                    sink.now(*now_ns);
                }
                engine.on_observation(o, &mut buf);
                sink.take(&mut buf, &mut w)?;
            }
            RecordLine::SessionEnd(_) => ended = true,
            RecordLine::Unknown(_) => skipped += 1,
        }
    }
    let Some(session) = session else {
        anyhow::bail!("{name} holds no `nri-trace record` session");
    };
    engine.finish(&mut buf);
    sink.take(&mut buf, &mut w)?;
    w.flush()?;
    drop(w);
    if !ended {
        eprintln!("nri-trace: {name} has no session_end line: the recording was cut short");
    }
    if skipped > 0 {
        eprintln!("nri-trace: {name}: {skipped} lines of kinds this build does not know, skipped");
    }
    let status = tui::StatusInfo {
        runtime: session.runtime.clone().map(|r| format!("{r} (recorded)")),
        cri_sockets: vec![session.cri_socket.clone()],
        nri_sockets: vec![session.nri_socket.clone()],
        source: format!("replay {name}"),
        recording: None,
        events_per_s: None,
    };
    sink.end(engine.hook_summary(), engine.method_summary(), status)
}

/// `replay` (and `report`) of a raw capture recording (`trace --record`),
/// on the sockets given or those the recording names.
fn replay_capture(
    file: &Path,
    sockets: (Option<PathBuf>, Option<PathBuf>),
    mut sink: ReplaySink,
    cfg: ContractConfig,
) -> Result<()> {
    let target = trace_target(sockets.0, sockets.1, Some(file))?;
    let mut a =
        TraceAnalysis::new(vec![target.cri.clone()], vec![target.nri.clone()]).with_contract(cfg);
    let mut w = std::io::BufWriter::new(std::io::stdout().lock());
    let mut buf = Vec::new();
    for ev in
        recording::open(file).with_context(|| format!("opening recording {}", file.display()))?
    {
        let ev = ev.with_context(|| format!("reading recording {}", file.display()))?;
        if let Some(t) = tui::event_mono_ns(&ev) {
            sink.now(t);
        }
        a.on_capture(&ev, &mut buf);
        sink.take(&mut buf, &mut w)?;
    }
    a.finish(&mut buf);
    sink.take(&mut buf, &mut w)?;
    w.flush()?;
    drop(w);
    let status = tui::StatusInfo {
        runtime: None,
        cri_sockets: vec![target.cri.display().to_string()],
        nri_sockets: vec![target.nri.display().to_string()],
        source: format!("replay {}", file.display()),
        recording: None,
        events_per_s: None,
    };
    sink.end(a.hook_summary(), a.method_summary(), status)
}

/// `explain`: the pod's teardown, completed with what this node shows of
/// its containers when it is not gone.
fn explain(log: &TeardownLog, pod: &str, format: LineFormat, inspect: bool) -> Result<()> {
    // On the node, "now" is now (waits run up to this moment), when the
    // recording is from this boot: the same wall-minus-monotonic offset.
    let (last, offset) = log.last_seen();
    let now = session::monotonic_ns();
    let same_boot = (offset - session::wall_offset_ns()).abs() < 1_000_000_000;
    let at = if inspect && same_boot && now >= last {
        now
    } else {
        0
    };
    let Some(e) = log.explain(pod, at) else {
        let known = log.pods();
        anyhow::bail!(
            "no call of pod {pod:?} in the recording ({} pods seen{}): give namespace/name, \
             the name, or the sandbox id",
            known.len(),
            if known.is_empty() {
                String::new()
            } else {
                format!(
                    ": {}",
                    known
                        .iter()
                        .take(10)
                        .cloned()
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            }
        );
    };
    let facts: Option<Vec<explain_text::ContainerFacts>> =
        (inspect && e.verdict != nri_trace::engine::teardown::Verdict::Gone).then(|| {
            let signalled = |name: &str| -> Vec<holders::Holder> {
                e.alive_after_kill
                    .iter()
                    .filter(|(_, c)| c == name)
                    .filter_map(|(pid, _)| holders::process(*pid, "sent SIGKILL"))
                    .collect()
            };
            let mut facts: Vec<explain_text::ContainerFacts> = e
                .containers
                .iter()
                .map(|(id, name)| {
                    let rootfs = holders::rootfs_mounts(id);
                    let held = rootfs.iter().flat_map(|r| holders::holding(r)).collect();
                    let (cgroup, processes) = holders::in_cgroup(id);
                    explain_text::ContainerFacts {
                        id: id.clone(),
                        name: name.clone(),
                        rootfs: rootfs.iter().map(|p| p.display().to_string()).collect(),
                        holders: held,
                        cgroup: cgroup.map(|p| p.display().to_string()),
                        processes,
                        signalled: signalled(name),
                    }
                })
                .collect();
            // Signalled processes of no known container (the sandbox's).
            for (_, c) in &e.alive_after_kill {
                if !e.containers.iter().any(|(_, n)| n == c) && !facts.iter().any(|f| &f.name == c)
                {
                    facts.push(explain_text::ContainerFacts {
                        id: String::new(),
                        name: c.clone(),
                        rootfs: vec![],
                        holders: vec![],
                        cgroup: None,
                        processes: vec![],
                        signalled: signalled(c),
                    });
                }
            }
            facts
        });
    let mut w = std::io::BufWriter::new(std::io::stdout().lock());
    match format {
        LineFormat::Text => explain_text::text(&mut w, &e, facts.as_deref())?,
        LineFormat::Ndjson => {
            let mut v = serde_json::to_value(explain_text::Explained {
                explanation: &e,
                node: facts.as_deref(),
            })?;
            // The sentence with the node's facts in it.
            v["sentence"] = explain_text::sentence(&e, facts.as_deref()).into();
            writeln!(w, "{}", serde_json::to_string(&v)?)?;
        }
    }
    w.flush()?;
    Ok(())
}

/// What the report is built from: the pod model and the findings.
#[derive(Default)]
struct ReportState {
    model: PodModel,
    findings: Vec<nri_trace::engine::findings::Violation>,
}

impl ReportState {
    fn take(&mut self, r: Record) {
        self.model.on_record(&r);
        if let Record::Violation(v) = r {
            self.findings.push(v);
        }
    }
}

fn cri_config(socket: &std::path::Path, probe: &ProbeArgs) -> Result<SessionConfig> {
    if std::fs::metadata(socket).is_err() {
        anyhow::bail!(
            "CRI socket {} not found: give the runtime's CRI socket with --socket \
             (containerd: /run/containerd/containerd.sock, CRI-O: /var/run/crio/crio.sock; \
             see docs/runtimes.md)",
            socket.display()
        );
    }
    Ok(SessionConfig {
        sockets: vec![socket.to_path_buf()],
        drain_interval: Duration::from_millis(probe.drain_ms.max(1)),
        ..Default::default()
    })
}

/// Hand every event of the session to `f` until it ends: on SIGINT /
/// SIGTERM or after `duration` the session is asked to flush and stop, and
/// its last events still come. `f` also learns whether more events are
/// already queued (to flush output only when idle).
async fn each_event(
    s: &mut session::Session,
    duration: Option<f64>,
    mut f: impl FnMut(CaptureEvent, bool) -> Result<()>,
    mut tick: impl FnMut() -> Result<()>,
) -> Result<()> {
    let stop = until_signal(duration);
    tokio::pin!(stop);
    let mut stopping = false;
    // For work to do while no event comes (metrics refresh).
    let mut ticks = tokio::time::interval(Duration::from_millis(500));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let ev = tokio::select! {
            _ = &mut stop, if !stopping => { s.stop_signal(); stopping = true; continue; }
            _ = ticks.tick() => { tick()?; continue; }
            ev = s.events.recv() => ev,
        };
        let Some(ev) = ev else { return Ok(()) };
        let more_queued = !s.events.is_empty();
        f(ev, more_queued)?;
    }
}

fn doctor_cmd(format: Format) -> Result<()> {
    let checks = doctor::run();
    let failed = checks.iter().any(|c| c.status == doctor::Status::Fail);
    match format {
        Format::Ndjson => {
            for c in &checks {
                println!("{}", serde_json::to_string(c)?);
            }
        }
        Format::Text | Format::Count => {
            for c in &checks {
                let tag = match c.status {
                    doctor::Status::Ok => "ok  ",
                    doctor::Status::Warn => "warn",
                    doctor::Status::Fail => "FAIL",
                };
                println!("[{tag}] {:<24} {}", c.name, c.detail);
                if !c.fix.is_empty() && c.status != doctor::Status::Ok {
                    println!("       {:<24} fix: {}", "", c.fix);
                }
            }
        }
    }
    if failed {
        std::process::exit(1);
    }
    Ok(())
}

async fn hold(programs: ProgramSet, pid: Option<u32>, sandbox: bool, duration: f64) -> Result<()> {
    use nri_trace::capture::backend::CaptureBackend;
    let mut b = EbpfBackend::load(&EbpfOptions {
        programs,
        sandbox,
        ..Default::default()
    })
    .context("loading programs")?;
    if let Some(p) = pid {
        b.track_process(p)?;
        if sandbox {
            b.watch_tasks(&nri_trace::capture::sandbox::runtime_tree(&[p]))?;
        }
    }
    println!("ready");
    std::io::stdout().flush()?;
    until_signal(Some(duration)).await;
    Ok(())
}
