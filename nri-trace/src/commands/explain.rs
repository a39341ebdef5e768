//! `nri-trace explain POD [FILE]`: why a pod is not gone. With FILE, its
//! teardown as the saved file shows it; without, live: attach now, watch
//! kubelet's next teardown attempts of the pod (up to `--wait`), then
//! explain from what they showed. Either way, what this node still holds
//! of it.

use std::{cell::RefCell, io::Write, rc::Rc, time::Duration};

use anyhow::{bail, Context, Result};
use nri_trace::{
    capture,
    engine::{contract::ContractConfig, contract::SETTLE_NS, Record, TeardownLog},
    pipeline::{live, open_source, replay, runtime_session, Ending, Follow, Pipeline, Target},
    pipeline::{Progress, Sink, Stop},
    sinks::explain::{self, TeardownSink},
};

use super::{drain, load_probes, start_capture};
use crate::cli::{
    args::{KernelEvents, LineOutput},
    ExplainArgs,
};

pub(crate) async fn run(a: ExplainArgs) -> Result<()> {
    if let Some(file) = &a.file {
        from_file(&a, file, false)?;
        return Ok(());
    }
    // The flight recorder's past first, when it saw the pod (it holds
    // kubelet's attempts too, if it still runs); else watch now.
    let dir = super::record::default_dir();
    if !a.live && dir.is_dir() {
        if from_file(&a, &dir, true)? {
            return Ok(());
        }
        eprintln!(
            "nri-trace: the flight recorder in {} did not see {}: watching now",
            dir.display(),
            a.pod
        );
    }
    live(&a).await
}

/// The pod's teardown in a saved file (or the recorder's directory):
/// shown (true), or, when `or_not` and the file never saw the pod, not
/// (false).
fn from_file(a: &ExplainArgs, file: &std::path::Path, or_not: bool) -> Result<bool> {
    let src = open_source(file)?;
    let name = src.name().to_string();
    let mut p = Pipeline::new(src.session(), ContractConfig::default());
    let (sink, log) = TeardownSink::new();
    p.add_sink(Box::new(sink));
    let r = replay::run(src, p)?;
    super::replay::warn(&name, &r);
    let log = log.borrow();
    // On the node, "now" is now (waits run up to this moment), when the
    // recording is from this boot: the same wall-minus-monotonic offset.
    let (last, offset) = log.last_seen();
    let now = capture::monotonic_ns();
    let same_boot = (offset - capture::wall_offset_ns()).abs() < 1_000_000_000;
    let at = if !a.no_proc && same_boot && now >= last {
        now
    } else {
        0
    };
    if or_not && log.explain(&a.pod, at).is_none() {
        return Ok(false);
    }
    show(a, &log, at, &format!("in {name}"))?;
    Ok(true)
}

/// Attach, watch the pod's next teardown attempt (or `--wait`), explain.
async fn live(a: &ExplainArgs) -> Result<()> {
    let wait = Duration::try_from_secs_f64(a.wait).map_err(|e| {
        anyhow::anyhow!("--wait {}: {e}; give a number of seconds, e.g. 60", a.wait)
    })?;
    let target = Target::find(a.target.cri_socket.clone(), a.target.nri_socket.clone())
        .context("explain without a FILE traces the runtime now")?;
    let follow = Follow {
        drain: drain(&a.probe),
        plugin_ends: !a.target.no_plugin_end,
        sandbox: !a.target.no_sandbox,
        // Names the pods made before the attach (a stuck pod is one).
        cri_state: !a.target.no_cri_state,
        // A stuck pod needs its runtime running: no waiting for one.
        wait: false,
    };
    let cfg = runtime_session(&target, follow)?;
    let info = target.session_info(true);
    let mut p = Pipeline::new(&info, ContractConfig::default());
    let (sink, log) = TeardownSink::new();
    p.add_sink(Box::new(sink));
    let stop = live::stop_on_signal(Some(wait));
    let mut s = start_capture(
        cfg,
        load_probes(&a.probe, follow.sandbox, KernelEvents::Explaining)?,
    )
    .await?;
    let since = capture::monotonic_ns();
    eprintln!(
        "nri-trace: watching {}'s next teardown attempt (kubelet retries every few seconds), \
         up to {} s (--wait)",
        a.pod,
        wait.as_secs_f64()
    );
    p.add_sink(Box::new(UntilAttempt {
        log: Rc::clone(&log),
        pod: a.pod.clone(),
        since,
        stop: stop.clone(),
    }));
    live::run(&mut s, p, stop).await?;
    let log = log.borrow();
    let now = capture::monotonic_ns();
    if !log.attempt_seen(&a.pod, since, SETTLE_NS, now) {
        eprintln!(
            "nri-trace: no teardown attempt of {} seen through in {} s: what follows is what \
             was seen (a longer --wait may catch kubelet's next retry)",
            a.pod,
            wait.as_secs_f64()
        );
    }
    if log.explain(&a.pod, now).is_none() {
        bail!(
            "pod {:?} is not in the runtime's pod list (ListPodSandbox, at the attach) and no \
             call of it came in {} s: it is gone, or not this runtime's; give namespace/name, \
             the name or the sandbox id of a pod `crictl pods` lists ({} pods known)",
            a.pod,
            wait.as_secs_f64(),
            log.pods().len()
        );
    }
    show(a, &log, now, "while watching")
}

/// Stops a live explain once the pod's teardown attempt is seen through.
struct UntilAttempt {
    log: Rc<RefCell<TeardownLog>>,
    pod: String,
    since: u64,
    stop: Stop,
}

impl Sink for UntilAttempt {
    fn record(&mut self, _: &Record) -> std::io::Result<()> {
        Ok(())
    }

    fn idle(&mut self, _: &Progress<'_>) -> std::io::Result<()> {
        let now = capture::monotonic_ns();
        if self
            .log
            .borrow()
            .attempt_seen(&self.pod, self.since, SETTLE_NS, now)
        {
            self.stop.request();
        }
        Ok(())
    }

    fn finish(&mut self, _: &Ending<'_>) -> std::io::Result<()> {
        Ok(())
    }
}

/// Explain `a.pod` from `log` as of `at` (0: its last record), with the
/// node's facts unless `--no-proc`; `seen` says where the log came from.
fn show(a: &ExplainArgs, log: &TeardownLog, at: u64, seen: &str) -> Result<()> {
    let Some(e) = log.explain(&a.pod, at) else {
        let known = log.pods();
        let listed = if known.is_empty() {
            String::new()
        } else {
            format!(
                ": {}",
                known
                    .iter()
                    .take(10)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        bail!(
            "no call of pod {:?} {seen} ({} pods seen{listed}): give namespace/name, the \
             name, or the sandbox id",
            a.pod,
            known.len()
        );
    };
    let mut e = e;
    // A pod gone from the runtime too: whether anything of it is left.
    let facts = (!a.no_proc).then(|| explain::node_facts(&e));
    // A process killed before the trace began shows only on the node.
    if let Some((c, p)) = facts.iter().flat_map(|f| &f.containers).find_map(|c| {
        c.processes
            .iter()
            .chain(&c.signalled)
            .find(|p| p.sigkill_pending)
            .map(|p| (c, p))
    }) {
        e.note_pending_kill(p.pid, &p.comm, &c.name, &p.state, &p.wchan);
    }
    let mut w = std::io::BufWriter::new(std::io::stdout().lock());
    match a.output {
        LineOutput::Text => explain::text(&mut w, &e, facts.as_ref())?,
        LineOutput::Json => explain::json(&mut w, &e, facts.as_ref())?,
    }
    w.flush()?;
    Ok(())
}
