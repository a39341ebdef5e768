//! The lab's Prometheus (lab/prometheus.sh, Debian's server unpacked
//! privately) for the tests that ask it: installed on first use, and its
//! instant queries over the HTTP API.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context, Result};
use nri_trace_tests::http_get;
use serde_json::Value;

/// lab/prometheus.sh install: the directory of `prometheus` and
/// `promtool` (fetched and unpacked on first use).
pub(crate) fn install_prometheus() -> PathBuf {
    let o = Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("../lab/prometheus.sh"))
        .arg("install")
        .output()
        .expect("running lab/prometheus.sh");
    assert!(
        o.status.success(),
        "lab/prometheus.sh install: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    PathBuf::from(String::from_utf8(o.stdout).unwrap().trim())
}

/// A Prometheus query string in a URL.
pub(crate) fn url_encode(q: &str) -> String {
    q.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// An instant query's result vector: (labels, value) per series.
pub(crate) fn query(prom: &str, q: &str) -> Result<Vec<(BTreeMap<String, String>, f64)>> {
    let body = http_get(prom, &format!("/api/v1/query?query={}", url_encode(q)))?;
    let v: Value = serde_json::from_str(&body).with_context(|| body.clone())?;
    anyhow::ensure!(v["status"] == "success", "{q}: {v}");
    let mut out = Vec::new();
    for s in v["data"]["result"].as_array().context("a vector")? {
        let labels = s["metric"]
            .as_object()
            .context("labels")?
            .iter()
            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
            .collect();
        let value: f64 = s["value"][1]
            .as_str()
            .context("a value")?
            .parse()
            .context("a float")?;
        out.push((labels, value));
    }
    Ok(out)
}
