//! cri-driver: a kubelet-like CRI client for the nri-trace lab.
//!
//! Every CRI call it makes is written to the truth file (one NDJSON
//! `Truth::Cri` record per call, one per try for retried calls). At the end
//! it prints one JSON line on stdout: the scenario's results and a summary
//! of the calls. Logs go to stderr (RUST_LOG, default `info`). Exit status
//! 1 on an unexpected error (after trying to tear down what it started),
//! 2 on a usage error.
//!
//! ```text
//! cri-driver --truth /tmp/t.ndjson lifecycle --pods 2 --containers 1 --netns
//! cri-driver --truth /tmp/t.ndjson retry --deadline-ms 1 --retry-deadline-ms 240000
//! cri-driver --truth /tmp/t.ndjson ignore-sigterm --grace-secs 3
//! cri-driver --truth /tmp/t.ndjson up --name p1 --netns     # {"sandbox_id":..., "container_id":...}
//! cri-driver --truth /tmp/t.ndjson up --name p2 --mount /mnt/f:/hang -- sh -c 'cat /hang/hang'
//! cri-driver --truth /tmp/t.ndjson up --name p3 --volume data   # tmpfs emptyDir at /volumes/data
//! cri-driver --truth /tmp/t.ndjson down --sandbox-id ID
//! cri-driver --truth /tmp/t.ndjson teardown --name p3 --retry-ms 2000   # kubelet-like, retried
//! cri-driver --truth /tmp/t.ndjson mix --pods 2 --pause-file /tmp/go  # warm, {"phase":"paused"}, main
//! ```
//!
//! This file holds the command line, the context every scenario gets
//! (`Ctx`) and the run: connect, run the scenario, print its result.
//! The scenarios are in the files named after them: lifecycle.rs,
//! retry.rs, ignore_sigterm.rs, teardown.rs, mix.rs, and steps.rs (up,
//! stop, remove, down, list); pods.rs starts and tears down the pods they
//! share.

use std::{
    path::{Path, PathBuf},
    process::ExitCode,
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::{anyhow, Context};
use clap::{Args, Parser, Subcommand};
use nri_trace_lab::{
    cri::{self, ContainerSpec, Driver, MountSpec, PodSpec, RetryPolicy},
    truth::TruthWriter,
};
use serde_json::{json, Value};

mod ignore_sigterm;
mod lifecycle;
mod mix;
mod pods;
mod retry;
mod steps;
mod teardown;

use ignore_sigterm::ignore_sigterm;
use lifecycle::lifecycle;
use mix::mix;
use retry::retry;
use steps::{list, sandbox_steps, up};
use teardown::teardown;

#[derive(Parser, Debug)]
#[command(
    name = "cri-driver",
    version,
    about = "A kubelet-like CRI client for the nri-trace lab"
)]
struct Cli {
    /// CRI socket [default: $NRI_TRACE_LAB_DIR/run/containerd.sock, or
    /// run/crio.sock when the lab runs CRI-O; lab dir /var/lib/nri-trace-lab].
    #[arg(long)]
    socket: Option<PathBuf>,
    /// Truth file (NDJSON, appended): one record per CRI call.
    #[arg(long)]
    truth: PathBuf,
    /// kubelet's --runtime-request-timeout: the deadline of every call
    /// (RunPodSandbox gets twice this, StopContainer this plus the grace).
    #[arg(long, default_value_t = 120_000, value_name = "MS")]
    request_timeout_ms: u64,
    /// The client's own timer fires this long after the deadline it sends
    /// (grpc-timeout), so the runtime's deadline fires first instead of
    /// racing the client's cancel (kubelet's client has none).
    #[arg(long, default_value_t = 0, value_name = "MS")]
    client_grace_ms: u64,
    /// Pod log directories go under DIR (as kubelet's /var/log/pods);
    /// without it, log_directory and log_path are left empty and the
    /// runtime discards container output.
    #[arg(long, value_name = "DIR")]
    log_dir: Option<PathBuf>,
    /// First wait before retrying a timed-out RunPodSandbox / CreateContainer
    /// (doubles per retry).
    #[arg(long, default_value_t = 500, value_name = "MS")]
    backoff_ms: u64,
    #[arg(long, default_value_t = 10_000, value_name = "MS")]
    max_backoff_ms: u64,
    /// No retry starts later than this after the first try.
    #[arg(long, default_value_t = 300, value_name = "SECS")]
    retry_budget_secs: u64,
    /// Retry a timed-out CreateContainer with the same attempt until the
    /// budget runs out, even when the runtime keeps its name reserved for a
    /// container an earlier try created (default: create attempt + 1 then,
    /// as kubelet does once its relist shows that container).
    #[arg(long)]
    no_bump_attempt: bool,
    /// kubelet's root directory, where pod volumes go
    /// (`pods/<uid>/volumes/kubernetes.io~empty-dir/<name>`) [default:
    /// $NRI_TRACE_LAB_DIR/kubelet].
    #[arg(long, value_name = "DIR")]
    kubelet_dir: Option<PathBuf>,
    #[command(subcommand)]
    scenario: Scenario,
}

#[derive(Subcommand, Debug)]
enum Scenario {
    /// Full kubelet-like lifecycle of N pods with M containers each.
    Lifecycle(LifecycleArgs),
    /// RunPodSandbox (or CreateContainer) with a short deadline, retried
    /// with the same name and attempt until it succeeds; then tear down.
    Retry(RetryArgs),
    /// A container that ignores SIGTERM: StopContainer takes the grace period.
    IgnoreSigterm(IgnoreSigtermArgs),
    /// RunPodSandbox + one started container; prints their ids.
    #[command(alias = "run")]
    Up(UpArgs),
    /// StopContainer for every container of a sandbox, then StopPodSandbox.
    Stop(SandboxArgs),
    /// RemoveContainer for every container of a sandbox, then RemovePodSandbox.
    Remove(SandboxArgs),
    /// stop + remove.
    Down(SandboxArgs),
    /// Tear a pod down as kubelet's pod worker does, retrying: StopContainer
    /// of each container, StopPodSandbox, unmount the pod's volumes,
    /// RemovePodSandbox; a step that fails (or runs into its deadline) is
    /// tried again after --retry-ms, from that step on.
    Teardown(TeardownArgs),
    /// ListPodSandbox (all pods the runtime knows).
    List,
    /// A kubelet-like call mix in two phases on one connection, "warm" and
    /// "main", optionally paused in between (for a tracer that attaches
    /// late, to a connection whose HPACK tables it never saw filled).
    Mix(MixArgs),
}

#[derive(Args, Debug, Clone)]
struct PodArgs {
    /// Pod namespace (CRI metadata, not a Linux namespace).
    #[arg(long, default_value = "nri-trace")]
    namespace: String,
    /// Own network namespace on the lab's bridge CNI network (default:
    /// host network).
    #[arg(long)]
    netns: bool,
    /// Share the PID namespace of the pod (pause is PID 1). Default:
    /// one per container, as kubelet without shareProcessNamespace.
    #[arg(long)]
    share_pid: bool,
    /// Sandbox attempt.
    #[arg(long, default_value_t = 0)]
    attempt: u32,
    /// Extra pod label K=V (repeatable).
    #[arg(long = "label", value_parser = parse_kv)]
    labels: Vec<(String, String)>,
    /// Extra pod annotation K=V (repeatable).
    #[arg(long = "annotation", value_parser = parse_kv)]
    annotations: Vec<(String, String)>,
}

#[derive(Args, Debug, Clone)]
struct ContainerArgs {
    #[arg(long, default_value = cri::BUSYBOX_IMAGE)]
    image: String,
    /// Environment variable K=V (repeatable).
    #[arg(long = "env", value_parser = parse_kv)]
    env: Vec<(String, String)>,
    /// Bind-mount host directory HOST at CONTAINER (a CRI Mount, as a
    /// hostPath volume; recursive, private, read-write; repeatable).
    #[arg(long = "mount", value_name = "HOST:CONTAINER", value_parser = MountSpec::parse)]
    mounts: Vec<MountSpec>,
    /// Command of the containers [default: sleep 3600].
    #[arg(last = true, value_name = "COMMAND")]
    command: Vec<String>,
}

#[derive(Args, Debug)]
struct LifecycleArgs {
    #[arg(long, default_value_t = 1)]
    pods: usize,
    #[arg(long, default_value_t = 1)]
    containers: usize,
    /// How long the containers run before they are stopped.
    #[arg(long, default_value_t = 0.0, value_name = "SECS")]
    run_secs: f64,
    /// StopContainer timeout (grace period before SIGKILL).
    #[arg(long, default_value_t = 2)]
    grace_secs: i64,
    /// Pod names are PREFIX-<i>.
    #[arg(long, default_value = "lc")]
    prefix: String,
    /// Pods in flight at once.
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
    #[command(flatten)]
    pod: PodArgs,
    #[command(flatten)]
    container: ContainerArgs,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    /// RunPodSandbox gets the short deadline.
    Sandbox,
    /// CreateContainer gets the short deadline (RunPodSandbox the normal one).
    Container,
}

#[derive(Args, Debug)]
struct RetryArgs {
    /// Deadline of the first try.
    #[arg(long, value_name = "MS")]
    deadline_ms: u64,
    /// Deadline of the retries [default: the same as the first, as kubelet].
    #[arg(long, value_name = "MS")]
    retry_deadline_ms: Option<u64>,
    #[arg(long, value_enum, default_value_t = Stage::Sandbox)]
    stage: Stage,
    #[arg(long, default_value = "retry-0")]
    name: String,
    #[arg(long, default_value_t = 2)]
    grace_secs: i64,
    #[command(flatten)]
    pod: PodArgs,
    #[command(flatten)]
    container: ContainerArgs,
}

#[derive(Args, Debug)]
struct IgnoreSigtermArgs {
    #[arg(long, default_value_t = 5)]
    grace_secs: i64,
    /// How long the container runs before StopContainer (its shell must
    /// have set the trap by then).
    #[arg(long, default_value_t = 0.5, value_name = "SECS")]
    run_secs: f64,
    #[arg(long, default_value = "ignore-sigterm-0")]
    name: String,
    #[command(flatten)]
    pod: PodArgs,
}

#[derive(Args, Debug)]
struct UpArgs {
    #[arg(long)]
    name: String,
    /// Pod uid [default: a random UUID].
    #[arg(long)]
    uid: Option<String>,
    #[arg(long, default_value = "main")]
    container_name: String,
    /// A pod volume NAME, as kubelet's emptyDir with medium Memory: a tmpfs
    /// mounted at <kubelet dir>/pods/<uid>/volumes/kubernetes.io~empty-dir/
    /// NAME before RunPodSandbox, given to the container at /volumes/NAME,
    /// unmounted and removed by `down` / `teardown` (repeatable).
    #[arg(long = "volume", value_name = "NAME", value_parser = parse_volume_name)]
    volumes: Vec<String>,
    /// Do not poll ContainerStatus until the container runs.
    #[arg(long)]
    no_wait: bool,
    #[command(flatten)]
    pod: PodArgs,
    #[command(flatten)]
    container: ContainerArgs,
}

#[derive(Args, Debug)]
struct MixArgs {
    /// Pods per phase, one after the other (one busybox container each).
    #[arg(long, default_value_t = 1)]
    pods: usize,
    /// After the warm phase, print {"phase":"paused"} and wait (polling
    /// every 20 ms, 10 min at most) until FILE exists, then run the main
    /// phase. Without it the phases run back to back.
    #[arg(long, value_name = "FILE")]
    pause_file: Option<PathBuf>,
    /// Pod names are PREFIX-<phase>-<i> (phase: warm, main).
    #[arg(long, default_value = "mix")]
    prefix: String,
    #[command(flatten)]
    pod: PodArgs,
}

#[derive(Args, Debug)]
struct TeardownArgs {
    /// The pod's name (CRI metadata; its newest sandbox).
    #[arg(
        long,
        required_unless_present = "sandbox_id",
        conflicts_with = "sandbox_id"
    )]
    name: Option<String>,
    /// The pod's namespace (with --name).
    #[arg(long, default_value = "nri-trace")]
    namespace: String,
    #[arg(long)]
    sandbox_id: Option<String>,
    /// Wait between a failed step and its next try (kubelet's pod worker
    /// syncs a terminating pod again within a few seconds).
    #[arg(long, default_value_t = 2000, value_name = "MS")]
    retry_ms: u64,
    /// Give up (exit 1) when the pod is not removed after MS; 0: keep
    /// trying until it is, or until killed.
    #[arg(long, default_value_t = 0, value_name = "MS")]
    for_ms: u64,
    /// StopContainer timeout (grace period before SIGKILL).
    #[arg(long, default_value_t = 2)]
    grace_secs: i64,
}

#[derive(Args, Debug)]
struct SandboxArgs {
    #[arg(long)]
    sandbox_id: String,
    /// StopContainer timeout (stop and down).
    #[arg(long, default_value_t = 2)]
    grace_secs: i64,
}

/// A volume name: a DNS-1123 label, as Kubernetes requires.
fn parse_volume_name(s: &str) -> Result<String, String> {
    let ok = !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-');
    if ok {
        Ok(s.to_owned())
    } else {
        Err(format!(
            "volume name {s:?} is not a DNS-1123 label (a-z, 0-9, -)"
        ))
    }
}

fn parse_kv(s: &str) -> Result<(String, String), String> {
    let (k, v) = s
        .split_once('=')
        .ok_or_else(|| format!("expected K=V, got {s:?}"))?;
    if k.is_empty() {
        return Err(format!("empty key in {s:?}"));
    }
    Ok((k.to_owned(), v.to_owned()))
}

struct Ctx {
    driver: Driver,
    policy: RetryPolicy,
    log_dir: Option<PathBuf>,
    /// kubelet's root directory (pod volumes).
    kubelet_dir: PathBuf,
}

impl Ctx {
    fn pod_spec(&self, name: String, a: &PodArgs) -> PodSpec {
        let mut p = PodSpec::new(name, a.namespace.clone(), !a.netns);
        p.share_pid = a.share_pid;
        p.attempt = a.attempt;
        p.labels.extend(a.labels.iter().cloned());
        p.annotations.extend(a.annotations.iter().cloned());
        p.with_log_root(self.log_dir.as_deref())
    }
}

fn container_spec(name: String, a: &ContainerArgs) -> ContainerSpec {
    let mut c = ContainerSpec::new(name);
    c.image.clone_from(&a.image);
    if !a.command.is_empty() {
        c.command.clone_from(&a.command);
    }
    c.env.clone_from(&a.env);
    c.mounts.clone_from(&a.mounts);
    c
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info"))
        .format_timestamp_millis()
        .init();
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cri-driver: error: cannot start the tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    rt.block_on(run(cli))
}

async fn run(cli: Cli) -> ExitCode {
    let t0 = Instant::now();
    let scenario = scenario_name(&cli.scenario);
    let socket = cli.socket.clone().unwrap_or_else(cri::default_socket);
    let setup = async {
        if let Some(d) = &cli.log_dir {
            std::fs::create_dir_all(d)
                .with_context(|| format!("creating log dir {}", d.display()))?;
        }
        let truth = TruthWriter::append(&cli.truth)
            .with_context(|| format!("opening truth file {}", cli.truth.display()))?;
        let driver = Driver::connect(
            &socket,
            truth,
            Duration::from_millis(cli.request_timeout_ms),
        )
        .await
        .map_err(|e| anyhow!("{e} (is the lab up? bash lab/lab.sh up)"))?
        .with_client_grace(Duration::from_millis(cli.client_grace_ms));
        let v = driver.version().await?;
        log::info!(
            "connected to {} {} (CRI {}) on {}",
            v.runtime_name,
            v.runtime_version,
            v.runtime_api_version,
            socket.display()
        );
        anyhow::Ok(driver)
    };
    let driver = match setup.await {
        Ok(d) => d,
        Err(e) => {
            eprintln!("cri-driver: error: {e:#}");
            print_json(&json!({"scenario": scenario, "ok": false, "error": format!("{e:#}")}));
            return ExitCode::FAILURE;
        }
    };
    let ctx = Arc::new(Ctx {
        driver: driver.clone(),
        policy: RetryPolicy {
            initial_backoff: Duration::from_millis(cli.backoff_ms),
            max_backoff: Duration::from_millis(cli.max_backoff_ms.max(cli.backoff_ms)),
            budget: Duration::from_secs(cli.retry_budget_secs),
            retry_deadline: None,
            bump_attempt_on_orphan: !cli.no_bump_attempt,
        },
        log_dir: cli.log_dir.clone(),
        kubelet_dir: cli.kubelet_dir.clone().unwrap_or_else(|| {
            // The socket is <lab dir>/run/<runtime's>.sock.
            socket
                .parent()
                .and_then(Path::parent)
                .map_or_else(|| PathBuf::from(cri::DEFAULT_LAB_DIR), Path::to_path_buf)
                .join("kubelet")
        }),
    });
    let res = match cli.scenario {
        Scenario::Lifecycle(a) => lifecycle(ctx, a).await,
        Scenario::Retry(a) => Box::pin(retry(ctx, a)).await,
        Scenario::IgnoreSigterm(a) => Box::pin(ignore_sigterm(ctx, a)).await,
        Scenario::Up(a) => Box::pin(up(ctx, a)).await,
        Scenario::Stop(a) => sandbox_steps(ctx, a, true, false).await,
        Scenario::Remove(a) => sandbox_steps(ctx, a, false, true).await,
        Scenario::Down(a) => sandbox_steps(ctx, a, true, true).await,
        Scenario::Teardown(a) => Box::pin(teardown(ctx, a)).await,
        Scenario::List => list(ctx).await,
        Scenario::Mix(a) => Box::pin(mix(ctx, a)).await,
    };
    let summary = driver.summary();
    let (mut out, err) = match res {
        Ok(v) => (v, None),
        Err((v, e)) => (v, Some(e)),
    };
    if summary.truth_write_errors > 0 && err.is_none() {
        out["error"] = json!(format!(
            "{} truth record(s) could not be written",
            summary.truth_write_errors
        ));
    }
    let ok = err.is_none() && summary.truth_write_errors == 0;
    let mut top = json!({
        "scenario": scenario,
        "ok": ok,
        "wall_ms": ms(t0.elapsed()),
        "calls": summary.calls,
        "failures": summary.failures,
        "deadline_exceeded": summary.deadline_exceeded,
        "retries": summary.retries,
        "methods": summary.methods,
    });
    if let Some(e) = &err {
        eprintln!("cri-driver: error: {e:#}");
        top["error"] = json!(format!("{e:#}"));
    }
    if let (Value::Object(top), Value::Object(extra)) = (&mut top, out) {
        for (k, v) in extra {
            top.entry(k).or_insert(v);
        }
    }
    print_json(&top);
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn scenario_name(s: &Scenario) -> &'static str {
    match s {
        Scenario::Lifecycle(_) => "lifecycle",
        Scenario::Retry(_) => "retry",
        Scenario::IgnoreSigterm(_) => "ignore-sigterm",
        Scenario::Up(_) => "up",
        Scenario::Stop(_) => "stop",
        Scenario::Remove(_) => "remove",
        Scenario::Down(_) => "down",
        Scenario::Teardown(_) => "teardown",
        Scenario::List => "list",
        Scenario::Mix(_) => "mix",
    }
}

fn print_json(v: &Value) {
    println!(
        "{}",
        serde_json::to_string(v).unwrap_or_else(|_| "{}".into())
    );
}

/// A scenario's result: its JSON fields, or (partial fields, error).
type ScenarioResult = Result<Value, (Value, anyhow::Error)>;

fn fail(v: Value, e: impl Into<anyhow::Error>) -> ScenarioResult {
    Err((v, e.into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mix_cli() {
        let cli = Cli::try_parse_from([
            "cri-driver",
            "--truth",
            "/tmp/t",
            "mix",
            "--pods",
            "2",
            "--pause-file",
            "/tmp/go",
        ])
        .unwrap();
        match cli.scenario {
            Scenario::Mix(a) => {
                assert_eq!(a.pods, 2);
                assert_eq!(a.prefix, "mix");
                assert_eq!(a.pause_file.as_deref(), Some(Path::new("/tmp/go")));
                assert!(!a.pod.netns);
            }
            s => panic!("parsed as {s:?}"),
        }
    }

    #[test]
    fn up_with_mount_and_command() {
        let cli = Cli::try_parse_from([
            "cri-driver",
            "--truth",
            "/tmp/t",
            "up",
            "--name",
            "u",
            "--mount",
            "/var/lib/l/fuse:/hang",
            "--",
            "sh",
            "-c",
            "cat /hang/hang; sleep 3600",
        ])
        .unwrap();
        match cli.scenario {
            Scenario::Up(a) => {
                let c = container_spec("main".into(), &a.container);
                assert_eq!(c.command, ["sh", "-c", "cat /hang/hang; sleep 3600"]);
                assert_eq!(
                    c.mounts,
                    [MountSpec {
                        host_path: "/var/lib/l/fuse".into(),
                        container_path: "/hang".into()
                    }]
                );
            }
            s => panic!("parsed as {s:?}"),
        }
        assert!(Cli::try_parse_from([
            "cri-driver",
            "--truth",
            "/t",
            "up",
            "--name",
            "u",
            "--mount",
            "x"
        ])
        .is_err());
    }

    #[test]
    fn teardown_and_volume_cli() {
        let cli = Cli::try_parse_from([
            "cri-driver",
            "--truth",
            "/t",
            "teardown",
            "--name",
            "p",
            "--retry-ms",
            "500",
        ])
        .unwrap();
        match cli.scenario {
            Scenario::Teardown(a) => {
                assert_eq!(a.name.as_deref(), Some("p"));
                assert_eq!(a.namespace, "nri-trace");
                assert_eq!((a.retry_ms, a.for_ms, a.grace_secs), (500, 0, 2));
            }
            s => panic!("parsed as {s:?}"),
        }
        // One of --name and --sandbox-id, not both.
        assert!(Cli::try_parse_from(["cri-driver", "--truth", "/t", "teardown"]).is_err());
        assert!(Cli::try_parse_from([
            "cri-driver",
            "--truth",
            "/t",
            "teardown",
            "--name",
            "p",
            "--sandbox-id",
            "x",
        ])
        .is_err());
        let cli = Cli::try_parse_from([
            "cri-driver",
            "--truth",
            "/t",
            "up",
            "--name",
            "u",
            "--volume",
            "data",
        ])
        .unwrap();
        match cli.scenario {
            Scenario::Up(a) => assert_eq!(a.volumes, ["data"]),
            s => panic!("parsed as {s:?}"),
        }
        for bad in ["", "Data", "a/b", "-a", "a-"] {
            assert!(parse_volume_name(bad).is_err(), "{bad:?}");
        }
    }
}
