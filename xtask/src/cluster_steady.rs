//! The bench's `cluster-steady` part (issue 32's benchmark): the lab's
//! one-node cluster holding `pods` pods made through the API (kubelet on
//! containerd 2.3, `PLUGINS` test plugins subscribed to every event, as
//! in the `cluster` part), then windows of `seconds` each, interleaved
//! over rounds (ABBA: the first mode alternates): without nri-trace, and
//! with nri-trace's release build running as deploy/daemonset.yaml runs
//! it (`record` with its flight recorder and metrics endpoint; on the
//! host, not in the pod: the same process, without the image import). It
//! measures
//!
//! - nri-trace's CPU share (utime+stime over the window's wall time) and
//!   its resident set (peak VmHWM, and VmRSS at the window's end);
//! - kubelet's own `kubelet_runtime_operations_duration_seconds` per
//!   operation in each mode: with pods that only run, kubelet's work is
//!   its polls (PLEG relists, status calls, stats), so these are the
//!   operations shown.
//!
//! Opt-in (`--only cluster-steady`): making 100 pods takes minutes on 2
//! cores, and each window is 10 minutes by default.

use std::{
    fmt::Write as _,
    path::Path,
    process::{Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context, Result};

use crate::{
    cluster_cost::{
        kubectl, make_pods, measure_window, start_ready, stop, BenchCluster, Operations,
    },
    nri_rate::{status_kib, PLUGINS},
};

/// The address nri-trace's metrics endpoint listens on in a window (the
/// DaemonSet's port, on loopback).
const METRICS_ADDR: &str = "127.0.0.1:9464";

/// One window.
pub(crate) struct SteadyWindow {
    with_nri_trace: bool,
    wall_s: f64,
    cpu_s: f64,
    peak_rss_kib: u64,
    end_rss_kib: u64,
    /// The CRI calls nri-trace counted (its metrics).
    cri_calls: u64,
    operations: Operations,
}

pub(crate) struct ClusterSteady {
    pods: usize,
    seconds: f64,
    windows: Vec<SteadyWindow>,
}

/// Build, bring the cluster up with `pods` pods, run `rounds` of both
/// modes for `seconds` each, bring it down.
pub(crate) fn cluster_steady(pods: usize, seconds: f64, rounds: usize) -> Result<ClusterSteady> {
    let bc = BenchCluster::up("cluster-steady")?;
    let (nri_trace, work, node) = (&bc.nri_trace, &bc.work, bc.node.as_str());
    let file = work.join("pods.json");
    let t0 = Instant::now();
    make_pods(&file, "steady", pods, "1200s")?;
    eprintln!(
        "bench: cluster-steady: {pods} pods Running in {:.0} s",
        t0.elapsed().as_secs_f64()
    );
    let mut windows = Vec::new();
    for round in 0..rounds {
        // ABBA: which mode goes first alternates, so that a drift of the
        // machine over the run (kubelet's caches, the pods' age) does not
        // fall on one mode.
        let order = if round % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        for with in order {
            eprintln!(
                "bench: cluster-steady round {}/{rounds}, {} for {seconds:.0} s",
                round + 1,
                if with { "with nri-trace" } else { "without" }
            );
            let w = window(nri_trace, work, node, with, seconds, round)?;
            eprintln!(
                "bench: cluster-steady: CPU {:.2} s of {:.0} s ({:.2} %), peak RSS {:.1} MiB",
                w.cpu_s,
                w.wall_s,
                w.cpu_s * 100.0 / w.wall_s,
                w.peak_rss_kib as f64 / 1024.0
            );
            windows.push(w);
        }
    }
    kubectl(&[
        "delete",
        "-f",
        &file.to_string_lossy(),
        "--wait=true",
        "--timeout=1200s",
    ])?;
    drop(bc);
    Ok(ClusterSteady {
        pods,
        seconds,
        windows,
    })
}

fn window(
    nri_trace: &Path,
    work: &Path,
    node: &str,
    with: bool,
    seconds: f64,
    round: usize,
) -> Result<SteadyWindow> {
    let mut tracer = None;
    if with {
        let dir = work.join(format!("recorder-{round}"));
        tracer = Some(start_ready(
            Command::new(nri_trace)
                .args(["record", "--dir"])
                .arg(&dir)
                .args([
                    "--max-size=256MiB",
                    "--max-age=2d",
                    "--metrics-addr",
                    METRICS_ADDR,
                ])
                .stdout(Stdio::null()),
        )?);
    }
    let m = measure_window(node, tracer.as_ref(), || {
        thread::sleep(Duration::from_secs_f64(seconds));
        Ok(())
    })?;
    let mut w = SteadyWindow {
        with_nri_trace: with,
        wall_s: m.wall_s,
        cpu_s: m.cpu_s,
        peak_rss_kib: 0,
        end_rss_kib: 0,
        cri_calls: 0,
        operations: m.operations,
    };
    let Some((mut tracer, _err)) = tracer else {
        return Ok(w);
    };
    let pid = tracer.0.id();
    w.peak_rss_kib = status_kib(pid, "VmHWM:")?;
    w.end_rss_kib = status_kib(pid, "VmRSS:")?;
    w.cri_calls = cri_calls_counted()?;
    stop(&mut tracer)?;
    Ok(w)
}

/// The CRI calls nri-trace's metrics counted so far: the `_count` of
/// `nri_trace_cri_call_duration_seconds` (docs/metrics.md), summed over
/// methods. A plain HTTP/1.0 GET: one request of a bench, no client
/// library for it.
fn cri_calls_counted() -> Result<u64> {
    use std::io::{Read, Write};
    let mut conn = std::net::TcpStream::connect(METRICS_ADDR)
        .with_context(|| format!("connecting to nri-trace's metrics at {METRICS_ADDR}"))?;
    conn.set_read_timeout(Some(Duration::from_secs(10)))?;
    conn.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")?;
    let mut text = String::new();
    conn.read_to_string(&mut text)?;
    Ok(text
        .lines()
        .filter(|l| l.starts_with("nri_trace_cri_call_duration_seconds_count"))
        .filter_map(|l| l.rsplit_once(' ')?.1.trim().parse::<f64>().ok())
        .sum::<f64>() as u64)
}

/// kubelet's polling operations, shown per mode.
const SHOWN_OPERATIONS: [&str; 6] = [
    "list_podsandbox",
    "list_containers",
    "podsandbox_status",
    "container_status",
    "status",
    "list_podsandbox_stats",
];

pub(crate) fn cluster_steady_section(c: &ClusterSteady) -> String {
    let mut s = format!(
        "## nri-trace on the one-node cluster with {} pods, steady (issue 32)\n\n\
         The lab's cluster (kubelet on containerd 2.3, {PLUGINS} `nri-test-plugin`s subscribed \
         to every event, kubelet and containerd tracing to the lab's collector) holding {} pods \
         that only run: kubelet's polls are the work. Windows of {:.0} s without nri-trace and \
         with nri-trace's release build running as the DaemonSet runs it (`record` with its \
         flight recorder, `--metrics-addr`), interleaved over rounds, the first mode \
         alternating (rows in the order run). CPU share is nri-trace's \
         utime+stime over the window's wall time (of one core); RSS is its peak (VmHWM) and \
         its resident set at the window's end.\n\n\
         | Round | Mode | Wall s | CRI calls counted | CPU s | CPU share (% of a core) | Peak RSS (MiB) | RSS at end (MiB) |\n\
         |---|---|---|---|---|---|---|---|\n",
        c.pods, c.pods, c.seconds
    );
    for (i, w) in c.windows.iter().enumerate() {
        if !w.with_nri_trace {
            let _ = writeln!(
                s,
                "| {} | no nri-trace | {:.0} | - | - | - | - | - |",
                i / 2 + 1,
                w.wall_s
            );
            continue;
        }
        let _ = writeln!(
            s,
            "| {} | record | {:.0} | {} | {:.1} | {:.2} | {:.1} | {:.1} |",
            i / 2 + 1,
            w.wall_s,
            w.cri_calls,
            w.cpu_s,
            w.cpu_s * 100.0 / w.wall_s,
            w.peak_rss_kib as f64 / 1024.0,
            w.end_rss_kib as f64 / 1024.0
        );
    }
    s.push_str(
        "\nkubelet's `kubelet_runtime_operations_duration_seconds` over the same windows, \
         mean per operation over all rounds of a mode (ms; calls in brackets), and each \
         round's means (without / with):\n\n\
         | Operation | no nri-trace | record | per round |\n|---|---|---|---|\n",
    );
    for op in SHOWN_OPERATIONS {
        let mean = |ws: &mut dyn Iterator<Item = &SteadyWindow>| {
            let (n, secs) = ws
                .filter_map(|w| w.operations.get(op))
                .fold((0.0, 0.0), |(n, t), (dn, ds)| (n + dn, t + ds));
            (n > 0.0).then(|| (secs * 1e3 / n, n))
        };
        let cell = |m: Option<(f64, f64)>| {
            m.map_or_else(|| "-".into(), |(ms, n)| format!("{ms:.2} ({n:.0})"))
        };
        let without = mean(&mut c.windows.iter().filter(|w| !w.with_nri_trace));
        let with = mean(&mut c.windows.iter().filter(|w| w.with_nri_trace));
        let rounds: Vec<String> = c
            .windows
            .chunks(2)
            .map(|pair| {
                let one = |w: &SteadyWindow| {
                    mean(&mut std::iter::once(w))
                        .map_or_else(|| "-".into(), |(ms, _)| format!("{ms:.2}"))
                };
                // Without first, whichever ran first (ABBA).
                let mut pair: Vec<&SteadyWindow> = pair.iter().collect();
                pair.sort_by_key(|w| w.with_nri_trace);
                pair.into_iter().map(one).collect::<Vec<_>>().join(" / ")
            })
            .collect();
        let _ = writeln!(
            s,
            "| {op} | {} | {} | {} |",
            cell(without),
            cell(with),
            rounds.join(", ")
        );
    }
    s
}
