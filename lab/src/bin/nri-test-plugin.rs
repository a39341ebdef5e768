//! nri-test-plugin: a fault-injecting NRI plugin for the lab.
//!
//! See `nri-test-plugin --help` and `nri_trace_lab::nri_plugin`.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Parser;
use nri_trace_lab::nri_plugin::{
    config::{ActionSpec, EventList},
    run, PluginConfig, PluginOptions, Target,
};

const AFTER_HELP: &str = "\
ACTIONS (--on TARGET=ACTION, repeatable; TARGET is an event name or
CONFIGURE, SYNCHRONIZE, SHUTDOWN):
  ok              answer at once (the default)
  delay:MS        sleep MS milliseconds, then answer
  error:MESSAGE   answer with status UNKNOWN (2) and MESSAGE
  hang            never answer; keep the connection until the runtime closes it
  crash           exit with status 3 without answering

EVENTS: RUN_POD_SANDBOX STOP_POD_SANDBOX REMOVE_POD_SANDBOX CREATE_CONTAINER
  POST_CREATE_CONTAINER START_CONTAINER POST_START_CONTAINER UPDATE_CONTAINER
  POST_UPDATE_CONTAINER STOP_CONTAINER REMOVE_CONTAINER (any case, - or _),
  or all, pod, container, none. Default: all (mask 0x7ff). The runtime reads
  mask 0 as all events.

CONFIG, later sources winning: <argv0>.json beside the executable, the
  environment variable NRI_TEST_PLUGIN_CONFIG, --config, the other options,
  and finally (events and actions only) the config string the runtime sends
  in Configure (containerd's plugin_config_path/NN-name.conf). JSON:
  {\"name\":\"slow\",\"idx\":\"10\",\"truth\":\"/tmp/t.ndjson\",\"socket\":\"...\",
   \"events\":\"all\",\"on\":{\"RUN_POD_SANDBOX\":\"delay:300\",
   \"STOP_POD_SANDBOX\":{\"kind\":\"error\",\"message\":\"boom\"}}}

PRE-LAUNCHED: when NRI_PLUGIN_SOCKET is set and no --socket is given, the
  plugin uses that fd (the runtime's socketpair end) and the name and index
  in NRI_PLUGIN_NAME / NRI_PLUGIN_IDX. containerd runs $plugin_path/NN-name
  with no arguments, so install either a wrapper script NN-name that execs
  this binary with options, or this binary as NN-name with NN-name.json
  (mode 0644) beside it. In the lab, plugin_path is
  $NRI_TRACE_LAB_DIR/nri/plugins; install before `lab.sh up`.

The plugin exits 0 once the runtime closes the connection (recorded as
Disconnected in the truth file), 1 on a setup or registration error.";

/// A fault-injecting NRI plugin that records what it receives and answers.
#[derive(Parser, Debug)]
#[command(name = "nri-test-plugin", version, after_help = AFTER_HELP)]
struct Cli {
    /// Plugin name (external plugins; pre-launched ones get NRI_PLUGIN_NAME).
    #[arg(long)]
    name: Option<String>,
    /// Plugin index, two digits (plugins are called in index order).
    #[arg(long)]
    idx: Option<String>,
    /// Ground-truth file (NDJSON, appended, flushed per line).
    #[arg(long)]
    truth: Option<PathBuf>,
    /// NRI socket to connect to [default: $NRI_TRACE_LAB_DIR/run/nri.sock].
    #[arg(long)]
    socket: Option<PathBuf>,
    /// Config as JSON text, or @FILE.
    #[arg(long)]
    config: Option<String>,
    /// Events to subscribe to, comma-separated (see EVENTS).
    #[arg(long)]
    events: Option<String>,
    /// Fault for one event or request: TARGET=ACTION (see ACTIONS).
    #[arg(long = "on", value_name = "TARGET=ACTION")]
    on: Vec<String>,
    /// Print the resolved configuration and exit.
    #[arg(long)]
    print_config: bool,
}

fn load() -> Result<(PluginConfig, bool)> {
    let cli = Cli::parse();
    let mut cfg = PluginConfig::default();

    // 1. <argv0>.json (a pre-launched plugin installed as NN-name).
    let mut beside = vec![];
    if let Some(a0) = std::env::args_os().next() {
        beside.push(PathBuf::from(format!("{}.json", a0.to_string_lossy())));
    }
    if let Ok(exe) = std::env::current_exe() {
        beside.push(PathBuf::from(format!("{}.json", exe.display())));
    }
    if let Some(p) = beside.into_iter().find(|p| p.is_file()) {
        let text =
            std::fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))?;
        cfg.merge(PluginConfig::from_json(&text).with_context(|| format!("in {}", p.display()))?);
    }
    // 2. environment, 3. --config.
    if let Ok(v) = std::env::var("NRI_TEST_PLUGIN_CONFIG") {
        if !v.trim().is_empty() {
            cfg.merge(PluginConfig::parse_arg(&v).context("in NRI_TEST_PLUGIN_CONFIG")?);
        }
    }
    if let Some(c) = &cli.config {
        cfg.merge(PluginConfig::parse_arg(c).context("in --config")?);
    }
    // 4. options.
    let mut over = PluginConfig {
        name: cli.name,
        idx: cli.idx,
        truth: cli.truth,
        socket: cli.socket,
        events: cli.events.map(EventList::Csv),
        ..Default::default()
    };
    for spec in &cli.on {
        let (t, a) = spec
            .split_once('=')
            .with_context(|| format!("--on {spec:?}: want TARGET=ACTION"))?;
        Target::parse(t)?; // early, with a clear message
        over.on
            .insert(t.trim().to_string(), ActionSpec::Short(a.to_string()));
    }
    cfg.merge(over);
    Ok((cfg, cli.print_config))
}

fn main() {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info"))
        .format_timestamp_micros()
        .init();
    let code = match real_main() {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("nri-test-plugin: {e:#}");
            1
        }
    };
    std::process::exit(code);
}

/// Ground-truth timestamps are taken right after the socket read and write
/// syscalls; a CFS preemption between the syscall and the clock read (ms on
/// a loaded 2-core VM while runc and shims run) would put scheduling noise
/// into the truth. SCHED_FIFO (priority 10, inherited by the runtime's
/// threads, which are spawned after this) keeps it out. The plugin never
/// spins: delays and hangs sleep. Without the privilege it runs as before.
///
/// `NRI_TEST_PLUGIN_SCHED=other` keeps the normal scheduler: the rate
/// benchmark (bin/nri-rate) measures the tracer's CPU, and a real plugin is
/// not SCHED_FIFO.
fn realtime_priority() {
    if std::env::var("NRI_TEST_PLUGIN_SCHED").as_deref() == Ok("other") {
        return;
    }
    let p = libc::sched_param { sched_priority: 10 };
    // SAFETY: plain syscall on the calling thread with a valid param.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &raw const p) } != 0 {
        log::warn!(
            "SCHED_FIFO not available ({}): truth timestamps may carry scheduling noise",
            std::io::Error::last_os_error()
        );
    }
}

fn real_main() -> Result<()> {
    let (cfg, print) = load()?;
    let opts = PluginOptions::resolve(cfg)?;
    if print {
        println!(
            "{}",
            serde_json::json!({
                "name": opts.name, "idx": opts.idx, "truth": opts.truth,
                "endpoint": format!("{:?}", opts.endpoint),
                "config": opts.config,
                "events_mask": format!("{:#x}", opts.config.behaviour()?.mask),
            })
        );
        return Ok(());
    }
    realtime_priority();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting tokio")?;
    let reason = rt.block_on(run(opts))?;
    log::info!("exiting: {reason}");
    // Pending hangs and delays are abandoned here, not awaited.
    rt.shutdown_background();
    Ok(())
}
