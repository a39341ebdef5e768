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

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::ExitCode,
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use nri_trace_lab::{
    cri::{self, api, ContainerSpec, Driver, MountSpec, PodSpec, RetryPolicy},
    truth::{self, ContainerRef, Outcome, PodRef, TruthWriter},
    volume,
};
use serde_json::{json, Value};

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
fn parse_volume_name(s: &str) -> std::result::Result<String, String> {
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

fn parse_kv(s: &str) -> std::result::Result<(String, String), String> {
    let (k, v) = s
        .split_once('=')
        .ok_or_else(|| format!("expected K=V, got {s:?}"))?;
    if k.is_empty() {
        return Err(format!("empty key in {s:?}"));
    }
    Ok((k.to_owned(), v.to_owned()))
}

/// How long a container may take to reach RUNNING after StartContainer.
const RUNNING_WITHIN: Duration = Duration::from_secs(30);

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
        .map_err(|e| anyhow!("{e} (is the lab up? bash lab/lab.sh up)"))?;
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
type ScenarioResult = std::result::Result<Value, (Value, anyhow::Error)>;

fn fail(v: Value, e: impl Into<anyhow::Error>) -> ScenarioResult {
    Err((v, e.into()))
}

// ------------------------------------------------------------------ pods

/// A pod the driver started, for teardown.
struct Started {
    pod: PodRef,
    containers: Vec<ContainerRef>,
}

/// RunPodSandbox, then CreateContainer + StartContainer per container (as
/// kubelet's SyncPod), then ContainerStatus until each runs. On an error
/// after the sandbox exists, `started` still has what to tear down.
async fn start_pod(
    ctx: &Ctx,
    spec: &PodSpec,
    containers: &[ContainerSpec],
    wait_running: bool,
    started: &mut Option<Started>,
) -> Result<()> {
    let sid = ctx.driver.run_pod_sandbox(spec, &ctx.policy).await?;
    let pod = spec.pod_ref(Some(&sid));
    *started = Some(Started {
        pod: pod.clone(),
        containers: vec![],
    });
    for c in containers {
        let cref = ctx
            .driver
            .create_container(spec, &sid, c, &ctx.policy)
            .await?;
        if let Some(s) = started.as_mut() {
            s.containers.push(cref.clone());
        }
        ctx.driver.start_container(Some(&pod), &cref).await?;
    }
    if wait_running {
        let crefs = started
            .as_ref()
            .map(|s| s.containers.clone())
            .unwrap_or_default();
        for c in &crefs {
            ctx.driver
                .wait_container_running(Some(&pod), c, RUNNING_WITHIN)
                .await?;
        }
    }
    Ok(())
}

/// StopContainer for every container (in parallel, as kubelet's
/// killContainersWithSyncResult), then StopPodSandbox.
async fn stop_pod(ctx: &Ctx, s: &Started, grace_secs: i64) -> Result<()> {
    let mut set = tokio::task::JoinSet::new();
    for c in s.containers.clone() {
        let d = ctx.driver.clone();
        let pod = s.pod.clone();
        set.spawn(async move { d.stop_container(Some(&pod), &c, grace_secs).await });
    }
    let mut first_err = None;
    while let Some(r) = set.join_next().await {
        match r {
            Ok(Ok(())) => {}
            Ok(Err(e)) => first_err = first_err.or(Some(anyhow::Error::from(e))),
            Err(e) => first_err = first_err.or(Some(anyhow!("stop task failed: {e}"))),
        }
    }
    if let Some(e) = first_err {
        return Err(e);
    }
    ctx.driver.stop_pod_sandbox(&s.pod).await?;
    Ok(())
}

/// RemoveContainer for every container, then RemovePodSandbox.
async fn remove_pod(ctx: &Ctx, s: &Started) -> Result<()> {
    for c in &s.containers {
        ctx.driver.remove_container(Some(&s.pod), c).await?;
    }
    ctx.driver.remove_pod_sandbox(&s.pod).await?;
    Ok(())
}

/// After an error: stop and remove the sandbox (the runtime removes its
/// containers with it), ignoring further errors.
async fn cleanup(ctx: &Ctx, s: &Started) {
    ctx.driver
        .note(format!("cleanup of pod {} after an error", s.pod.name));
    if let Err(e) = ctx.driver.stop_pod_sandbox(&s.pod).await {
        log::warn!("cleanup: {e}");
    }
    if let Err(e) = ctx.driver.remove_pod_sandbox(&s.pod).await {
        log::warn!("cleanup: {e}");
    }
}

// ------------------------------------------------------------------ lifecycle

async fn one_lifecycle(
    ctx: Arc<Ctx>,
    spec: PodSpec,
    containers: Vec<ContainerSpec>,
    run: Duration,
    grace: i64,
) -> Value {
    let t0 = Instant::now();
    let mut started = None;
    let mut stop_ms = None;
    let res = async {
        start_pod(&ctx, &spec, &containers, true, &mut started).await?;
        let s = started.as_ref().ok_or_else(|| anyhow!("no sandbox"))?;
        tokio::time::sleep(run).await;
        let t = Instant::now();
        stop_pod(&ctx, s, grace).await?;
        stop_ms = Some(ms(t.elapsed()));
        remove_pod(&ctx, s).await
    }
    .await;
    if res.is_err() {
        if let Some(s) = &started {
            cleanup(&ctx, s).await;
        }
    }
    json!({
        "name": spec.name,
        "uid": spec.uid,
        "sandbox_id": started.as_ref().and_then(|s| s.pod.sandbox_id.clone()),
        "containers": started.as_ref().map(|s| s.containers.iter().filter_map(|c| c.id.clone()).collect::<Vec<_>>()),
        "ok": res.is_ok(),
        "ms": ms(t0.elapsed()),
        "stop_ms": stop_ms,
        "error": res.err().map(|e| format!("{e:#}")),
    })
}

async fn lifecycle(ctx: Arc<Ctx>, a: LifecycleArgs) -> ScenarioResult {
    if a.pods == 0 {
        return fail(json!({}), anyhow!("--pods must be at least 1"));
    }
    let sem = Arc::new(tokio::sync::Semaphore::new(a.concurrency.max(1)));
    let run = Duration::from_secs_f64(a.run_secs.max(0.0));
    let mut set = tokio::task::JoinSet::new();
    for i in 0..a.pods {
        let spec = ctx.pod_spec(format!("{}-{i}", a.prefix), &a.pod);
        let containers: Vec<ContainerSpec> = (0..a.containers)
            .map(|j| container_spec(format!("c{j}"), &a.container))
            .collect();
        let ctx = Arc::clone(&ctx);
        let sem = Arc::clone(&sem);
        let grace = a.grace_secs;
        set.spawn(async move {
            let _permit = sem.acquire_owned().await;
            (
                i,
                Box::pin(one_lifecycle(ctx, spec, containers, run, grace)).await,
            )
        });
    }
    let mut pods = BTreeMap::new();
    while let Some(r) = set.join_next().await {
        match r {
            Ok((i, v)) => {
                pods.insert(i, v);
            }
            Err(e) => return fail(json!({}), anyhow!("pod task failed: {e}")),
        }
    }
    let pods: Vec<Value> = pods.into_values().collect();
    let failed: Vec<String> = pods
        .iter()
        .filter(|p| p["ok"] != json!(true))
        .map(|p| {
            format!(
                "{}: {}",
                p["name"].as_str().unwrap_or("?"),
                p["error"].as_str().unwrap_or("?")
            )
        })
        .collect();
    let v = json!({ "pods": pods, "host_network": !a.pod.netns });
    if failed.is_empty() {
        Ok(v)
    } else {
        fail(
            v,
            anyhow!(
                "{} of {} pods failed: {}",
                failed.len(),
                a.pods,
                failed.join("; ")
            ),
        )
    }
}

// ------------------------------------------------------------------ retry

/// The tries of `method` for `pod` recorded so far.
fn tries(ctx: &Ctx, method: &str, pod: &str) -> Vec<Value> {
    ctx.driver
        .records()
        .into_iter()
        .filter(|r| r.method == method && r.pod.as_deref() == Some(pod))
        .map(|r| {
            json!({"attempt": r.attempt, "retry": r.retry, "deadline_ms": r.deadline_ms,
                   "ms": r.ms, "outcome": r.outcome})
        })
        .collect()
}

async fn retry(ctx: Arc<Ctx>, a: RetryArgs) -> ScenarioResult {
    let mut policy = ctx.policy.clone();
    policy.retry_deadline = a.retry_deadline_ms.map(Duration::from_millis);
    let short = Duration::from_millis(a.deadline_ms);
    let spec = ctx.pod_spec(a.name.clone(), &a.pod);
    let c = container_spec("main".into(), &a.container);
    let method = match a.stage {
        Stage::Sandbox => "RunPodSandbox",
        Stage::Container => "CreateContainer",
    };
    ctx.driver.note(format!(
        "retry scenario: {method} of pod {}/{} with a {} ms deadline",
        spec.namespace, spec.name, a.deadline_ms
    ));
    let mut started: Option<Started> = None;
    let res: Result<()> = async {
        let sid = match a.stage {
            Stage::Sandbox => {
                ctx.driver
                    .run_pod_sandbox_with_deadline(&spec, short, &policy)
                    .await?
            }
            Stage::Container => ctx.driver.run_pod_sandbox(&spec, &ctx.policy).await?,
        };
        let pod = spec.pod_ref(Some(&sid));
        started = Some(Started {
            pod: pod.clone(),
            containers: vec![],
        });
        if a.stage == Stage::Container {
            let cref = ctx
                .driver
                .create_container_with_deadline(&spec, &sid, &c, short, &policy)
                .await?;
            if let Some(s) = started.as_mut() {
                s.containers.push(cref);
            }
        }
        Ok(())
    }
    .await;
    let mut tries_v = tries(&ctx, method, &spec.name);
    let n_tries = tries_v.len();
    if n_tries > 100 {
        // Keep the output short: the truth file has every try.
        tries_v.drain(50..n_tries - 50);
    }
    // What the runtime holds for this pod now: an earlier try may have left
    // a sandbox (or container) behind.
    let mut leftovers = json!(null);
    let pref = spec.pod_ref(None);
    let filter = api::PodSandboxFilter {
        label_selector: [(cri::LABEL_POD_UID.to_owned(), spec.uid.clone())]
            .into_iter()
            .collect(),
        ..Default::default()
    };
    let mut sandboxes = vec![];
    match ctx
        .driver
        .list_pod_sandbox_for(Some(&pref), Some(filter))
        .await
    {
        Ok(items) => {
            leftovers = json!(items
                .iter()
                .map(|s| json!({"id": s.id, "state": api::PodSandboxState::try_from(s.state).map_or("?", |x| x.as_str_name()), "attempt": s.metadata.as_ref().map(|m| m.attempt)}))
                .collect::<Vec<_>>());
            sandboxes = items.into_iter().map(|s| s.id).collect();
        }
        Err(e) => log::warn!("{e}"),
    }
    let mut containers_after = json!(null);
    if let Some(s) = &started {
        let filter = api::ContainerFilter {
            pod_sandbox_id: s.pod.sandbox_id.clone().unwrap_or_default(),
            ..Default::default()
        };
        match ctx.driver.list_containers(Some(&s.pod), Some(filter)).await {
            Ok(items) => {
                containers_after = json!(items
                    .iter()
                    .map(|c| json!({"id": c.id,
                        "name": c.metadata.as_ref().map(|m| m.name.clone()),
                        "attempt": c.metadata.as_ref().map(|m| m.attempt),
                        "state": api::ContainerState::try_from(c.state).map_or("?", |x| x.as_str_name())}))
                    .collect::<Vec<_>>())
            }
            Err(e) => log::warn!("{e}"),
        }
    }
    // Tear down every sandbox of this pod uid, ours first.
    let mut teardown_err = None;
    if let Some(s) = &started {
        let r = async {
            stop_pod(&ctx, s, a.grace_secs).await?;
            remove_pod(&ctx, s).await
        }
        .await;
        if let Err(e) = r {
            teardown_err = Some(e);
        }
    }
    for id in sandboxes {
        if started.as_ref().and_then(|s| s.pod.sandbox_id.as_deref()) == Some(id.as_str()) {
            continue;
        }
        log::warn!(
            "removing sandbox {} left by an earlier try",
            cri::short(&id)
        );
        let s = Started {
            pod: spec.pod_ref(Some(&id)),
            containers: vec![],
        };
        cleanup(&ctx, &s).await;
    }
    let answers: Vec<String> = ctx
        .driver
        .records()
        .into_iter()
        .filter(|r| r.method == method && r.pod.as_deref() == Some(spec.name.as_str()))
        .filter_map(|r| match r.outcome {
            Outcome::Error { message, .. } => Some(message),
            _ => None,
        })
        .fold(vec![], |mut v, m| {
            if !v.contains(&m) {
                v.push(m);
            }
            v
        });
    let v = json!({
        "method": method,
        "pod": {"name": spec.name, "namespace": spec.namespace, "uid": spec.uid, "attempt": spec.attempt},
        "sandbox_id": started.as_ref().and_then(|s| s.pod.sandbox_id.clone()),
        "tries_total": n_tries,
        "tries": tries_v,
        "runtime_answers": answers,
        "sandboxes_of_pod_after": leftovers,
        "containers_of_sandbox_after": containers_after,
    });
    if let Err(e) = res {
        return fail(v, e);
    }
    if let Some(e) = teardown_err {
        return fail(v, e.context("teardown"));
    }
    Ok(v)
}

// ------------------------------------------------------------------ ignore-sigterm

async fn ignore_sigterm(ctx: Arc<Ctx>, a: IgnoreSigtermArgs) -> ScenarioResult {
    let spec = ctx.pod_spec(a.name.clone(), &a.pod);
    let c = ContainerSpec::ignoring_sigterm("stubborn");
    let mut started = None;
    let mut v = json!({"name": spec.name, "grace_secs": a.grace_secs});
    let mut torn_down = false;
    let res: Result<()> = Box::pin(async {
        start_pod(&ctx, &spec, std::slice::from_ref(&c), true, &mut started).await?;
        let s = started.as_ref().ok_or_else(|| anyhow!("no sandbox"))?;
        let cref = &s.containers[0];
        v["sandbox_id"] = json!(s.pod.sandbox_id);
        v["container_id"] = json!(cref.id);
        tokio::time::sleep(Duration::from_secs_f64(a.run_secs.max(0.0))).await;
        let t = Instant::now();
        ctx.driver.stop_container(Some(&s.pod), cref, a.grace_secs).await?;
        let took = t.elapsed();
        v["stop_ms"] = json!(ms(took));
        let st = ctx.driver.container_status(Some(&s.pod), cref).await?;
        v["exit_code"] = json!(st.exit_code);
        v["reason"] = json!(st.reason);
        v["state"] = json!(api::ContainerState::try_from(st.state).map_or("?", |x| x.as_str_name()));
        ctx.driver.note(format!(
            "StopContainer of {} (ignores SIGTERM) with grace {} s took {:.0} ms; exit code {}",
            cref.name,
            a.grace_secs,
            took.as_secs_f64() * 1e3,
            st.exit_code
        ));
        ctx.driver.stop_pod_sandbox(&s.pod).await?;
        remove_pod(&ctx, s).await?;
        torn_down = true;
        if took + Duration::from_millis(100) < Duration::from_secs(a.grace_secs.max(0) as u64) {
            bail!(
                "StopContainer took {:.0} ms, less than the {} s grace period: did the container not ignore SIGTERM?",
                took.as_secs_f64() * 1e3,
                a.grace_secs
            );
        }
        Ok(())
    })
    .await;
    match res {
        Ok(()) => Ok(v),
        Err(e) => {
            if let (Some(s), false) = (&started, torn_down) {
                cleanup(&ctx, s).await;
            }
            fail(v, e)
        }
    }
}

// ------------------------------------------------------------------ steps

async fn up(ctx: Arc<Ctx>, a: UpArgs) -> ScenarioResult {
    let mut spec = ctx.pod_spec(a.name.clone(), &a.pod);
    if let Some(uid) = &a.uid {
        spec.uid = uid.clone();
        spec = spec.with_log_root(ctx.log_dir.as_deref());
    }
    let mut c = container_spec(a.container_name.clone(), &a.container);
    // kubelet mounts the pod's volumes before it makes the sandbox.
    let pref = spec.pod_ref(None);
    let mut volumes = vec![];
    for name in &a.volumes {
        let path = volume::empty_dir(&ctx.kubelet_dir, &spec.uid, name);
        if let Err(e) = ctx.driver.volume_step("mount", &path, Some(&pref), 0, || {
            volume::mount_tmpfs(&path)
        }) {
            if let Err((p, e)) = unmount_volumes(&ctx, &pref, 0) {
                log::warn!("unmounting volume {}: {e}", p.display());
            }
            return fail(
                json!({"volume": path}),
                anyhow!("mounting volume {name} at {}: {e}", path.display()),
            );
        }
        c.mounts.push(MountSpec {
            host_path: path.to_string_lossy().into_owned(),
            container_path: volume::container_path(name),
        });
        volumes.push(path);
    }
    let mut started = None;
    let res = start_pod(
        &ctx,
        &spec,
        std::slice::from_ref(&c),
        !a.no_wait,
        &mut started,
    )
    .await;
    let v = json!({
        "pod": {"name": spec.name, "namespace": spec.namespace, "uid": spec.uid, "attempt": spec.attempt},
        "sandbox_id": started.as_ref().and_then(|s| s.pod.sandbox_id.clone()),
        "container_id": started.as_ref().and_then(|s| s.containers.first().and_then(|c| c.id.clone())),
        "volumes": volumes,
    });
    match res {
        Ok(()) => Ok(v),
        Err(e) => {
            if let Some(s) = &started {
                cleanup(&ctx, s).await;
            }
            if let Err((p, e)) = unmount_volumes(&ctx, &pref, 0) {
                log::warn!("unmounting volume {}: {e}", p.display());
            }
            fail(v, e)
        }
    }
}

/// kubelet's volume teardown for a pod whose containers are stopped:
/// umount2 each mounted volume directory of the pod, then remove the pod's
/// directory. Each step is a `Truth::Volume` record (`retry`: the try
/// number). Returns the first failure: (path, error).
fn unmount_volumes(
    ctx: &Ctx,
    pod: &PodRef,
    retry: u32,
) -> std::result::Result<(), (PathBuf, std::io::Error)> {
    let dir = volume::pod_dir(&ctx.kubelet_dir, &pod.uid);
    if !dir.exists() {
        return Ok(());
    }
    for v in volume::pod_volumes(&ctx.kubelet_dir, &pod.uid) {
        if !volume::is_mounted(&v) {
            continue;
        }
        ctx.driver
            .volume_step("unmount", &v, Some(pod), retry, || volume::unmount(&v))
            .map_err(|e| (v.clone(), e))?;
    }
    ctx.driver
        .volume_step("remove", &dir, Some(pod), retry, || {
            volume::remove_pod_dir(&ctx.kubelet_dir, &pod.uid)
        })
        .map_err(|e| (dir.clone(), e))
}

async fn sandbox_steps(ctx: Arc<Ctx>, a: SandboxArgs, stop: bool, remove: bool) -> ScenarioResult {
    let res: Result<Value> = async {
        let pod = ctx.driver.pod_of(&a.sandbox_id).await?;
        let containers = ctx.driver.containers_of(&pod).await?;
        let s = Started { pod, containers };
        if stop {
            stop_pod(&ctx, &s, a.grace_secs).await?;
            // kubelet unmounts the pod's volumes once no container runs.
            unmount_volumes(&ctx, &s.pod, 0).map_err(|(p, e)| {
                anyhow!("unmounting volume {}: {e}", p.display())
            })?;
        }
        if remove {
            remove_pod(&ctx, &s).await?;
        }
        Ok(json!({
            "pod": {"name": s.pod.name, "namespace": s.pod.namespace, "uid": s.pod.uid, "attempt": s.pod.attempt},
            "sandbox_id": s.pod.sandbox_id,
            "containers": s.containers.iter().filter_map(|c| c.id.clone()).collect::<Vec<_>>(),
        }))
    }
    .await;
    res.map_err(|e| (json!({"sandbox_id": a.sandbox_id}), e))
}

async fn list(ctx: Arc<Ctx>) -> ScenarioResult {
    match ctx.driver.list_pod_sandbox(None).await {
        Ok(items) => Ok(json!({"sandboxes": items.iter().map(|s| {
            let m = s.metadata.clone().unwrap_or_default();
            json!({"id": s.id, "name": m.name, "namespace": m.namespace, "uid": m.uid, "attempt": m.attempt,
                   "state": api::PodSandboxState::try_from(s.state).map_or("?", |x| x.as_str_name())})
        }).collect::<Vec<_>>()})),
        Err(e) => fail(json!({}), e),
    }
}

// ------------------------------------------------------------------ teardown

/// The steps of a kubelet-like teardown, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TeardownStep {
    StopContainers,
    StopPodSandbox,
    UnmountVolumes,
    RemovePodSandbox,
}

impl TeardownStep {
    fn name(self) -> &'static str {
        match self {
            TeardownStep::StopContainers => "StopContainer",
            TeardownStep::StopPodSandbox => "StopPodSandbox",
            TeardownStep::UnmountVolumes => "unmount",
            TeardownStep::RemovePodSandbox => "RemovePodSandbox",
        }
    }

    fn next(self) -> Option<Self> {
        match self {
            TeardownStep::StopContainers => Some(TeardownStep::StopPodSandbox),
            TeardownStep::StopPodSandbox => Some(TeardownStep::UnmountVolumes),
            TeardownStep::UnmountVolumes => Some(TeardownStep::RemovePodSandbox),
            TeardownStep::RemovePodSandbox => None,
        }
    }
}

/// The pod to tear down: by sandbox id, or the newest sandbox of a name.
async fn teardown_target(ctx: &Ctx, a: &TeardownArgs) -> Result<PodRef> {
    if let Some(id) = &a.sandbox_id {
        return Ok(ctx.driver.pod_of(id).await?);
    }
    let name = a.name.clone().context("--name or --sandbox-id")?;
    let filter = api::PodSandboxFilter {
        label_selector: [
            (cri::LABEL_POD_NAME.to_owned(), name.clone()),
            (cri::LABEL_POD_NAMESPACE.to_owned(), a.namespace.clone()),
        ]
        .into_iter()
        .collect(),
        ..Default::default()
    };
    let items = ctx.driver.list_pod_sandbox(Some(filter)).await?;
    let s = items
        .into_iter()
        .max_by_key(|s| s.created_at)
        .with_context(|| format!("no pod sandbox named {}/{name}", a.namespace))?;
    let m = s.metadata.unwrap_or_default();
    Ok(PodRef {
        name: m.name,
        namespace: m.namespace,
        uid: m.uid,
        attempt: m.attempt,
        sandbox_id: Some(s.id),
    })
}

/// One try of `step`; Err(what failed) on failure.
async fn teardown_try(
    ctx: &Ctx,
    step: TeardownStep,
    pod: &PodRef,
    to_stop: &mut Vec<ContainerRef>,
    grace_secs: i64,
    retry: u32,
) -> std::result::Result<(), String> {
    match step {
        TeardownStep::StopContainers => {
            // In parallel, as kubelet's killContainersWithSyncResult; a
            // container stopped once is not stopped again.
            let mut set = tokio::task::JoinSet::new();
            for c in to_stop.clone() {
                let d = ctx.driver.clone();
                let pod = pod.clone();
                set.spawn(async move {
                    let r = d
                        .stop_container_try(Some(&pod), &c, grace_secs, retry)
                        .await;
                    (c, r)
                });
            }
            let mut failed = vec![];
            while let Some(r) = set.join_next().await {
                match r {
                    Ok((c, Ok(()))) => to_stop.retain(|x| x.id != c.id),
                    Ok((_, Err(e))) => failed.push(e.to_string()),
                    Err(e) => failed.push(format!("stop task failed: {e}")),
                }
            }
            if failed.is_empty() {
                Ok(())
            } else {
                Err(failed.join("; "))
            }
        }
        TeardownStep::StopPodSandbox => ctx
            .driver
            .stop_pod_sandbox_try(pod, retry)
            .await
            .map_err(|e| e.to_string()),
        TeardownStep::UnmountVolumes => unmount_volumes(ctx, pod, retry)
            .map_err(|(p, e)| format!("unmounting volume {}: {e}", p.display())),
        TeardownStep::RemovePodSandbox => ctx
            .driver
            .remove_pod_sandbox_try(pod, retry)
            .await
            .map_err(|e| e.to_string()),
    }
}

/// kubelet's pod worker on a terminating pod: each step in turn; a failed
/// step is tried again after `retry_ms` (its `retry` number counting up),
/// and the teardown goes on from there. Prints
/// `{"teardown":"started",...}` once the pod is found, so that a caller
/// knows the driver's pid and pod.
async fn teardown(ctx: Arc<Ctx>, a: TeardownArgs) -> ScenarioResult {
    let t0 = Instant::now();
    let pod = match teardown_target(&ctx, &a).await {
        Ok(p) => p,
        Err(e) => return fail(json!({}), e),
    };
    let mut to_stop = match ctx.driver.containers_of(&pod).await {
        Ok(c) => c,
        Err(e) => return fail(json!({}), e),
    };
    let pod_json = json!({"name": pod.name, "namespace": pod.namespace, "uid": pod.uid,
                          "attempt": pod.attempt, "sandbox_id": pod.sandbox_id});
    let containers: Vec<String> = to_stop.iter().filter_map(|c| c.id.clone()).collect();
    ctx.driver.note(format!(
        "teardown of pod {}/{} uid {} sandbox {} by cri-driver pid {}: retry every {} ms",
        pod.namespace,
        pod.name,
        pod.uid,
        pod.sandbox_id.as_deref().unwrap_or("?"),
        std::process::id(),
        a.retry_ms
    ));
    print_json(
        &json!({"teardown": "started", "pid": std::process::id(), "pod": pod_json,
                       "containers": containers}),
    );
    let _ = std::io::Write::flush(&mut std::io::stdout());
    let give_up = (a.for_ms > 0).then(|| Duration::from_millis(a.for_ms));
    let mut step = TeardownStep::StopContainers;
    let mut retry = 0u32;
    let mut failures = vec![];
    loop {
        match teardown_try(&ctx, step, &pod, &mut to_stop, a.grace_secs, retry).await {
            Ok(()) => match step.next() {
                Some(n) => {
                    step = n;
                    retry = 0;
                }
                None => break,
            },
            Err(e) => {
                log::info!(
                    "teardown of {}: {} failed (try {retry}): {e}",
                    pod.name,
                    step.name()
                );
                failures.push(json!({"step": step.name(), "retry": retry, "error": e,
                                     "at_ms": ms(t0.elapsed())}));
                let v = json!({"pod": pod_json, "failed_tries": failures, "stuck_at": step.name()});
                if give_up.is_some_and(|g| t0.elapsed() + Duration::from_millis(a.retry_ms) > g) {
                    return fail(
                        v,
                        anyhow!(
                            "pod {}/{} not torn down after {:.1} s: {} still fails: {e}",
                            pod.namespace,
                            pod.name,
                            t0.elapsed().as_secs_f64(),
                            step.name()
                        ),
                    );
                }
                tokio::time::sleep(Duration::from_millis(a.retry_ms)).await;
                retry += 1;
            }
        }
    }
    ctx.driver.note(format!(
        "teardown of pod {}/{} done after {} failed tries",
        pod.namespace,
        pod.name,
        failures.len()
    ));
    Ok(
        json!({"pod": pod_json, "containers": containers, "failed_tries": failures,
              "teardown_ms": ms(t0.elapsed())}),
    )
}

// ------------------------------------------------------------------ mix

/// The phases of `mix`, in order.
const MIX_PHASES: [&str; 2] = ["warm", "main"];
/// Node-level calls at the start of each phase.
const MIX_NODE_CALLS: usize = 7;
/// Calls per pod.
const MIX_POD_CALLS: usize = 14;
/// How often `mix` looks for the pause file, and for how long.
const PAUSE_POLL: Duration = Duration::from_millis(20);
const PAUSE_GIVE_UP: Duration = Duration::from_mins(10);

fn mix_pod_name(prefix: &str, phase: &str, i: usize) -> String {
    format!("{prefix}-{phase}-{i}")
}

/// CRI calls one phase of `mix` makes with `pods` pods (when all succeed).
fn mix_calls_per_phase(pods: usize) -> usize {
    MIX_NODE_CALLS + MIX_POD_CALLS * pods
}

fn container_state(s: i32) -> &'static str {
    api::ContainerState::try_from(s).map_or("?", |x| x.as_str_name())
}

fn sandbox_state(s: i32) -> &'static str {
    api::PodSandboxState::try_from(s).map_or("?", |x| x.as_str_name())
}

/// Node-level calls, as kubelet's runtime health check, image manager and
/// relist make them: Version, Status, ImageFsInfo, ListImages,
/// ImageStatus(busybox), ListPodSandbox, ListContainers.
async fn mix_node_calls(ctx: &Ctx) -> Result<Value> {
    let d = &ctx.driver;
    d.version().await?;
    let st = d.status().await?;
    d.image_fs_info().await?;
    let images = d.list_images(None).await?;
    let busybox = d.image_status(cri::BUSYBOX_IMAGE).await?;
    let sandboxes = d.list_pod_sandbox(None).await?;
    let containers = d.list_containers(None, None).await?;
    let conditions: BTreeMap<String, bool> = st
        .status
        .map(|s| {
            s.conditions
                .into_iter()
                .map(|c| (c.r#type, c.status))
                .collect()
        })
        .unwrap_or_default();
    Ok(json!({
        "conditions": conditions,
        "images": images.len(),
        "busybox_present": busybox.is_some(),
        "sandboxes": sandboxes.len(),
        "containers": containers.len(),
    }))
}

/// One pod of `mix`: RunPodSandbox, PodSandboxStatus, CreateContainer,
/// StartContainer, ContainerStatus, ListPodSandbox, ListContainers(pod),
/// StopContainer, ContainerStatus, RemoveContainer, StopPodSandbox,
/// PodSandboxStatus, RemovePodSandbox, ListPodSandbox.
async fn mix_pod(ctx: &Ctx, spec: &PodSpec) -> Value {
    let d = &ctx.driver;
    let c = ContainerSpec::new("c0");
    let t0 = Instant::now();
    let mut started: Option<Started> = None;
    let mut removed = false;
    let mut v = json!({"name": spec.name, "uid": spec.uid});
    let res: Result<()> = Box::pin(async {
        let sid = d.run_pod_sandbox(spec, &ctx.policy).await?;
        let pod = spec.pod_ref(Some(&sid));
        v["sandbox_id"] = json!(sid);
        started = Some(Started {
            pod: pod.clone(),
            containers: vec![],
        });
        let ps = d.pod_sandbox_status(&pod).await?;
        v["sandbox_state"] = json!(sandbox_state(ps.state));
        let cref = d.create_container(spec, &sid, &c, &ctx.policy).await?;
        v["container_id"] = json!(cref.id);
        if let Some(s) = started.as_mut() {
            s.containers.push(cref.clone());
        }
        d.start_container(Some(&pod), &cref).await?;
        let cs = d.container_status(Some(&pod), &cref).await?;
        v["state_after_start"] = json!(container_state(cs.state));
        d.list_pod_sandbox(None).await?;
        let filter = api::ContainerFilter {
            pod_sandbox_id: sid.clone(),
            ..Default::default()
        };
        let listed = d.list_containers(Some(&pod), Some(filter)).await?;
        v["containers_listed"] = json!(listed.len());
        let t = Instant::now();
        d.stop_container(Some(&pod), &cref, 2).await?;
        v["stop_ms"] = json!(ms(t.elapsed()));
        let cs = d.container_status(Some(&pod), &cref).await?;
        v["state_after_stop"] = json!(container_state(cs.state));
        v["exit_code"] = json!(cs.exit_code);
        d.remove_container(Some(&pod), &cref).await?;
        d.stop_pod_sandbox(&pod).await?;
        let ps = d.pod_sandbox_status(&pod).await?;
        v["sandbox_state_after_stop"] = json!(sandbox_state(ps.state));
        d.remove_pod_sandbox(&pod).await?;
        removed = true;
        d.list_pod_sandbox(None).await?;
        Ok(())
    })
    .await;
    if res.is_err() && !removed {
        if let Some(s) = &started {
            cleanup(ctx, s).await;
        }
    }
    v["ok"] = json!(res.is_ok());
    v["ms"] = json!(ms(t0.elapsed()));
    if let Err(e) = res {
        v["error"] = json!(format!("{e:#}"));
    }
    v
}

/// One phase of `mix`: the node-level calls, then each pod in turn
/// (stopping at the first pod that fails). Returns what the phase did,
/// also when it failed.
async fn mix_phase(ctx: &Ctx, a: &MixArgs, phase: &str) -> (Value, Result<()>) {
    let d = &ctx.driver;
    let calls_before = d.records().len();
    d.note(format!(
        "mix: phase {phase} begins ({} pods, {} CRI calls expected)",
        a.pods,
        mix_calls_per_phase(a.pods)
    ));
    let mut v = json!({"phase": phase, "start_mono_ns": truth::mono_ns()});
    let mut pods = vec![];
    let res: Result<()> = Box::pin(async {
        v["node"] = mix_node_calls(ctx).await?;
        for i in 0..a.pods {
            let spec = ctx.pod_spec(mix_pod_name(&a.prefix, phase, i), &a.pod);
            let p = mix_pod(ctx, &spec).await;
            let err =
                (p["ok"] != json!(true)).then(|| p["error"].as_str().unwrap_or("?").to_owned());
            pods.push(p);
            if let Some(e) = err {
                bail!("pod {}: {e}", spec.name);
            }
        }
        Ok(())
    })
    .await;
    v["end_mono_ns"] = json!(truth::mono_ns());
    let calls = d.records().len() - calls_before;
    d.note(format!("mix: phase {phase} ends ({calls} CRI calls)"));
    v["pods"] = json!(pods);
    v["calls"] = json!(calls);
    v["expected_calls"] = json!(mix_calls_per_phase(a.pods));
    (v, res.map_err(|e| e.context(format!("phase {phase}"))))
}

/// Wait until `file` exists (polling every [`PAUSE_POLL`]).
async fn wait_for_file(file: &Path, give_up: Duration) -> Result<()> {
    let t0 = Instant::now();
    loop {
        if file.exists() {
            return Ok(());
        }
        if t0.elapsed() >= give_up {
            bail!(
                "pause file {} did not appear within {} s",
                file.display(),
                give_up.as_secs()
            );
        }
        tokio::time::sleep(PAUSE_POLL).await;
    }
}

async fn mix(ctx: Arc<Ctx>, a: MixArgs) -> ScenarioResult {
    let d = &ctx.driver;
    let mut phases = vec![];
    let mut paused_ms = None;
    let mut res: Result<()> = Ok(());
    for (n, phase) in MIX_PHASES.into_iter().enumerate() {
        if n > 0 {
            if let Some(f) = &a.pause_file {
                print_json(&json!({"phase": "paused"}));
                if let Err(e) = std::io::Write::flush(&mut std::io::stdout()) {
                    res = Err(anyhow!("flushing stdout: {e}"));
                    break;
                }
                d.note(format!("mix: paused until {} exists", f.display()));
                let t = Instant::now();
                let waited = wait_for_file(f, PAUSE_GIVE_UP).await;
                paused_ms = Some(ms(t.elapsed()));
                if let Err(e) = waited {
                    res = Err(e);
                    break;
                }
                d.note(format!(
                    "mix: {} appeared after {:.0} ms",
                    f.display(),
                    t.elapsed().as_secs_f64() * 1e3
                ));
            }
        }
        let (v, r) = Box::pin(mix_phase(&ctx, &a, phase)).await;
        phases.push(v);
        if let Err(e) = r {
            res = Err(e);
            break;
        }
    }
    let connections = d.connections();
    let v = json!({
        "pods_per_phase": a.pods,
        "prefix": a.prefix,
        "host_network": !a.pod.netns,
        "paused_ms": paused_ms,
        "connections": connections,
        "phases": phases,
    });
    if let Err(e) = res {
        return fail(v, e);
    }
    if connections != 1 {
        // The point of mix is one connection throughout.
        return fail(
            v,
            anyhow!("the channel opened {connections} connections (tonic reconnected)"),
        );
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mix_names_and_counts() {
        assert_eq!(mix_pod_name("mix", "warm", 0), "mix-warm-0");
        assert_eq!(mix_pod_name("la", "main", 12), "la-main-12");
        assert_eq!(mix_calls_per_phase(0), 7);
        assert_eq!(mix_calls_per_phase(2), 35);
    }

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
        assert_eq!(
            TeardownStep::StopContainers.next(),
            Some(TeardownStep::StopPodSandbox)
        );
        assert_eq!(
            TeardownStep::StopPodSandbox.next(),
            Some(TeardownStep::UnmountVolumes)
        );
        assert_eq!(TeardownStep::RemovePodSandbox.next(), None);
    }

    #[tokio::test]
    async fn pause_file_wait() {
        let f = std::env::temp_dir().join(format!("cri-driver-pause-{}", std::process::id()));
        let _ = std::fs::remove_file(&f);
        assert!(wait_for_file(&f, Duration::from_millis(50)).await.is_err());
        std::fs::write(&f, b"").unwrap();
        wait_for_file(&f, Duration::from_millis(50)).await.unwrap();
        let _ = std::fs::remove_file(&f);
    }
}
