//! The DaemonSet's metrics scraped through its pod's port (issue 32 item
//! 2: "its metrics scraped by the lab's Prometheus through the pod's
//! port"), deploy/prometheus-rules.yaml loaded. The lab's Prometheus is
//! Debian's (lab/prometheus.sh), which Debian builds without Kubernetes
//! discovery ("field kubernetes_sd_configs not found", 2.42.0+ds): so the
//! test does what `kubernetes_sd_configs` with `role: pod` and
//! deploy/README.md's relabelling would do, from the API: the nri-trace
//! pod's IP and its container port named `metrics`, with the pod's node
//! and name as labels, in a `file_sd_configs` file.
//!
//! What it must show: one target, the nri-trace pod on this node, up;
//! kubelet's CRI calls counted in what it scraped; every rule of deploy/
//! evaluates (`health: ok`).

use std::{
    path::Path,
    process::{Child, Command, Stdio},
    thread::sleep,
    time::{Duration, Instant},
};

use anyhow::{bail, ensure, Context, Result};
use serde_json::Value;

use super::{
    cluster::Cluster,
    prometheus_api::{install_prometheus, query},
};

/// Stopped when dropped.
struct Prometheus(Child);

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The targets file of the scrape job: the nri-trace pod of the API,
/// as the relabelling of deploy/README.md's job keeps it.
fn targets(c: &Cluster) -> Result<Value> {
    let pods: Value = serde_json::from_str(&c.kubectl(&[
        "get",
        "pods",
        "-n",
        "kube-system",
        "-l",
        "app.kubernetes.io/name=nri-trace",
        "-o",
        "json",
    ])?)?;
    let mut out = Vec::new();
    for p in pods["items"].as_array().context("a pod list")? {
        let ip = p["status"]["podIP"].as_str().context("the pod's IP")?;
        for port in p["spec"]["containers"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|c| c["ports"].as_array().cloned().unwrap_or_default())
            .filter(|port| port["name"] == "metrics")
        {
            out.push(serde_json::json!({
                "targets": [format!("{ip}:{}", port["containerPort"])],
                "labels": {
                    "node": p["spec"]["nodeName"],
                    "pod": p["metadata"]["name"],
                },
            }));
        }
    }
    Ok(Value::Array(out))
}

fn config(c: &Cluster, targets: &Path) -> String {
    format!(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
         rule_files:\n  - {}\n\
         scrape_configs:\n  - job_name: nri-trace\n    file_sd_configs:\n      \
         - files: ['{}']\n        refresh_interval: 1s\n",
        c.repo().join("deploy/prometheus-rules.yaml").display(),
        targets.display(),
    )
}

pub(crate) fn prometheus_scrapes_the_pod(c: &Cluster, out: &Path) -> Result<()> {
    let bin = install_prometheus();
    let file = out.join("prometheus-targets.json");
    std::fs::write(&file, targets(c)?.to_string())?;
    let yml = out.join("prometheus.yml");
    std::fs::write(&yml, config(c, &file))?;
    let api = {
        let free = std::net::TcpListener::bind("127.0.0.1:0")?;
        free.local_addr()?.to_string()
    };
    let data = out.join("prometheus-data");
    let _ = std::fs::remove_dir_all(&data);
    let log = std::fs::File::create(out.join("prometheus.log"))?;
    let _prometheus = Prometheus(
        Command::new(bin.join("prometheus"))
            .arg(format!("--config.file={}", yml.display()))
            .arg(format!("--storage.tsdb.path={}", data.display()))
            .arg(format!("--web.listen-address={api}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting prometheus")?,
    );
    let log = || std::fs::read_to_string(out.join("prometheus.log")).unwrap_or_default();
    let wait = |what: &str, done: &dyn Fn() -> bool| -> Result<()> {
        let t0 = Instant::now();
        while !done() {
            if t0.elapsed() > Duration::from_mins(1) {
                bail!("Prometheus: {what} not within 60 s; its log:\n{}", log());
            }
            sleep(Duration::from_millis(250));
        }
        Ok(())
    };
    let up = || query(&api, "up{job=\"nri-trace\"}").unwrap_or_default();
    wait("the nri-trace pod found and up", &|| {
        up().iter().any(|(_, v)| *v >= 1.0)
    })?;
    let targets = up();
    ensure!(targets.len() == 1, "targets: {targets:?}");
    let (labels, _) = &targets[0];
    let node = c.node()?;
    ensure!(labels.get("node") == Some(&node), "{labels:?}");
    ensure!(
        labels
            .get("pod")
            .is_some_and(|p| p.starts_with("nri-trace-"))
            && labels.get("instance").is_some_and(|i| i.ends_with(":9464")),
        "{labels:?}"
    );
    // kubelet polls its runtime every second: the pod's recorder counts
    // those calls.
    let calls = "sum(nri_trace_cri_call_duration_seconds_count{job=\"nri-trace\"})";
    wait("kubelet's CRI calls counted", &|| {
        query(&api, calls)
            .unwrap_or_default()
            .first()
            .is_some_and(|(_, v)| *v > 0.0)
    })?;
    let counted = query(&api, calls)?.first().map_or(0.0, |(_, v)| *v);
    // Every rule evaluated at least once, healthy.
    let rules = || -> Result<Vec<Value>> {
        let body = nri_trace_tests::http_get(&api, "/api/v1/rules")?;
        let v: Value = serde_json::from_str(&body)?;
        Ok(v["data"]["groups"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
            .collect())
    };
    wait("every rule evaluated", &|| {
        rules().is_ok_and(|r| {
            !r.is_empty()
                && r.iter().all(|r| {
                    r["lastEvaluation"]
                        .as_str()
                        .is_some_and(|t| !t.starts_with("0001"))
                })
        })
    })?;
    let rules = rules()?;
    let sick: Vec<&Value> = rules.iter().filter(|r| r["health"] != "ok").collect();
    ensure!(sick.is_empty(), "rules not healthy: {sick:?}");
    eprintln!(
        "cluster test: Prometheus found {} by the API and scraped it at {}: {counted} CRI calls counted, {} rules healthy",
        labels["pod"],
        labels["instance"],
        rules.len()
    );
    Ok(())
}
