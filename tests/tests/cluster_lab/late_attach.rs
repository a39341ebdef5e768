//! Late attach to kubelet (issue 32 item 4): 30 pods on the node, kubelet's
//! CRI connection open for minutes, then `nri-trace watch -o json` started
//! on the node while pods come and go (an NRI plugin connected before, as
//! plugins register at boot).
//!
//! The truth comes from kubelet and the runtime, not from nri-trace: with
//! its tracing on, kubelet sends each CRI call's client span in the call's
//! `traceparent` and exports that span to the lab's collector, named after
//! the method it called; `crictl pods` and `crictl ps -a` say whose each
//! sandbox and container is. Measured and asserted (the figures):
//!
//! - 0 mislabeled: no call's method differs from kubelet's span of it, and
//!   no call names another pod than the one its sandbox or container is
//!   of;
//! - at most 2 % unknown among kubelet's calls with NRI deliveries under
//!   them;
//! - every pod that existed at the attach is named by a call of kubelet's
//!   during the watch (its log manager's ContainerStatus of each running
//!   container, every 10 s).

use std::{
    collections::{BTreeMap, BTreeSet},
    path::Path,
    time::{Duration, Instant},
};

use anyhow::{ensure, Context, Result};
use serde_json::Value;

use super::{
    cluster::Cluster, json_output, otel_collector::wait_spans, pods::TestPod, start_ready,
};

/// The pods on the node at the attach (the "30 or more").
const PODS: usize = 30;
/// How long kubelet has run (and its CRI connection been open) at the
/// attach, at least: "minutes" (issue 32), after the earlier steps' calls.
const KUBELET_AGE: Duration = Duration::from_mins(2);
/// Made and deleted during the watch: calls with NRI deliveries.
const CHURN: usize = 5;
/// How long the watch runs: kubelet's container log manager asks for the
/// status of every running container each 10 s (k8s.io/kubernetes
/// v1.37.2 pkg/kubelet/logs/container_log_manager.go, rotateLogs and
/// processContainer; `containerLogMonitorInterval`), so each pod is named
/// by a ContainerStatus within that; the churn's deletions and creations
/// (under load, some 15 s) fit as well.
const WATCH: Duration = Duration::from_secs(45);

pub(crate) fn late_attach(c: &Cluster, bin: &Path, out: &Path, file: &Path) -> Result<()> {
    let fleet: Vec<TestPod> = (0..PODS + CHURN)
        .map(|i| TestPod::new(&format!("fleet-{i:02}"), "sleep 3600").grace(1))
        .collect();
    let (before, during) = fleet.split_at(PODS);
    let t0 = Instant::now();
    create_all(c, before)?;
    let made = t0.elapsed();
    // kubelet's connection minutes old, as on a node: the test's other
    // steps ran on it; what is missing of KUBELET_AGE is waited out.
    let pid = u64::try_from(c.kubelet_pid()?)?;
    let kubelet_started = process_start_unix(pid).context("kubelet's start")?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs_f64();
    if let Some(rest) =
        KUBELET_AGE.checked_sub(Duration::from_secs_f64((now - kubelet_started).max(0.0)))
    {
        std::thread::sleep(rest);
    }
    let mut plugin = c.plugin("fleet", "16", &[], out)?;
    let run = watch_with_churn(c, bin, out, before, during);
    let _ = plugin.kill();
    let _ = plugin.wait();
    let truth = run.and_then(|lines| {
        let owners = Owners::from_runtime(c)?;
        Ok((lines, owners))
    });
    // The fleet leaves, whatever the checks say.
    let deleted = kubectl_on(
        c,
        &[
            "delete",
            "--wait=true",
            "--ignore-not-found",
            "--timeout=180s",
        ],
        &fleet,
    );
    let (lines, owners) = truth?;
    deleted?;
    let spans = kubelet_spans(file, &lines);
    let m = measure(&lines, &owners, &spans, before);
    // kubelet's connection, open since kubelet started, at the attach.
    let connection_age_s = lines
        .iter()
        .find(|v| v["type"] == "session")
        .and_then(|v| v["started_unix_ns"].as_u64())
        .map_or(0.0, |ns| ns as f64 / 1e9 - kubelet_started);
    let facts = format!(
        "{PODS} pods made in {:.0} s; kubelet's connection open {:.0} s at the attach; {} calls of kubelet's in {} s: {} with kubelet's span ({} mislabeled), {} known, {} inferred, {} unknown; {} with NRI deliveries, {} of them unknown; {} calls naming a pod ({} mislabeled); pods named {}/{}",
        made.as_secs_f64(),
        connection_age_s,
        m.calls,
        WATCH.as_secs(),
        m.checked,
        m.method_mislabeled.len(),
        m.known,
        m.inferred,
        m.unknown,
        m.with_nri,
        m.unknown_with_nri,
        m.pod_checked,
        m.pod_mislabeled.len(),
        PODS - m.unnamed.len(),
        PODS,
    );
    eprintln!("cluster test: late attach: {facts}");
    std::fs::write(out.join("late-attach-facts.txt"), &facts)?;
    ensure!(
        m.method_mislabeled.is_empty(),
        "methods mislabeled: {:?}",
        m.method_mislabeled
    );
    ensure!(
        m.pod_mislabeled.is_empty(),
        "pods mislabeled: {:?}",
        m.pod_mislabeled
    );
    // Enough evidence to measure at all: the churn's lifecycles.
    ensure!(m.with_nri >= 4 * CHURN, "{facts}");
    ensure!(m.unknown_with_nri * 50 <= m.with_nri, "{facts}");
    ensure!(m.checked * 2 >= m.calls, "{facts}");
    ensure!(m.unnamed.is_empty(), "not named: {:?}", m.unnamed);
    Ok(())
}

/// The pods made through the API, all Running.
fn create_all(c: &Cluster, pods: &[TestPod]) -> Result<()> {
    let items: Vec<Value> = pods
        .iter()
        .map(|p| serde_json::from_str(&p.yaml()))
        .collect::<Result<_, _>>()?;
    c.apply(&serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string())?;
    kubectl_on(
        c,
        &["wait", "--for=condition=Ready", "--timeout=300s"],
        pods,
    )
    .map(drop)
}

/// `kubectl ARGS pod/NAME...` of `pods`.
fn kubectl_on(c: &Cluster, args: &[&str], pods: &[TestPod]) -> Result<String> {
    let refs: Vec<String> = pods.iter().map(|p| format!("pod/{}", p.name)).collect();
    let mut all = args.to_vec();
    all.extend(refs.iter().map(String::as_str));
    c.kubectl(&all)
}

/// `watch -o json` (every call: JSON does not summarize polls) for
/// [`WATCH`], attached now; meanwhile [`CHURN`] pods of `before` deleted
/// and the pods of `during` made. Its JSON lines.
fn watch_with_churn(
    c: &Cluster,
    bin: &Path,
    out: &Path,
    before: &[TestPod],
    during: &[TestPod],
) -> Result<Vec<Value>> {
    let stdout = out.join("late-attach-watch.ndjson");
    let stderr = out.join("late-attach-watch.stderr");
    let secs = WATCH.as_secs().to_string();
    let args = ["watch", "-o", "json", "--duration", &secs];
    let mut watch = start_ready(bin, &args, &stdout, &stderr)?;
    let t0 = Instant::now();
    let churn = (|| {
        kubectl_on(c, &["delete", "--wait=false"], &before[..CHURN])?;
        create_all(c, during)
    })();
    let st = watch.wait()?;
    churn?;
    ensure!(st.success(), "nri-trace watch: {st}");
    ensure!(
        t0.elapsed() >= WATCH,
        "nri-trace watch ended after {:?}",
        t0.elapsed()
    );
    json_output(&std::fs::read_to_string(&stdout)?).context("watch -o json's output")
}

/// Whose each sandbox and container is, as the runtime says (`crictl pods`,
/// `crictl ps -a`): pod names as namespace/name.
struct Owners {
    sandboxes: BTreeMap<String, String>,
    containers: BTreeMap<String, String>,
}

impl Owners {
    fn from_runtime(c: &Cluster) -> Result<Self> {
        let pods: Value = serde_json::from_str(&c.crictl(&["pods", "-o", "json"])?)?;
        let sandboxes: BTreeMap<String, String> = pods["items"]
            .as_array()
            .context("crictl pods: no items")?
            .iter()
            .filter_map(|p| {
                let m = &p["metadata"];
                Some((
                    p["id"].as_str()?.to_owned(),
                    format!("{}/{}", m["namespace"].as_str()?, m["name"].as_str()?),
                ))
            })
            .collect();
        let ctrs: Value = serde_json::from_str(&c.crictl(&["ps", "-a", "-o", "json"])?)?;
        let containers = ctrs["containers"]
            .as_array()
            .context("crictl ps: no containers")?
            .iter()
            .filter_map(|k| {
                let pod = sandboxes.get(k["podSandboxId"].as_str()?)?;
                Some((k["id"].as_str()?.to_owned(), pod.clone()))
            })
            .collect();
        Ok(Owners {
            sandboxes,
            containers,
        })
    }
}

/// kubelet's spans by span id (the method it called, by name), once the
/// collector has every one the watch's calls point at, or after 30 s
/// (kubelet's batch processor exports every 5 s).
fn kubelet_spans(file: &Path, lines: &[Value]) -> BTreeMap<String, String> {
    let wanted: BTreeSet<String> = kubelet_calls(lines)
        .filter_map(|v| parent_span(v).map(str::to_owned))
        .collect();
    let spans = wait_spans(file, Duration::from_secs(30), |spans| {
        let ids: BTreeSet<&str> = spans
            .iter()
            .filter(|s| s.service == "kubelet")
            .map(|s| s.span_id.as_str())
            .collect();
        wanted.iter().all(|w| ids.contains(w.as_str()))
    });
    spans
        .into_iter()
        .filter(|s| s.service == "kubelet")
        .map(|s| (s.span_id, s.name))
        .collect()
}

/// The watch's settled CRI calls made by kubelet.
fn kubelet_calls(lines: &[Value]) -> impl Iterator<Item = &Value> {
    lines
        .iter()
        .filter(|v| v["type"] == "cri_span" && v["client"]["comm"] == "kubelet")
}

/// The client's span id of the call: the third field of its traceparent.
fn parent_span(call: &Value) -> Option<&str> {
    call["traceparent"].as_str()?.split('-').nth(2)
}

#[derive(Default)]
struct Measure {
    calls: usize,
    checked: usize,
    known: usize,
    inferred: usize,
    unknown: usize,
    with_nri: usize,
    unknown_with_nri: usize,
    pod_checked: usize,
    method_mislabeled: Vec<String>,
    pod_mislabeled: Vec<String>,
    unnamed: Vec<String>,
}

fn measure(
    lines: &[Value],
    owners: &Owners,
    spans: &BTreeMap<String, String>,
    before: &[TestPod],
) -> Measure {
    let mut m = Measure::default();
    let mut named = BTreeSet::new();
    for v in kubelet_calls(lines) {
        m.calls += 1;
        let how = v["identified"]["how"].as_str().unwrap_or("");
        match how {
            "known" => m.known += 1,
            "inferred" => m.inferred += 1,
            _ => m.unknown += 1,
        }
        if v["hooks"].as_array().is_some_and(|h| !h.is_empty()) {
            m.with_nri += 1;
            if how == "unknown" {
                m.unknown_with_nri += 1;
            }
        }
        let method = v["method"].as_str();
        if let (Some(name), Some(method)) = (parent_span(v).and_then(|p| spans.get(p)), method) {
            m.checked += 1;
            let truth = name.rsplit('/').next().unwrap_or(name);
            if truth != method {
                m.method_mislabeled.push(format!(
                    "stream {} {how}: {method}, kubelet called {truth}",
                    v["stream_id"]
                ));
            }
        }
        let pod = match (v["pod"]["namespace"].as_str(), v["pod"]["name"].as_str()) {
            (Some(ns), Some(n)) => Some(format!("{ns}/{n}")),
            _ => None,
        };
        let owner = v["container_id"]
            .as_str()
            .and_then(|id| owners.containers.get(id))
            .or_else(|| {
                v["sandbox_id"]
                    .as_str()
                    .and_then(|id| owners.sandboxes.get(id))
            });
        if let (Some(pod), Some(owner)) = (&pod, owner) {
            m.pod_checked += 1;
            if pod != owner {
                m.pod_mislabeled.push(format!(
                    "stream {} {}: {pod}, the runtime says {owner}",
                    v["stream_id"],
                    method.unwrap_or("?")
                ));
            }
        }
        if let Some(pod) = pod {
            named.insert(pod);
        }
    }
    m.unnamed = before
        .iter()
        .map(|p| format!("{}/{}", p.namespace, p.name))
        .filter(|p| !named.contains(p))
        .collect();
    m
}

/// A process's start, in seconds since the epoch (/proc/PID/stat's
/// starttime after boot, /proc/stat's btime).
fn process_start_unix(pid: u64) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = stat.rsplit_once(") ")?.1;
    let ticks: f64 = after.split_whitespace().nth(19)?.parse().ok()?;
    let btime: f64 = std::fs::read_to_string("/proc/stat")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Some(btime + ticks / hz)
}
