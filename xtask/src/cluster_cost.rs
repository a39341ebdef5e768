//! The bench's `cluster` part: nri-trace's release build watching the
//! lab's one-node cluster (lab/cluster.sh: kubelet on containerd 2.3, both
//! tracing to the lab's collector, as a node with tracing on) while
//! kubelet starts and deletes pods made through the API. Four modes,
//! interleaved over rounds: no nri-trace, `watch -o json`, `watch -o json
//! --otlp-endpoint`, and `watch -o json --kernel all`. It measures
//!
//! - nri-trace's CPU per call with export off and on (issue 33: "on the
//!   one-node cluster") and its peak RSS;
//! - the same with every kernel event sent (issue 34: what the kernel's
//!   filter of routine events saves, in the same run);
//! - kubelet's own `kubelet_runtime_operations_duration_seconds` per
//!   operation in each mode (issue 32: "the runtime's latency as kubelet
//!   measures it", A/B), read through the API server's node proxy before
//!   and after each window.
//!
//! The work is kubelet's: its pod workers, its polls (PodSandboxStatus,
//! ListContainers, ... every second or so), each CRI call's NRI
//! deliveries to `PLUGINS` test plugins subscribed to every event. So
//! the calls per run differ a little from run to run, and the table gives
//! CPU per call (every CRI call and NRI delivery of the window, from the
//! run's own end-of-run summaries) and per pod.
//!
//! Opt-in (`--only cluster`): it brings the cluster up (Kubernetes built
//! by lab/k8s.sh, about 20 s to start) and takes a few minutes per round.

use std::{
    fmt::Write as _,
    fs,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::mpsc::Receiver,
    thread,
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};
use serde_json::Value;

use crate::nri_rate::{cpu_s, lines_of, status_kib, wait_line, Collector, Killed, PLUGINS};

/// The node's runtime: the cluster's default.
const RUNTIME: &str = "containerd-2.3";
/// After nri-trace is ready and before the window: its start-up (the
/// runtime's pod list, the first polls) is not the calls' cost.
const SETTLE: Duration = Duration::from_secs(3);
/// After the pods are gone, before the window closes: nri-trace holds a
/// call's span 2 s for late findings (sinks/otlp/spans.rs HOLD_NS), then
/// its batch goes within 0.5 s (sinks/otlp/export.rs).
const DRAIN: Duration = Duration::from_secs(4);

/// What runs beside kubelet in a run.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// No nri-trace: kubelet's own latencies, the A of the A/B.
    Without,
    /// `watch -o json`.
    Watch,
    /// `watch -o json --otlp-endpoint` to the lab's collector.
    WatchOtlp,
    /// `watch -o json --kernel all`: every kernel event sent.
    WatchAllKernel,
}

impl Mode {
    const ALL: [Mode; 4] = [
        Mode::Without,
        Mode::Watch,
        Mode::WatchOtlp,
        Mode::WatchAllKernel,
    ];

    fn label(self) -> &'static str {
        match self {
            Mode::Without => "no nri-trace",
            Mode::Watch => "watch, export off",
            Mode::WatchOtlp => "watch, export on",
            Mode::WatchAllKernel => "watch, --kernel all",
        }
    }

    fn tag(self) -> &'static str {
        match self {
            Mode::Without => "none",
            Mode::Watch => "off",
            Mode::WatchOtlp => "on",
            Mode::WatchAllKernel => "all-kernel",
        }
    }
}

/// kubelet's `kubelet_runtime_operations_duration_seconds` over a run:
/// per operation type, (calls, seconds).
pub(crate) type Operations = std::collections::BTreeMap<String, (f64, f64)>;

/// One run: one mode, `pods` pods started and deleted.
pub(crate) struct ClusterRun {
    mode: Mode,
    pods: usize,
    cri_calls: u64,
    nri_calls: u64,
    cpu_s: f64,
    wall_s: f64,
    /// `session_end`'s `otlp`: exported, dropped.
    exported: Option<(u64, u64)>,
    /// nri-trace's peak resident set (VmHWM), KiB.
    peak_rss_kib: u64,
    /// kubelet's runtime operations during the window.
    operations: Operations,
}

impl ClusterRun {
    fn calls(&self) -> u64 {
        self.cri_calls + self.nri_calls
    }
    fn us_per_call(&self) -> f64 {
        self.cpu_s * 1e6 / self.calls().max(1) as f64
    }
    fn ms_per_pod(&self) -> f64 {
        self.cpu_s * 1e3 / self.pods.max(1) as f64
    }
}

pub(crate) struct ClusterCost {
    runs: Vec<ClusterRun>,
}

/// The cluster, brought down when dropped (a failed step included).
struct ClusterUp;

impl Drop for ClusterUp {
    fn drop(&mut self) {
        if let Err(e) = script("cluster.sh", &["down"]) {
            eprintln!("bench: cluster down: {e:#}");
        }
    }
}

/// lab/NAME ARGS on the cluster's runtime, tracing to the collector.
fn script(name: &str, args: &[&str]) -> Result<String> {
    let o = Command::new("bash")
        .arg(crate::workspace_root().join("lab").join(name))
        .args(args)
        .env("NRI_TRACE_LAB_RUNTIME", RUNTIME)
        .env("NRI_TRACE_LAB_OTLP_ENDPOINT", Collector::HTTP_ENDPOINT)
        .env(
            "NRI_TRACE_LAB_KUBELET_OTLP_ENDPOINT",
            Collector::ENDPOINT.trim_start_matches("http://"),
        )
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("running lab/{name}"))?;
    if !o.status.success() {
        bail!("lab/{name} {} failed ({})", args.join(" "), o.status);
    }
    Ok(String::from_utf8_lossy(&o.stdout).into_owned())
}

pub(crate) fn kubectl(args: &[&str]) -> Result<String> {
    let mut a = vec!["kubectl"];
    a.extend_from_slice(args);
    script("cluster.sh", &a)
}

/// The cluster a cluster bench part runs on: nri-trace's release build,
/// the lab's collector (kubelet and containerd send to it from their
/// start), the cluster, [`PLUGINS`] test plugins on its runtime, and its
/// node's name. Dropped in field order: the plugins, the cluster, the
/// collector.
pub(crate) struct BenchCluster {
    pub(crate) nri_trace: PathBuf,
    pub(crate) work: PathBuf,
    pub(crate) node: String,
    _plugins: Vec<Killed>,
    _up: ClusterUp,
    _collector: Collector,
}

impl BenchCluster {
    /// Built and up, its files in the bench's work directory's `name`.
    pub(crate) fn up(name: &str) -> Result<Self> {
        let nri_trace = crate::build(true)?;
        let plugin = crate::release_lab_bins(&["nri-test-plugin"])?.join("nri-test-plugin");
        let work = crate::bench::work_dir()?.join(name);
        let _ = fs::remove_dir_all(&work);
        fs::create_dir_all(&work)?;
        script("lab.sh", &["install"])?;
        script("k8s.sh", &["install"])?;
        let collector = Collector::start(&work)?;
        script("cluster.sh", &["up"])?;
        let up = ClusterUp;
        let plugins = start_plugins(&plugin, &work)?;
        let node = kubectl(&["get", "nodes", "-o", "jsonpath={.items[0].metadata.name}"])?;
        Ok(BenchCluster {
            nri_trace,
            work,
            node: node.trim().to_owned(),
            _plugins: plugins,
            _up: up,
            _collector: collector,
        })
    }
}

/// Bring the cluster up, run `rounds` of each mode with `pods` pods,
/// bring it down.
pub(crate) fn cluster_cost(pods: usize, rounds: usize) -> Result<ClusterCost> {
    let bc = BenchCluster::up("cluster")?;
    let (nri_trace, work, node) = (&bc.nri_trace, &bc.work, bc.node.as_str());
    let mut runs = Vec::new();
    for round in 0..rounds {
        for mode in Mode::ALL {
            eprintln!(
                "bench: cluster round {}/{rounds}, {pods} pods, {}",
                round + 1,
                mode.label()
            );
            let r = run(nri_trace, work, node, mode, pods, round)?;
            eprintln!(
                "bench: cluster: {} CRI calls, {} NRI deliveries, CPU {:.2} s ({:.1} us/call), spans {:?}",
                r.cri_calls,
                r.nri_calls,
                r.cpu_s,
                r.us_per_call(),
                r.exported
            );
            runs.push(r);
        }
    }
    drop(bc);
    Ok(ClusterCost { runs })
}

/// nri-trace started by `cmd` (stdin null, stderr piped), once it says it
/// is ready; its stderr's lines, read to the end (the receiver kept with
/// it: a closed pipe would end nri-trace at its next log line).
pub(crate) fn start_ready(cmd: &mut Command) -> Result<(Killed, Receiver<String>)> {
    let mut t = cmd
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {cmd:?}"))?;
    let err = lines_of(t.stderr.take().expect("piped"));
    let t = Killed(t);
    wait_line(&err, "nri-trace: ready", &mut Vec::new())?;
    Ok((t, err))
}

/// SIGTERM to nri-trace: it drains, prints its summaries and exits, with
/// success.
pub(crate) fn stop(t: &mut Killed) -> Result<()> {
    Command::new("kill")
        .args(["-TERM", &t.0.id().to_string()])
        .status()?;
    let status = t.0.wait()?;
    if !status.success() {
        bail!("nri-trace exited with {status}");
    }
    Ok(())
}

/// What a window of a cluster bench measured.
pub(crate) struct Window {
    /// nri-trace's utime+stime over it (0 without nri-trace).
    pub(crate) cpu_s: f64,
    pub(crate) wall_s: f64,
    /// kubelet's runtime operations over it.
    pub(crate) operations: Operations,
}

/// `work` run as a window: nri-trace's CPU (`tracer`, when it runs) and
/// kubelet's runtime operations on `node` from just before it to just
/// after.
pub(crate) fn measure_window(
    node: &str,
    tracer: Option<&(Killed, Receiver<String>)>,
    work: impl FnOnce() -> Result<()>,
) -> Result<Window> {
    let pid = tracer.map(|(t, _)| t.0.id());
    let cpu = || pid.map_or(Ok(0.0), cpu_s);
    let ops0 = kubelet_operations(node)?;
    let (cpu0, t0) = (cpu()?, Instant::now());
    work()?;
    let (cpu_s, wall_s) = (cpu()? - cpu0, t0.elapsed().as_secs_f64());
    Ok(Window {
        cpu_s,
        wall_s,
        operations: operations_since(node, &ops0)?,
    })
}

/// `pods` pods named PREFIX-N written to `file` (pods_json), applied, and
/// waited Ready for at most `timeout`.
pub(crate) fn make_pods(file: &Path, prefix: &str, pods: usize, timeout: &str) -> Result<()> {
    fs::write(file, pods_json(prefix, pods))?;
    kubectl(&["apply", "-f", &file.to_string_lossy()])?;
    kubectl(&[
        "wait",
        "--for=condition=Ready",
        "pod",
        "-l",
        "app=nri-trace-bench",
        &format!("--timeout={timeout}"),
    ])
    .map(drop)
}

/// kubelet's runtime operations since `before` (kubelet_operations),
/// those with calls only.
fn operations_since(node: &str, before: &Operations) -> Result<Operations> {
    Ok(kubelet_operations(node)?
        .iter()
        .map(|(op, (n, s))| {
            let (n0, s0) = before.get(op).copied().unwrap_or_default();
            (op.clone(), (n - n0, s - s0))
        })
        .filter(|(_, (n, _))| *n > 0.0)
        .collect())
}

/// [`PLUGINS`] test plugins on the node's runtime, subscribed to every
/// event; killed when dropped.
fn start_plugins(plugin: &Path, work: &Path) -> Result<Vec<Killed>> {
    let lab = crate::lab::lab_dir();
    let mut plugins = Vec::new();
    for i in 0..PLUGINS {
        let idx = format!("{}", 10 + i);
        let log = fs::File::create(work.join(format!("plugin-{idx}.log")))?;
        let p = Command::new(plugin)
            .args(["--name", "bench", "--idx", &idx, "--socket"])
            .arg(lab.join("run/nri.sock"))
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting nri-test-plugin")?;
        plugins.push(Killed(p));
    }
    Ok(plugins)
}

/// The pods of one run: busybox sleeping, a second of grace (sleep as
/// pid 1 ignores SIGTERM, so each deletion waits for it and the SIGKILL).
fn pods_json(prefix: &str, pods: usize) -> String {
    let items: Vec<Value> = (0..pods)
        .map(|i| {
            serde_json::json!({
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": format!("{prefix}-{i}"),
                    "namespace": "default",
                    "labels": {"app": "nri-trace-bench"},
                },
                "spec": {
                    "terminationGracePeriodSeconds": 1,
                    "containers": [{
                        "name": "main",
                        "image": "localhost/nri-trace/busybox:lab",
                        "imagePullPolicy": "Never",
                        "command": ["sleep", "3600"],
                    }],
                },
            })
        })
        .collect();
    serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string()
}

/// kubelet's runtime operations so far, through the API server's proxy
/// to `node` (kubelet's /metrics).
fn kubelet_operations(node: &str) -> Result<Operations> {
    let text = kubectl(&[
        "get",
        "--raw",
        &format!("/api/v1/nodes/{node}/proxy/metrics"),
    ])?;
    let mut ops = Operations::new();
    for l in text.lines() {
        // `_sum` (seconds) or `_count` (calls) of the histogram.
        let Some((kind, rest)) = l
            .strip_prefix("kubelet_runtime_operations_duration_seconds_")
            .and_then(|r| r.split_once('{'))
        else {
            continue;
        };
        let is_sum = match kind {
            "sum" => true,
            "count" => false,
            _ => continue,
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let Some(op) = labels
            .split(',')
            .find_map(|kv| kv.strip_prefix("operation_type=\"")?.strip_suffix('"'))
        else {
            continue;
        };
        let v: f64 = value.trim().parse().unwrap_or(0.0);
        let e = ops.entry(op.to_owned()).or_default();
        if is_sum {
            e.1 += v;
        } else {
            e.0 += v;
        }
    }
    Ok(ops)
}

fn run(
    nri_trace: &Path,
    work: &Path,
    node: &str,
    mode: Mode,
    pods: usize,
    round: usize,
) -> Result<ClusterRun> {
    let out = work.join(format!("watch-{round}-{}.ndjson", mode.tag()));
    let mut tracer = None;
    if mode != Mode::Without {
        let mut cmd = Command::new(nri_trace);
        cmd.args(["watch", "-o", "json"]);
        match mode {
            Mode::WatchOtlp => {
                cmd.args(["--otlp-endpoint", Collector::ENDPOINT]);
            }
            Mode::WatchAllKernel => {
                cmd.args(["--kernel", "all"]);
            }
            Mode::Without | Mode::Watch => {}
        }
        tracer = Some(start_ready(cmd.stdout(fs::File::create(&out)?))?);
    }
    thread::sleep(SETTLE);
    let file = work.join(format!("pods-{round}-{}.json", mode.tag()));
    let w = measure_window(node, tracer.as_ref(), || {
        make_pods(
            &file,
            &format!("bench-{round}-{}", mode.tag()),
            pods,
            "600s",
        )?;
        kubectl(&[
            "delete",
            "-f",
            &file.to_string_lossy(),
            "--wait=true",
            "--timeout=600s",
        ])?;
        thread::sleep(DRAIN);
        Ok(())
    })?;
    let mut run = ClusterRun {
        mode,
        pods,
        cri_calls: 0,
        nri_calls: 0,
        cpu_s: w.cpu_s,
        wall_s: w.wall_s,
        exported: None,
        peak_rss_kib: 0,
        operations: w.operations,
    };
    let Some((mut tracer, _stderr)) = tracer else {
        return Ok(run);
    };
    let pid = tracer.0.id();
    run.peak_rss_kib = status_kib(pid, "VmHWM:")?;
    stop(&mut tracer)?;
    for l in fs::read_to_string(&out)?.lines() {
        let Ok(v) = serde_json::from_str::<Value>(l) else {
            continue;
        };
        let calls = v["calls"].as_u64().unwrap_or(0);
        match v["type"].as_str() {
            Some("cri_method_summary") => run.cri_calls += calls,
            Some("hook_summary") => run.nri_calls += calls,
            Some("session_end") if v["otlp"].is_object() => {
                run.exported = Some((
                    v["otlp"]["exported_spans"].as_u64().unwrap_or(0),
                    v["otlp"]["dropped_spans"].as_u64().unwrap_or(0),
                ));
            }
            _ => {}
        }
    }
    Ok(run)
}

/// kubelet's runtime operations shown per mode (the pod lifecycle's).
const SHOWN_OPERATIONS: [&str; 6] = [
    "run_podsandbox",
    "create_container",
    "start_container",
    "stop_container",
    "stop_podsandbox",
    "remove_container",
];

pub(crate) fn cluster_cost_section(c: &ClusterCost) -> String {
    let mut s = format!(
        "## OTLP export and kubelet's latency on the one-node cluster (issues 33 and 32)\n\n\
         nri-trace's release build (`watch -o json`, discovery as on a node) on the lab's \
         cluster (kubelet on {RUNTIME}, both tracing to the lab's collector, {PLUGINS} \
         `nri-test-plugin`s subscribed to every event) while kubelet starts the pods of a \
         `kubectl apply` and deletes them: without nri-trace, with it, with it exporting \
         spans (`--otlp-endpoint`), and with it sent every kernel event (`--kernel all`), \
         the modes interleaved over rounds. CPU is nri-trace's \
         (utime+stime) from {:.0} s after it is ready to {:.0} s after the last pod is gone; \
         calls are every CRI call (kubelet's polls included) and NRI delivery of that window, \
         from the run's `cri_method_summary` and `hook_summary` lines; peak RSS is its VmHWM.\n\n\
         | Round | Mode | Pods | CRI calls | NRI deliveries | Wall s | CPU s | CPU per call (us) | CPU per pod (ms) | Peak RSS (MiB) | Spans exported / dropped |\n\
         |---|---|---|---|---|---|---|---|---|---|---|\n",
        SETTLE.as_secs_f64(),
        DRAIN.as_secs_f64()
    );
    for (i, r) in c.runs.iter().enumerate() {
        if r.mode == Mode::Without {
            let _ = writeln!(
                s,
                "| {} | {} | {} | - | - | {:.1} | - | - | - | - | - |",
                i / Mode::ALL.len() + 1,
                r.mode.label(),
                r.pods,
                r.wall_s
            );
            continue;
        }
        let _ = writeln!(
            s,
            "| {} | {} | {} | {} | {} | {:.1} | {:.2} | {:.1} | {:.1} | {:.1} | {} |",
            i / Mode::ALL.len() + 1,
            r.mode.label(),
            r.pods,
            r.cri_calls,
            r.nri_calls,
            r.wall_s,
            r.cpu_s,
            r.us_per_call(),
            r.ms_per_pod(),
            r.peak_rss_kib as f64 / 1024.0,
            r.exported
                .map_or_else(|| "-".into(), |(e, d)| format!("{e} / {d}")),
        );
    }
    let per_call = |mode: Mode| {
        let (cpu, calls) = c
            .runs
            .iter()
            .filter(|r| r.mode == mode)
            .fold((0.0, 0u64), |(c, n), r| (c + r.cpu_s, n + r.calls()));
        cpu * 1e6 / calls.max(1) as f64
    };
    let (off, on) = (per_call(Mode::Watch), per_call(Mode::WatchOtlp));
    let all = per_call(Mode::WatchAllKernel);
    let _ = writeln!(
        s,
        "\nOver all rounds: {off:.1} us of nri-trace's CPU per call without export, {on:.1} with it \
         ({:+.0} %); {all:.1} with every kernel event sent (`--kernel all`: the kernel's filter \
         saves {:.0} %).\n",
        (on / off - 1.0) * 100.0,
        (1.0 - off / all) * 100.0
    );
    // kubelet's view: mean latency per operation, per mode, over all
    // rounds (sums of seconds over sums of calls).
    s.push_str(
        "kubelet's `kubelet_runtime_operations_duration_seconds` over the same windows, \
         mean per operation over all rounds of a mode (ms; calls in brackets):\n\n\
         | Operation |",
    );
    for mode in Mode::ALL {
        let _ = write!(s, " {} |", mode.label());
    }
    s.push_str("\n|---|");
    for _ in Mode::ALL {
        s.push_str("---|");
    }
    s.push('\n');
    for op in SHOWN_OPERATIONS {
        let cell = |mode: Mode| {
            let (n, secs) = c
                .runs
                .iter()
                .filter(|r| r.mode == mode)
                .filter_map(|r| r.operations.get(op))
                .fold((0.0, 0.0), |(n, t), (dn, ds)| (n + dn, t + ds));
            if n > 0.0 {
                format!("{:.2} ({n:.0})", secs * 1e3 / n)
            } else {
                "-".into()
            }
        };
        let cells: Vec<String> = Mode::ALL.into_iter().map(cell).collect();
        let _ = writeln!(s, "| {op} | {} |", cells.join(" | "));
    }
    s
}
