//! Hung teardown scenarios: a plugin's StopPodSandbox hook never returns,
//! and the CRI StopPodSandbox it is part of either runs into its
//! deadline (`hung-teardown-hook`) or loses its client half-way
//! (`hung-teardown-client-gone`). Each checks what containerd did with
//! the hung plugin and the pod.

use std::{thread::sleep, time::Duration};

use anyhow::{ensure, Context, Result};

use super::{
    hold_stuck, outcome, sandbox_id_of,
    truth_checks::{cri_calls, deliveries, disconnected_at, ms, note_at, Delivery},
    KillOnDrop, Run, Scenario,
};
use crate::truth::{self, Outcome, Truth};

pub(super) const HUNG_TEARDOWN_HOOK: Scenario = Scenario {
    name: "hung-teardown-hook",
    about: "a plugin's StopPodSandbox hook never returns (30 s plugin timeout); the CRI StopPodSandbox outlives its 5 s deadline",
    drive: hung_teardown_hook,
    check: check_hung_teardown_hook,
};

/// A plugin's StopPodSandbox hook never returns while the pod is torn down
/// with a 5 s CRI deadline (plugin request timeout 30 s): plugin `hung`
/// (idx 10) hangs on STOP_POD_SANDBOX, `plain` (idx 20) answers everything.
/// The pod has its own network namespace (the lab's bridge CNI network).
///
/// What containerd 1.7.24 did (lab runs; `verify` prints the facts of each
/// run):
/// - StopPodSandbox stops the sandbox container first, then calls the NRI
///   StopPodSandbox hook synchronously: `hung` received it 30-100 ms into
///   the call and never answered.
/// - The hook's NRI call runs under the CRI request's context (with the
///   30 s plugin timeout under it), so it ends when the CRI call does, at
///   5 s; the 30 s plugin timeout never comes into play (whatever the
///   hold). How it ends is a race between the client's deadline and the
///   server's own one (from the grpc-timeout header):
///   - in about 6 runs of 10 the server's deadline comes first: `closing
///     plugin 10-hung, failed to handle event 2: context deadline
///     exceeded`; containerd disconnects `hung`, then sends `plain` the
///     event with the expired context and either takes its answer or
///     disconnects it too with the same message (both seen; which one
///     looked random, perhaps Go's select between two ready cases);
///   - otherwise the client's cancel comes first: `NRI sandbox stop
///     notification failed error="context canceled"`; that error does not
///     make the NRI adaptation close a plugin: `hung` stays connected, and
///     `plain` is skipped for this event (it never gets STOP_POD_SANDBOX).
/// - containerd then tears the network down with the expired context and
///   fails: "failed to destroy network for sandbox ...: plugin
///   type="loopback" failed (delete): ... context deadline exceeded". The
///   client sees either its own deadline or (when this error comes back
///   first) that error, code Unknown, at ~5 s. With a host-network pod
///   there is no network to fail on and containerd "returns successfully"
///   right at the deadline: in 1 of ~16 runs the client got that OK before
///   its own timer fired, so this scenario uses a network namespace to make
///   the first StopPodSandbox fail every time.
/// - The unanswered request stays open on `hung`'s connection if it is
///   still connected (ttrpc has no cancel message).
/// - The next StopPodSandbox succeeds (the network teardown, ~30-60 ms)
///   without calling any NRI hook again; RemoveContainer and
///   RemovePodSandbox go to the plugins still connected.
///
/// So the pod is stuck only while the CRI call is in flight; with
/// NRI_TRACE_LAB_HOLD_SECS the scenario still waits that long after the
/// failed call (the hook unanswered, the pod not yet stopped for CRI)
/// before tearing down again, as busy-mount does. The hold does not need
/// to stay under the 30 s plugin timeout: containerd abandoned the hook at
/// the CRI deadline already.
///
/// Notes written (exact formats):
/// - `pod hung-teardown sandbox ID`
/// - `StopPodSandbox hook of plugin hung pending for sandbox ID`
///   (written while the CRI StopPodSandbox is in flight)
/// - `teardown with the hook hung: failed: ...` (or `succeeded`)
/// - `hung hook kept N s more` (only with NRI_TRACE_LAB_HOLD_SECS)
fn hung_teardown_hook(r: &mut Run) -> Result<()> {
    r.up("30s")?;
    r.plugin("hung", "10", &["--on", "STOP_POD_SANDBOX=hang"])?;
    r.plugin("plain", "20", &[])?;
    let out = r.driver(&["up", "--name", "hung-teardown", "--netns"])?;
    let sandbox = sandbox_id_of(&out)?;
    r.note(&format!("pod hung-teardown sandbox {sandbox}"))?;
    let mut down = KillOnDrop(Some(r.driver_spawn(&[
        "--request-timeout-ms",
        "5000",
        "down",
        "--sandbox-id",
        &sandbox,
    ])?));
    wait_hung_stop(r, &sandbox)?;
    let first = down.wait("cri-driver down");
    r.note(&format!("teardown with the hook hung: {}", outcome(&first)))?;
    hold_stuck(r, "hung hook")?;
    r.driver(&["down", "--sandbox-id", &sandbox])?;
    Ok(())
}

fn check_hung_teardown_hook(t: &[Truth], facts: &mut Vec<String>) -> Result<()> {
    let calls = cri_calls(t);
    let stops: Vec<_> = calls.iter().filter(|c| c.0 == "StopPodSandbox").collect();
    let first = stops.first().context("no StopPodSandbox")?;
    // The client's deadline, or the runtime's error from the network
    // teardown it tried with the expired context (see
    // hung_teardown_hook): failed, either way.
    ensure!(
        !matches!(first.3, Outcome::Ok),
        "the first StopPodSandbox succeeded ({:.1} ms)",
        ms(first.2)
    );
    let hung = deliveries(t, "hung");
    let hook = unanswered_stop(&hung)?;
    // The call's start and end, for the hook's place in it.
    let (start, end) = truth::cri_spans(t, "StopPodSandbox")
        .next()
        .context("no StopPodSandbox")?;
    ensure!(
        (start..=end).contains(&hook.recv),
        "the hook was not delivered during the first StopPodSandbox"
    );
    facts.push(format!(
        "plugin hung received StopPodSandbox({:?}) {:.1} ms into the CRI call and never answered",
        hook.pod,
        ms(hook.recv - start)
    ));
    facts.push(format!(
        "the first CRI StopPodSandbox failed after {:.1} ms: {}",
        ms(first.2),
        match first.3 {
            Outcome::DeadlineExceeded => "client deadline exceeded".to_string(),
            o => format!("{o:?}"),
        }
    ));
    let removed = calls
        .iter()
        .any(|c| c.0 == "RemovePodSandbox" && matches!(c.3, Outcome::Ok));
    ensure!(removed, "the pod was never removed");
    let later: Vec<String> = stops
        .iter()
        .skip(1)
        .map(|c| format!("{:?} in {:.1} ms", c.3, ms(c.2)))
        .collect();
    facts.push(format!(
        "later StopPodSandbox: {}; RemovePodSandbox ok",
        later.join(", ")
    ));
    // containerd's doing, reported as found (it varies from run to
    // run: see hung_teardown_hook).
    let removal = truth::cri_spans(t, "RemovePodSandbox")
        .next_back()
        .map_or(u64::MAX, |(start, _)| start);
    let rel = |at: u64| {
        let d = at as f64 - end as f64;
        format!("{:+.1} ms from the deadline", d / 1e6)
    };
    for p in ["hung", "plain"] {
        let stop = deliveries(t, p)
            .into_iter()
            .filter(|x| x.event == Some("STOP_POD_SANDBOX"))
            .map(|x| rel(x.recv))
            .collect::<Vec<_>>();
        let gone = disconnected_at(t, p);
        facts.push(format!(
            "{p}: StopPodSandbox deliveries at {stop:?}; {}",
            match gone {
                Some((at, reason)) if at < removal => format!(
                    "disconnected before the pod was removed, {} ({reason})",
                    rel(at)
                ),
                Some((_, reason)) => {
                    format!("stayed connected until after the pod was removed ({reason})")
                }
                None => "never disconnected".into(),
            }
        ));
    }
    Ok(())
}

/// Wait until plugin `hung` holds a StopPodSandbox request unanswered (it
/// records one at once: nri_plugin/plugin.rs), and note it.
fn wait_hung_stop(r: &Run, sandbox: &str) -> Result<()> {
    let t0 = std::time::Instant::now();
    loop {
        let hooked = truth::read(&r.truth).unwrap_or_default().iter().any(|t| {
            matches!(t, Truth::Nri { plugin, event: Some(e), reply_mono_ns: None, .. }
                if plugin == "hung" && e == "STOP_POD_SANDBOX")
        });
        if hooked {
            break;
        }
        ensure!(
            t0.elapsed() < Duration::from_secs(10),
            "plugin hung got no StopPodSandbox within 10 s"
        );
        sleep(Duration::from_millis(20));
    }
    r.note(&format!(
        "StopPodSandbox hook of plugin hung pending for sandbox {sandbox}"
    ))
}

pub(super) const HUNG_TEARDOWN_CLIENT_GONE: Scenario = Scenario {
    name: "hung-teardown-client-gone",
    about: "a plugin's StopPodSandbox hook never returns; the CRI client is killed 1 s into the call (8 s deadline): containerd keeps the plugin connected with the request open",
    drive: hung_teardown_client_gone,
    check: check_hung_teardown_client_gone,
};

/// hung-teardown-client-gone: as hung-teardown-hook, but the CRI client
/// goes away (killed, as kubelet is when it restarts) 1 s into the
/// StopPodSandbox whose hook hangs, long before the call's 8 s deadline.
/// containerd's context is then cancelled, not expired, and its NRI
/// adaptation closes a plugin only on an expired one (nri
/// `pkg/adaptation/plugin.go` `isFatalError`: `context.DeadlineExceeded`,
/// not `context.Canceled`): `hung` stays connected with the request open
/// (ttrpc has no cancel message), and nothing on the NRI wire marks when
/// containerd stopped waiting. Once the request's deadline has passed
/// (8.5 s after the hook came) a second `down` stops and removes the pod;
/// `hung` gets the later events on the same connection.
///
/// Notes written (exact formats):
/// - `pod client-gone sandbox ID`
/// - `StopPodSandbox hook of plugin hung pending for sandbox ID`
/// - `cri-driver killed during StopPodSandbox`
/// - `second teardown: succeeded` (or `failed: ...`)
fn hung_teardown_client_gone(r: &mut Run) -> Result<()> {
    r.up("30s")?;
    r.plugin("hung", "10", &["--on", "STOP_POD_SANDBOX=hang"])?;
    r.plugin("plain", "20", &[])?;
    let out = r.driver(&["up", "--name", "client-gone"])?;
    let sandbox = sandbox_id_of(&out)?;
    r.note(&format!("pod client-gone sandbox {sandbox}"))?;
    let down = KillOnDrop(Some(r.driver_spawn(&[
        "--request-timeout-ms",
        "8000",
        "down",
        "--sandbox-id",
        &sandbox,
    ])?));
    wait_hung_stop(r, &sandbox)?;
    // The hook came less than 8 s before its deadline (the StopPodSandbox
    // call's, which began before it).
    let hooked = std::time::Instant::now();
    sleep(Duration::from_secs(1));
    drop(down);
    r.note("cri-driver killed during StopPodSandbox")?;
    sleep(Duration::from_millis(8500).saturating_sub(hooked.elapsed()));
    let second = r.driver(&["down", "--sandbox-id", &sandbox]);
    r.note(&format!("second teardown: {}", outcome(&second)))?;
    second.map(|_| ())
}

fn check_hung_teardown_client_gone(t: &[Truth], facts: &mut Vec<String>) -> Result<()> {
    let killed = note_at(t, "cri-driver killed during StopPodSandbox")
        .context("no note of the driver's kill")?;
    let hung = deliveries(t, "hung");
    let hook = unanswered_stop(&hung)?;
    ensure!(hook.recv < killed, "the hook came after the kill");
    // Still connected: later events reach it.
    let later: Vec<&str> = hung
        .iter()
        .filter(|x| x.recv > killed)
        .filter_map(|x| x.event)
        .collect();
    ensure!(
        !later.is_empty(),
        "plugin hung got nothing after the client went"
    );
    let gone = disconnected_at(t, "hung");
    ensure!(
        gone.is_none_or(|(g, _)| hung.iter().all(|x| x.recv < g)),
        "plugin hung was disconnected before its last delivery"
    );
    let removed = cri_calls(t)
        .iter()
        .any(|c| c.0 == "RemovePodSandbox" && matches!(c.3, Outcome::Ok));
    ensure!(removed, "the pod was never removed");
    facts.push(format!(
        "plugin hung received StopPodSandbox {:.1} ms before the client was killed and never answered; it stayed connected and got {} after",
        ms(killed - hook.recv),
        later.join(", ")
    ));
    Ok(())
}

/// Plugin hung's StopPodSandbox delivery, which it never answered.
fn unanswered_stop<'a, 'b>(hung: &'b [Delivery<'a>]) -> Result<&'b Delivery<'a>> {
    let hook = hung
        .iter()
        .find(|x| x.event == Some("STOP_POD_SANDBOX"))
        .context("plugin hung never got StopPodSandbox")?;
    ensure!(hook.reply.is_none(), "plugin hung answered StopPodSandbox");
    Ok(hook)
}
