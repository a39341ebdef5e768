//! nri-rate: the runtime side of NRI at a given rate of calls, for
//! nri-trace's rate benchmark (issue 23 item 4). It listens on an NRI
//! socket as containerd does, starts the lab's `nri-test-plugin`s against
//! it, registers, configures and synchronizes them, then delivers pod and
//! container events at `--rate` calls/s for `--duration` seconds, and prints
//! what it sent and what was answered as one JSON line on stdout.
//!
//! See `nri_trace_lab::nri_runtime` for the wire protocol it follows.

use std::{
    io::BufRead as _,
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};
use clap::Parser;
use nri_trace_lab::nri_runtime::{self, RateOptions};

/// The runtime side of NRI, delivering events to test plugins at a rate.
#[derive(Parser, Debug)]
#[command(name = "nri-rate", version)]
struct Cli {
    /// The NRI socket to serve (a private path, not the node's).
    #[arg(long)]
    socket: PathBuf,
    /// Plugins to start (named rate-1, rate-2, ... with indexes 10, 20, ...).
    #[arg(long, default_value_t = 3)]
    plugins: usize,
    /// The plugin binary [default: nri-test-plugin beside this one].
    #[arg(long)]
    plugin_bin: Option<PathBuf>,
    /// Event calls per second, over all plugins.
    #[arg(long, default_value_t = 10_000.0)]
    rate: f64,
    /// Seconds of paced calls.
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Pod lifecycles in flight at once (containerd has one; see
    /// nri_runtime's docs for why the peer pipelines).
    #[arg(long, default_value_t = 16)]
    in_flight: usize,
    /// Namespace of the pods.
    #[arg(long, default_value = "nri-rate")]
    namespace: String,
    /// Pods told to the plugins in Synchronize.
    #[arg(long, default_value_t = 10)]
    sync_pods: u64,
    /// Write every call and its answer here (NDJSON).
    #[arg(long)]
    calls: Option<PathBuf>,
    /// Directory for the plugins' truth files [default: /dev/null, none].
    #[arg(long)]
    truth_dir: Option<PathBuf>,
    /// Also bind this path as the runtime's CRI socket, never served:
    /// `nri-trace watch` wants a runtime with both sockets. Nothing
    /// connects to it (run watch with --no-cri-state).
    #[arg(long)]
    cri_socket: Option<PathBuf>,
    /// After binding the socket, print `nri-rate: listening` and wait for a
    /// line on stdin before starting the plugins (so that a tracer can
    /// attach to a runtime that already serves its socket).
    #[arg(long)]
    wait_stdin: bool,
}

fn main() {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    if let Err(e) = real_main() {
        eprintln!("nri-rate: {e:#}");
        std::process::exit(1);
    }
}

fn spawn_plugins(cli: &Cli) -> Result<Vec<Child>> {
    let bin = match &cli.plugin_bin {
        Some(b) => b.clone(),
        None => std::env::current_exe()?.with_file_name("nri-test-plugin"),
    };
    if !bin.exists() {
        bail!(
            "{} not found: build it (`cargo build -p nri-trace-lab --bin nri-test-plugin`) \
             or pass --plugin-bin",
            bin.display()
        );
    }
    (1..=cli.plugins)
        .map(|i| {
            let name = format!("rate-{i}");
            let truth = cli.truth_dir.as_ref().map_or_else(
                || PathBuf::from("/dev/null"),
                |d| d.join(format!("{name}.truth.ndjson")),
            );
            Command::new(&bin)
                .arg("--socket")
                .arg(&cli.socket)
                .args(["--name", &name, "--idx", &format!("{}", i * 10)])
                .arg("--truth")
                .arg(truth)
                // Real plugins run under the normal scheduler; the lab's
                // SCHED_FIFO (for its truth timestamps) would preempt the
                // tracer being measured at every call.
                .env("NRI_TEST_PLUGIN_SCHED", "other")
                .env("RUST_LOG", "warn")
                .stdin(Stdio::null())
                .spawn()
                .with_context(|| format!("starting {}", bin.display()))
        })
        .collect()
}

fn real_main() -> Result<()> {
    let cli = Cli::parse();
    if cli.plugins == 0 || cli.plugins > 9 {
        bail!("--plugins must be 1 to 9");
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting tokio")?;
    let opts = RateOptions {
        rate: cli.rate,
        duration: Duration::from_secs_f64(cli.duration),
        in_flight: cli.in_flight,
        namespace: cli.namespace.clone(),
        sync_pods: cli.sync_pods,
        calls_log: cli.calls.clone(),
    };
    let cpu0 = own_cpu_s();
    let t0 = Instant::now();
    let summary = rt.block_on(async {
        let _cri = cli
            .cri_socket
            .as_deref()
            .map(nri_runtime::listen)
            .transpose()?;
        let listener = nri_runtime::listen(&cli.socket)?;
        eprintln!("nri-rate: listening on {}", cli.socket.display());
        if cli.wait_stdin {
            let mut line = String::new();
            std::io::stdin().lock().read_line(&mut line)?;
        }
        let mut children = spawn_plugins(&cli)?;
        let res = nri_runtime::run(listener, cli.plugins, &opts).await;
        // The connections are closed by now (run's plugins dropped): the
        // plugins end on their own.
        let deadline = Instant::now() + Duration::from_secs(10);
        for c in &mut children {
            while c.try_wait()?.is_none() && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            if c.try_wait()?.is_none() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
        res
    })?;
    let cpu = own_cpu_s() - cpu0;
    // The plugins were reaped above: their CPU is in RUSAGE_CHILDREN.
    let plugins_cpu = cpu_s(libc::RUSAGE_CHILDREN);
    let mut v = serde_json::to_value(&summary)?;
    v["type"] = "nri_rate_summary".into();
    v["peer_cpu_s"] = cpu.into();
    v["plugins_cpu_s"] = plugins_cpu.into();
    v["wall_s"] = t0.elapsed().as_secs_f64().into();
    println!("{v}");
    Ok(())
}

/// This process's user + system CPU time, seconds.
fn own_cpu_s() -> f64 {
    cpu_s(libc::RUSAGE_SELF)
}

/// User + system CPU time of `who` (RUSAGE_SELF or RUSAGE_CHILDREN: the
/// reaped children), seconds.
fn cpu_s(who: libc::c_int) -> f64 {
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage fills the struct we own.
    unsafe { libc::getrusage(who, &raw mut ru) };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(ru.ru_utime) + tv(ru.ru_stime)
}
