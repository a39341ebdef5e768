//! The named-span part: from the start of `nri-trace watch` to the first
//! StopPodSandbox span that names a pod made before it, on a fake runtime
//! holding 1,000 pods (`lab/src/bin/fake-cri.rs`), with and without the
//! CRI state query (issue 20).

use std::{
    path::Path,
    process::Command,
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};

use super::{
    child::Proc,
    criterion::work_dir,
    json::{json_number, json_string},
    rounds::median,
};

// ------------------------------------------------------------ named span

/// Pods (one container each) the fake runtime holds: issue 20's "node
/// with 1,000 existing pods".
const NAMED_SPAN_PODS: usize = 1000;
/// StopPodSandbox calls sent in one start, one pod each, until a span
/// comes out named: the first may settle before the state is in.
const NAMED_SPAN_CALLS: usize = 10;

/// One start of `nri-trace watch` against the fake runtime. Times are
/// from the spawn of nri-trace to the line read from its pipe.
struct SpanRound {
    ready: Duration,
    /// The span of the first StopPodSandbox sent.
    first_span: Duration,
    /// The first span naming its pod; `None`: none of the calls' spans did.
    named: Option<Duration>,
    /// Calls sent until then (or all of them).
    calls: usize,
    state: Option<StateLine>,
    /// nri-trace's VmHWM before it is stopped, KiB.
    peak_rss_kib: f64,
}

/// The `cri_state` line: when it came, and its `took_ns` and `bytes`.
struct StateLine {
    at: Duration,
    took_ns: f64,
    bytes: f64,
}

pub(super) struct NamedSpan {
    /// (with the CRI state, `--no-cri-state`), round by round.
    rounds: [Vec<SpanRound>; 2],
    /// The fake's own line ("fake-cri: serving 1000 pods").
    fake: String,
}

/// Both modes, interleaved over `rounds` starts each, against one fake
/// runtime.
pub(super) fn named_span(rounds: usize) -> Result<NamedSpan> {
    let nri_trace = crate::build(true)?;
    let fake = crate::release_lab_bins(&["fake-cri"])?.join("fake-cri");
    let work = work_dir()?;
    let (cri, nri) = (work.join("fake-cri.sock"), work.join("fake-nri.sock"));
    let mut server = Proc::spawn(
        "fake-cri serve",
        Command::new(&fake)
            .args(["serve", "--pods", &NAMED_SPAN_PODS.to_string(), "--cri"])
            .arg(&cri)
            .arg("--nri")
            .arg(&nri),
    )?;
    let fake_line = server.wait_for("fake-cri: serving", Duration::from_secs(30))?;
    let mut out = NamedSpan {
        rounds: [Vec::new(), Vec::new()],
        fake: fake_line,
    };
    for r in 0..rounds {
        for (m, with_state) in [true, false].into_iter().enumerate() {
            eprintln!(
                "bench: named-span round {}/{rounds}, CRI state {with_state}",
                r + 1
            );
            // Other pods each start: the engine cannot have seen them.
            let first_pod = 100 + (r * 2 + m) * NAMED_SPAN_CALLS;
            out.rounds[m].push(span_round(
                &nri_trace, &fake, &cri, &nri, with_state, first_pod,
            )?);
            server.check_alive()?;
        }
    }
    server.stop()?;
    Ok(out)
}

fn span_round(
    nri_trace: &Path,
    fake: &Path,
    cri: &Path,
    nri: &Path,
    with_state: bool,
    first_pod: usize,
) -> Result<SpanRound> {
    let mut cmd = Command::new(nri_trace);
    cmd.args(["watch", "-o", "json", "--cri-socket"])
        .arg(cri)
        .arg("--nri-socket")
        .arg(nri);
    if !with_state {
        cmd.arg("--no-cri-state");
    }
    let t0 = Instant::now();
    let mut p = Proc::spawn("nri-trace watch", &mut cmd)?;
    let (ready, _) = p.wait_for_line(
        "nri-trace: ready",
        |l| l.contains("nri-trace: ready"),
        Duration::from_mins(1),
    )?;
    let mut first_span = None;
    let mut named = None;
    let mut calls = 0;
    // Without the state no span is named: one call tells what it shows.
    let tries = if with_state { NAMED_SPAN_CALLS } else { 1 };
    for pod in first_pod..first_pod + tries {
        calls += 1;
        // kubelet's side: a new connection, StopPodSandbox, the pod it
        // named, then a call every 10 ms (fake-cri.rs says why) until
        // dropped here.
        let mut client = Proc::spawn(
            "fake-cri stop",
            Command::new(fake)
                .args(["stop", "--pod", &pod.to_string(), "--cri"])
                .arg(cri),
        )?;
        let said = client.wait_for("\"sandbox_id\":", Duration::from_secs(30))?;
        let (Some(id), Some(ns), Some(name)) = (
            json_string(&said, "\"sandbox_id\":"),
            json_string(&said, "\"namespace\":"),
            json_string(&said, "\"name\":"),
        ) else {
            bail!("fake-cri stop said {said:?}");
        };
        let (at, span) = p.wait_for_line(
            "the StopPodSandbox cri_span",
            |l| l.contains("\"type\":\"cri_span\"") && l.contains(&id),
            Duration::from_secs(30),
        )?;
        first_span.get_or_insert(at - t0);
        if span_pod(&span) == Some((ns, name)) {
            named = Some(at - t0);
            break;
        }
    }
    let peak_rss_kib = crate::nri_rate::status_kib(p.pid(), "VmHWM:")? as f64;
    p.stop()?;
    let state = p
        .seen_line(|l| l.contains("\"type\":\"cri_state\""))
        .map(|(at, l)| {
            Ok::<_, anyhow::Error>(StateLine {
                at: at - t0,
                took_ns: json_number(l, &["\"took_ns\":"]).context("cri_state without took_ns")?,
                bytes: json_number(l, &["\"bytes\":"]).context("cri_state without bytes")?,
            })
        })
        .transpose()?;
    if with_state == state.is_none() {
        bail!(
            "nri-trace (CRI state {with_state}) printed {} cri_state line",
            if with_state { "no" } else { "a" }
        );
    }
    Ok(SpanRound {
        ready: ready - t0,
        first_span: first_span.context("no call sent")?,
        named,
        calls,
        state,
        peak_rss_kib,
    })
}

/// The (namespace, name) of a span line's `pod` object, when it has one.
fn span_pod(line: &str) -> Option<(String, String)> {
    let pod = &line[line.find("\"pod\":{")?..];
    let pod = &pod[..pod.find('}')?];
    Some((
        json_string(pod, "\"namespace\":")?,
        json_string(pod, "\"name\":")?,
    ))
}

/// A figure of one round, if it has it.
type RoundFigure = dyn Fn(&SpanRound) -> Option<f64>;

pub(super) fn named_span_section(n: &NamedSpan) -> String {
    fn ms(d: Duration) -> f64 {
        d.as_secs_f64() * 1e3
    }
    // "median / max" of `f` over a mode's rounds, "-" when no round has it.
    let stat = |m: usize, f: &RoundFigure| {
        let v: Vec<f64> = n.rounds[m].iter().filter_map(f).collect();
        if v.is_empty() {
            "-".to_string()
        } else {
            let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            format!("{:.1} / {max:.1}", median(&v))
        }
    };
    let never = |m: usize| n.rounds[m].iter().filter(|r| r.named.is_none()).count();
    let rows: [(&str, &RoundFigure); 8] = [
        ("start to `nri-trace: ready` (ms)", &|r| Some(ms(r.ready))),
        ("start to the `cri_state` line (ms)", &|r| {
            r.state.as_ref().map(|s| ms(s.at))
        }),
        ("start to the first StopPodSandbox span (ms)", &|r| {
            Some(ms(r.first_span))
        }),
        ("start to the first correctly named span (ms)", &|r| {
            r.named.map(ms)
        }),
        ("StopPodSandbox calls sent until named", &|r| {
            r.named.map(|_| r.calls as f64)
        }),
        ("`cri_state` `took_ns` (ms)", &|r| {
            r.state.as_ref().map(|s| s.took_ns / 1e6)
        }),
        ("`cri_state` `bytes` (KiB)", &|r| {
            r.state.as_ref().map(|s| s.bytes / 1024.0)
        }),
        ("nri-trace peak RSS, VmHWM (MiB)", &|r| {
            Some(r.peak_rss_kib / 1024.0)
        }),
    ];
    let mut s = format!(
        "## Named span on a node with {NAMED_SPAN_PODS} pods\n\n\
         `nri-trace watch -o json` against `{}` (lab/src/bin/fake-cri.rs); once it says \
         `ready`, a new CRI connection sends StopPodSandbox for one of the pods (a pod \
         made before the trace); if its span does not name the pod, another pod's \
         StopPodSandbox follows (at most {NAMED_SPAN_CALLS}). Times from nri-trace's \
         spawn to its line read from the pipe; nothing pinned. {} starts per mode, \
         interleaved; median / max.\n\n\
         | measure | with the CRI state (default) | `--no-cri-state` |\n\
         | --- | ---: | ---: |\n",
        n.fake,
        n.rounds[0].len(),
    );
    for (what, f) in rows {
        s += &format!("| {what} | {} | {} |\n", stat(0, f), stat(1, f));
    }
    s += &format!(
        "| starts whose spans never named the pod | {} of {} | {} of {} |\n",
        never(0),
        n.rounds[0].len(),
        never(1),
        n.rounds[1].len()
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn span_pod_reads_the_pod_object() {
        let named = r#"{"v":1,"type":"cri_span","method":"StopPodSandbox","pod":{"name":"web-1","namespace":"team-3","uid":"u","attempt":0},"sandbox_id":"ab","container":null,"hooks":[]}"#;
        assert_eq!(
            span_pod(named),
            Some(("team-3".to_string(), "web-1".to_string()))
        );
        let unnamed = r#"{"v":1,"type":"cri_span","method":"StopPodSandbox","pod":null,"sandbox_id":"ab","container":{"name":"c","attempt":0}}"#;
        assert_eq!(span_pod(unnamed), None);
    }
}
