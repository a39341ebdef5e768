//! Prometheus, for real (issue 22, "the fleet's pipeline"): Debian's
//! Prometheus server (lab/prometheus.sh, unpacked privately) scrapes
//! `nri-trace watch --metrics-addr` every second while the lab's
//! `slow-plugin` scenario runs, with deploy/prometheus-rules.yaml loaded.
//! Once its last scrape holds every call nri-trace saw, the test asks it
//! over its HTTP API and checks the answers against the run's own records
//! (nri-trace's `-o json` output):
//!
//! - per (plugin, operation): the hook count, the sum of the own times and
//!   `histogram_quantile(0.99, ...)` of the buckets, the p99 Prometheus'
//!   own algorithm gives from the records' own times; the successful
//!   invocations; the rate-based p99 of the recording rule lies within the
//!   records' range;
//! - per CRI method: the call count; per (rule, severity, certainty): the
//!   findings;
//! - on containerd 2.3, its own NRI metrics (`/v1/metrics`, containerd
//!   internal/nri/metrics.go), scraped by the same Prometheus, joined with
//!   nri-trace's on (plugin, operation) in PromQL: the same calls counted,
//!   the same successes, and the runtime's wait never shorter than the
//!   plugin's own time nri-trace measured;
//! - every rule of deploy/ loads and evaluates (`health: ok`);
//! - the exposition passes `promtool check metrics` (names, units, types)
//!   and the rules `promtool check rules`.
//!
//! Needs root, the eBPF object and the lab (mandatory under CI=true).

// Counts are whole numbers, exact in an f64 both ways (Prometheus' JSON
// prints them so): they are compared exactly; sums and quantiles with
// `close`.
#![allow(clippy::float_cmp)]

mod lab_trace;
mod output_check;
mod prometheus_api;
mod record_schema;

use std::{
    collections::BTreeMap,
    io::Write,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};
use lab_trace::{http_get, metrics_addr, TraceProc};
use nri_trace::engine::BUCKET_BOUNDS_NS;
use nri_trace_lab::{
    labctl::{Lab, Runtime},
    scenario::Observer,
};
use output_check::plugin_label;
use prometheus_api::{install_prometheus, query, url_encode};
use serde_json::Value;

const SCENARIO: &str = "slow-plugin";

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace")
        .to_path_buf()
}

fn rules_file() -> PathBuf {
    workspace().join("deploy/prometheus-rules.yaml")
}

/// The value of one series in an exposition's text, summed over the
/// lines of `family` (no labels given: every series of it).
fn exposition_total(text: &str, family: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(&format!("{family}{{")))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// nri-trace watch, with a Prometheus scraping it from the moment it is
/// ready until the scenario is over; the answers are saved in `out/prom/`.
struct Scraped {
    trace: TraceProc,
    bin: PathBuf,
    prometheus: Option<Child>,
    /// host:port of Prometheus' API, and of nri-trace's metrics.
    api: String,
    metrics: String,
    /// host:port of containerd's own metrics (`/v1/metrics`), when the lab
    /// runs containerd 2.3 with them on.
    runtime_metrics: Option<String>,
    out: PathBuf,
}

/// The queries whose answers the test checks, by file name.
const QUERIES: &[(&str, &str)] = &[
    ("hook_count", "nri_trace_hook_duration_seconds_count"),
    ("hook_sum", "nri_trace_hook_duration_seconds_sum"),
    (
        "hook_p99",
        "histogram_quantile(0.99, nri_trace_hook_duration_seconds_bucket)",
    ),
    (
        "hook_p99_rate",
        "instance_plugin_operation:nri_trace_hook_duration_seconds:p99_rate5m",
    ),
    ("hook_invocations", "nri_trace_hook_invocations_total"),
    ("cri_count", "nri_trace_cri_call_duration_seconds_count"),
    ("findings", "nri_trace_findings_total"),
];

/// The queries of containerd's own NRI metrics and their joins with
/// nri-trace's, on containerd 2.3 (`Scraped::runtime_metrics`).
const RUNTIME_QUERIES: &[(&str, &str)] = &[
    (
        "runtime_count",
        "containerd_nri_plugin_latency_seconds_count",
    ),
    (
        "runtime_invocations",
        "containerd_nri_plugin_invocations_total",
    ),
    (
        "joined_count",
        "containerd_nri_plugin_latency_seconds_count \
         - on (plugin, operation) nri_trace_hook_duration_seconds_count",
    ),
    (
        "joined_successes",
        "containerd_nri_plugin_invocations_total{status=\"success\"} \
         - on (plugin, operation, status) nri_trace_hook_invocations_total",
    ),
    (
        "joined_wait",
        "containerd_nri_plugin_latency_seconds_sum \
         - on (plugin, operation) nri_trace_hook_duration_seconds_sum",
    ),
    (
        "runtime_mean",
        "containerd_nri_plugin_latency_seconds_sum \
         / containerd_nri_plugin_latency_seconds_count",
    ),
];

impl Scraped {
    fn wait_until(&self, what: &str, mut done: impl FnMut() -> Result<bool>) -> Result<()> {
        let t0 = Instant::now();
        loop {
            if done()? {
                return Ok(());
            }
            if t0.elapsed() > Duration::from_mins(1) {
                let log =
                    std::fs::read_to_string(self.out.join("prometheus.log")).unwrap_or_default();
                bail!("Prometheus: {what} not within 60 s; its log:\n{log}");
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    fn start_prometheus(&mut self) -> Result<()> {
        let free = std::net::TcpListener::bind("127.0.0.1:0")?;
        self.api = free.local_addr()?.to_string();
        drop(free);
        let config = self.out.join("prometheus.yml");
        // 1 s scrapes and evaluations: the scenario lasts seconds.
        let mut yml = format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
             rule_files:\n  - {}\n\
             scrape_configs:\n  - job_name: nri-trace\n    static_configs:\n      \
             - targets: ['{}']\n",
            rules_file().display(),
            self.metrics
        );
        if let Some(r) = &self.runtime_metrics {
            yml.push_str(&format!(
                "  - job_name: containerd\n    metrics_path: /v1/metrics\n    \
                 static_configs:\n      - targets: ['{r}']\n"
            ));
        }
        std::fs::write(&config, yml)?;
        let data = self.out.join("prometheus-data");
        let _ = std::fs::remove_dir_all(&data);
        let log = std::fs::File::create(self.out.join("prometheus.log"))?;
        let child = Command::new(self.bin.join("prometheus"))
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", data.display()))
            .arg(format!("--web.listen-address={}", self.api))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting prometheus")?;
        self.prometheus = Some(child);
        let api = self.api.clone();
        let jobs: &[&str] = if self.runtime_metrics.is_some() {
            &["nri-trace", "containerd"]
        } else {
            &["nri-trace"]
        };
        for job in jobs {
            self.wait_until(&format!("{job} up"), || {
                Ok(query(&api, &format!("up{{job=\"{job}\"}}"))
                    .unwrap_or_default()
                    .iter()
                    .any(|(_, v)| *v == 1.0))
            })?;
        }
        Ok(())
    }

    /// Wait until Prometheus' last scrape of `target` holds, summed over
    /// its series, what the exposition at `path` holds now for each of
    /// `families`; the exposition is saved as `file`.
    fn wait_for_last_scrape(
        &self,
        target: &str,
        path: &str,
        file: &str,
        families: &[&str],
    ) -> Result<()> {
        let text = http_get(target, path)?;
        std::fs::write(self.out.join(file), &text)?;
        for family in families {
            let want = exposition_total(&text, family);
            self.wait_until(&format!("sum({family}) = {want}"), || {
                let got = query(&self.api, &format!("sum({family})"))?;
                Ok(got.first().is_some_and(|(_, v)| *v == want))
            })?;
        }
        Ok(())
    }

    /// Once Prometheus' last scrape holds every call nri-trace saw, save
    /// the answers to [`QUERIES`], the rules' state and the exposition.
    fn save_answers(&self) -> Result<()> {
        // nri-trace re-renders at most every 500 ms once idle.
        std::thread::sleep(Duration::from_secs(1));
        self.wait_for_last_scrape(
            &self.metrics,
            "/metrics",
            "metrics-final.txt",
            &[
                "nri_trace_hook_duration_seconds_count",
                "nri_trace_cri_call_duration_seconds_count",
            ],
        )?;
        if let Some(r) = &self.runtime_metrics {
            self.wait_for_last_scrape(
                r,
                "/v1/metrics",
                "containerd-metrics-final.txt",
                &[
                    "containerd_nri_plugin_latency_seconds_count",
                    "containerd_nri_plugin_invocations_total",
                ],
            )?;
        }
        // Two more evaluations of the rules, on the last samples.
        std::thread::sleep(Duration::from_millis(2500));
        let dir = self.out.join("prom");
        std::fs::create_dir_all(&dir)?;
        let runtime = if self.runtime_metrics.is_some() {
            RUNTIME_QUERIES
        } else {
            &[]
        };
        for (name, q) in QUERIES.iter().chain(runtime) {
            let body = http_get(&self.api, &format!("/api/v1/query?query={}", url_encode(q)))?;
            std::fs::write(dir.join(format!("{name}.json")), body)?;
        }
        std::fs::write(
            dir.join("rules.json"),
            http_get(&self.api, "/api/v1/rules")?,
        )?;
        Ok(())
    }

    fn stop_prometheus(&mut self) {
        if let Some(mut c) = self.prometheus.take() {
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            let _ = c.wait();
        }
    }
}

impl Observer for Scraped {
    fn attach(&mut self, lab: &Lab, out: &Path) -> Result<()> {
        self.out = out.to_path_buf();
        self.trace.attach(lab, out)?;
        self.metrics = metrics_addr(out).context("nri-trace printed no metrics address")?;
        self.start_prometheus()
    }

    fn detach(&mut self) -> Result<()> {
        let saved = self.save_answers();
        self.stop_prometheus();
        let stopped = self.trace.detach();
        saved.and(stopped)
    }
}

impl Drop for Scraped {
    fn drop(&mut self) {
        self.stop_prometheus();
    }
}

/// One saved answer: (labels, value) per series.
fn answer(out: &Path, name: &str) -> Vec<(BTreeMap<String, String>, f64)> {
    let body = std::fs::read_to_string(out.join("prom").join(format!("{name}.json")))
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["status"], "success", "{name}: {v}");
    v["data"]["result"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let labels = s["metric"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
                .collect();
            (labels, s["value"][1].as_str().unwrap().parse().unwrap())
        })
        .collect()
}

/// An answer keyed by the values of `keys`.
fn by(series: Vec<(BTreeMap<String, String>, f64)>, keys: &[&str]) -> BTreeMap<Vec<String>, f64> {
    series
        .into_iter()
        .map(|(l, v)| {
            (
                keys.iter()
                    .map(|k| l.get(*k).cloned().unwrap_or_default())
                    .collect(),
                v,
            )
        })
        .collect()
}

/// A hook as containerd's NRI metrics name the operation
/// (RUN_POD_SANDBOX -> RunPodSandbox; methods as they are).
fn operation(hook: &str) -> String {
    if !hook.contains('_') && hook.chars().any(|c| c.is_ascii_lowercase()) {
        return hook.to_string();
    }
    let mut name = String::new();
    for w in hook.split('_').filter(|w| !w.is_empty()) {
        name.push_str(&w[..1]);
        name.push_str(&w[1..].to_ascii_lowercase());
    }
    name
}

/// `histogram_quantile` as Prometheus 2.x computes it
/// (promql/quantile.go, bucketQuantile): the bucket holding rank q*count,
/// linear inside it; the highest finite bound when the rank falls in
/// +Inf. `counts[i]` are per bucket of [`BUCKET_BOUNDS_NS`], +Inf last.
fn prometheus_quantile(q: f64, counts: &[u64]) -> f64 {
    let bounds: Vec<f64> = BUCKET_BOUNDS_NS
        .iter()
        .map(|&b| b as f64 / 1e9)
        .chain([f64::INFINITY])
        .collect();
    let cumulative: Vec<f64> = counts
        .iter()
        .scan(0u64, |t, n| {
            *t += n;
            Some(*t as f64)
        })
        .collect();
    let total = *cumulative.last().unwrap();
    let mut rank = q * total;
    let b = cumulative[..cumulative.len() - 1]
        .iter()
        .position(|&c| c >= rank)
        .unwrap_or(cumulative.len() - 1);
    if b == bounds.len() - 1 {
        return bounds[bounds.len() - 2];
    }
    let (mut start, end, mut count) = (0.0, bounds[b], cumulative[b]);
    if b > 0 {
        start = bounds[b - 1];
        count -= cumulative[b - 1];
        rank -= cumulative[b - 1];
    }
    start + (end - start) * (rank / count)
}

/// The per-bucket counts of these nanosecond values.
fn bucket_counts(values: &[u64]) -> Vec<u64> {
    let mut counts = vec![0; BUCKET_BOUNDS_NS.len() + 1];
    for &v in values {
        counts[BUCKET_BOUNDS_NS.partition_point(|&b| b < v)] += 1;
    }
    counts
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0)
}

/// What the run's records say, per (plugin, operation): own times, and
/// how many calls answered without error.
#[derive(Default, Debug)]
struct HookTruth {
    own_ns: Vec<u64>,
    ok: u64,
}

/// The records' own view: hooks per (plugin, operation), CRI calls with a
/// duration per method, findings per (rule, severity, certainty).
#[derive(Default)]
struct Truth {
    hooks: BTreeMap<Vec<String>, HookTruth>,
    cri: BTreeMap<Vec<String>, u64>,
    findings: BTreeMap<Vec<String>, u64>,
}

fn records_truth(stdout: &Path) -> Truth {
    let Truth {
        mut hooks,
        mut cri,
        mut findings,
    } = Truth::default();
    let text = std::fs::read_to_string(stdout).expect("nri-trace's output");
    let mut add_hook = |h: &Value| {
        let key = vec![
            plugin_label(&h["plugin"]),
            operation(h["hook"].as_str().expect("a hook")),
        ];
        let t: &mut HookTruth = hooks.entry(key).or_default();
        if let Some(ns) = h["own_ns"].as_u64() {
            t.own_ns.push(ns);
        }
        if h["outcome"]["kind"] == "ok" {
            t.ok += 1;
        }
    };
    for line in text.lines() {
        let v: Value = serde_json::from_str(line).expect("a JSON line");
        match v["type"].as_str() {
            Some("cri_span") => {
                for h in v["hooks"].as_array().unwrap() {
                    add_hook(h);
                }
                if v["duration_ns"].is_u64() {
                    let m = v["method"].as_str().unwrap_or("(unknown)").to_string();
                    *cri.entry(vec![m]).or_default() += 1;
                }
            }
            Some("nri_uncaused") => add_hook(&v),
            Some("violation") => {
                let key = ["rule", "severity", "certainty"]
                    .iter()
                    .map(|k| v[*k].as_str().unwrap().to_string())
                    .collect();
                *findings.entry(key).or_default() += 1;
            }
            _ => {}
        }
    }
    Truth {
        hooks,
        cri,
        findings,
    }
}

#[test]
fn prometheus_scrapes_the_hook_latencies_the_records_hold() {
    if !lab_trace::guard("prometheus") {
        return;
    }
    let bin = install_prometheus();
    let rules = Command::new(bin.join("promtool"))
        .args(["check", "rules"])
        .arg(rules_file())
        .output()
        .unwrap();
    assert!(
        rules.status.success(),
        "promtool check rules: {}{}",
        String::from_utf8_lossy(&rules.stdout),
        String::from_utf8_lossy(&rules.stderr)
    );
    // containerd 2.3, the lab's default, exports its own NRI metrics: the
    // lab turns its endpoint on (lab.sh reads NRI_TRACE_LAB_RUNTIME_METRICS
    // at `up`; this binary's one test, so the environment is its own).
    let runtime_metrics = (Lab::from_env().runtime == Runtime::Containerd23).then(|| {
        let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = free.local_addr().unwrap().to_string();
        std::env::set_var("NRI_TRACE_LAB_RUNTIME_METRICS", &addr);
        addr
    });
    // On the lab's sockets, given: the runtime is not the point here.
    let observer = Scraped {
        trace: TraceProc::on_lab_sockets(),
        bin: bin.clone(),
        prometheus: None,
        api: String::new(),
        metrics: String::new(),
        runtime_metrics: runtime_metrics.clone(),
        out: PathBuf::new(),
    };
    let Some(out) =
        lab_trace::run_observed_by("prometheus-lab", SCENARIO, None, Box::new(observer))
    else {
        return;
    };

    // The exposition, as promtool's linter sees it.
    let exposition = std::fs::read(out.join("metrics-final.txt")).unwrap();
    let mut lint = Command::new(bin.join("promtool"))
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    lint.stdin.take().unwrap().write_all(&exposition).unwrap();
    let lint = lint.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&lint.stdout),
        String::from_utf8_lossy(&lint.stderr)
    );
    assert!(
        lint.status.success() && said.trim().is_empty(),
        "promtool check metrics: {said}"
    );

    let (stdout, _, _) = TraceProc::paths(&out);
    let Truth {
        hooks,
        cri,
        findings,
    } = records_truth(&stdout);
    let keys = ["plugin", "operation"];
    let count = by(answer(&out, "hook_count"), &keys);
    let sum = by(answer(&out, "hook_sum"), &keys);
    let p99 = by(answer(&out, "hook_p99"), &keys);
    let p99_rate = by(answer(&out, "hook_p99_rate"), &keys);
    let successes: BTreeMap<Vec<String>, f64> = answer(&out, "hook_invocations")
        .into_iter()
        .filter(|(l, _)| l["status"] == "success")
        .map(|(l, v)| (vec![l["plugin"].clone(), l["operation"].clone()], v))
        .collect();
    assert_eq!(
        count.keys().collect::<Vec<_>>(),
        hooks.keys().collect::<Vec<_>>(),
        "the (plugin, operation) series"
    );
    for (key, t) in &hooks {
        let n = t.own_ns.len() as f64;
        assert_eq!(count[key], n, "{key:?}: count");
        let s = t.own_ns.iter().sum::<u64>() as f64 / 1e9;
        assert!(close(sum[key], s), "{key:?}: sum {} vs {s}", sum[key]);
        assert_eq!(successes[key], t.ok as f64, "{key:?}: successes");
        let want = prometheus_quantile(0.99, &bucket_counts(&t.own_ns));
        assert!(close(p99[key], want), "{key:?}: p99 {} vs {want}", p99[key]);
        // The recording rule's rate-based p99 (NaN where the window saw
        // no new call) lies within the range of the records' buckets.
        if let Some(r) = p99_rate.get(key).filter(|r| !r.is_nan()) {
            let (lo, hi) = (
                t.own_ns.iter().min().copied().unwrap_or(0),
                t.own_ns.iter().max().copied().unwrap_or(0),
            );
            let lo_bound = BUCKET_BOUNDS_NS
                .iter()
                .rev()
                .find(|&&b| b < lo)
                .map_or(0.0, |&b| b as f64 / 1e9);
            let hi_bound = BUCKET_BOUNDS_NS
                .iter()
                .find(|&&b| b >= hi)
                .map_or(f64::INFINITY, |&b| b as f64 / 1e9);
            assert!(
                (lo_bound..=hi_bound).contains(r),
                "{key:?}: rate p99 {r} outside [{lo_bound}, {hi_bound}]"
            );
        }
        eprintln!(
            "{key:?}: {n} hooks, sum {s:.6} s, p99 {:.6} s, rate p99 {:?}",
            p99[key],
            p99_rate.get(key)
        );
    }
    // The slow plugin's 500 ms hooks are in its p99.
    let slow = &p99[&vec!["10-slow".to_string(), "RunPodSandbox".to_string()]];
    assert!(
        (0.5..=1.0).contains(slow),
        "10-slow RunPodSandbox p99 {slow}"
    );

    let cri_count = by(answer(&out, "cri_count"), &["grpc_method"]);
    let cri_want: BTreeMap<Vec<String>, f64> =
        cri.iter().map(|(k, v)| (k.clone(), *v as f64)).collect();
    assert_eq!(cri_count, cri_want, "CRI calls per method");
    let found = by(answer(&out, "findings"), &["rule", "severity", "certainty"]);
    let found_want: BTreeMap<Vec<String>, f64> = findings
        .iter()
        .map(|(k, v)| (k.clone(), *v as f64))
        .collect();
    assert_eq!(found, found_want, "findings per rule");

    match &runtime_metrics {
        Some(_) => check_runtime_join(&out, &count),
        None => eprintln!(
            "containerd's NRI metrics: not on {} (containerd 2.3 has them)",
            Lab::from_env().runtime.name()
        ),
    }

    // Every rule of deploy/ loaded and evaluates.
    let rules: Value = serde_json::from_str(
        &std::fs::read_to_string(out.join("prom").join("rules.json")).unwrap(),
    )
    .unwrap();
    let mut n = 0;
    for g in rules["data"]["groups"].as_array().unwrap() {
        for r in g["rules"].as_array().unwrap() {
            n += 1;
            assert_eq!(r["health"], "ok", "{r}");
        }
    }
    assert_eq!(n, 8, "{rules}");
}

/// containerd 2.3's own NRI metrics against nri-trace's, joined in PromQL
/// on (plugin, operation): every invocation containerd counted is a hook
/// nri-trace decoded (the joined counts and successes are 0), nri-trace's
/// other series are the calls containerd's metrics leave out (Configure,
/// which nri `pkg/adaptation/plugin.go` does not record, and the plugin's
/// own RegisterPlugin), and the runtime's wait (its latency histogram, from
/// before it sends to after it reads the reply) is never shorter than the
/// plugin's own time nri-trace measured inside it. `nri_count` is
/// nri-trace's hook count per (plugin, operation).
fn check_runtime_join(out: &Path, nri_count: &BTreeMap<Vec<String>, f64>) {
    let keys = ["plugin", "operation"];
    let runtime = by(answer(out, "runtime_count"), &keys);
    assert!(!runtime.is_empty(), "containerd exported no NRI latency");
    let only_nri: Vec<&Vec<String>> = nri_count
        .keys()
        .filter(|k| !runtime.contains_key(*k))
        .collect();
    assert!(
        only_nri
            .iter()
            .all(|k| k[1] == "Configure" || k[1] == "RegisterPlugin"),
        "series nri-trace has and containerd does not: {only_nri:?}"
    );
    let only_runtime: Vec<&Vec<String>> = runtime
        .keys()
        .filter(|k| !nri_count.contains_key(*k))
        .collect();
    assert!(
        only_runtime.is_empty(),
        "invocations containerd counted and nri-trace did not decode: {only_runtime:?}"
    );
    let joined = by(answer(out, "joined_count"), &keys);
    assert_eq!(
        joined.keys().collect::<Vec<_>>(),
        runtime.keys().collect::<Vec<_>>(),
        "the join matched every series of containerd's"
    );
    for (k, d) in &joined {
        assert_eq!(
            *d, 0.0,
            "{k:?}: containerd {} vs nri-trace {}",
            runtime[k], nri_count[k]
        );
    }
    let failed: Vec<_> = answer(out, "runtime_invocations")
        .into_iter()
        .filter(|(l, _)| l["status"] != "success")
        .collect();
    assert!(failed.is_empty(), "failed invocations: {failed:?}");
    let successes = by(answer(out, "joined_successes"), &keys);
    assert_eq!(successes.len(), runtime.len(), "{successes:?}");
    assert!(successes.values().all(|d| *d == 0.0), "{successes:?}");
    let wait = by(answer(out, "joined_wait"), &keys);
    assert_eq!(wait.len(), runtime.len(), "{wait:?}");
    for (k, d) in &wait {
        assert!(
            *d >= 0.0,
            "{k:?}: containerd waited {d} s less than the plugin took"
        );
    }
    let mean = by(answer(out, "runtime_mean"), &keys);
    let slow = mean[&vec!["10-slow".to_string(), "RunPodSandbox".to_string()]];
    assert!(
        slow >= 0.5,
        "containerd's mean wait for 10-slow RunPodSandbox {slow} s"
    );
    eprintln!(
        "containerd's NRI metrics joined with nri-trace's: {} series, counts and \
         successes equal, the runtime's wait over the plugin's own time by {:.6} s in all; \
         nri-trace alone: {only_nri:?}",
        runtime.len(),
        wait.values().sum::<f64>()
    );
}
