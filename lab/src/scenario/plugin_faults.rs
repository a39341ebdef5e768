//! Plugin fault scenarios: a plugin that hangs past the request timeout
//! (`plugin-timeout`), one that fails teardown (`teardown-error`), one
//! that registers while a CRI call is in flight (`late-registration`),
//! and a Synchronize too big for one ttrpc message (`split-synchronize`).
//! Each checks what the runtime made of it: who was disconnected, who
//! still got which event, what the CRI caller saw.

use std::{thread::sleep, time::Duration};

use anyhow::{ensure, Context, Result};

use super::{
    outcome, sandbox_id_of,
    truth_checks::{
        all_cri_ok, check_pod_order, cri_calls, deliveries, is_crio, ms, plugin_event_at,
        plugin_events, pods_of, runtime_of, Delivery,
    },
    wait_child, Run, Scenario,
};
use crate::{
    labctl::Runtime,
    truth::{self, Outcome, PluginEvent, Truth},
};

pub(super) const PLUGIN_TIMEOUT: Scenario = Scenario {
    name: "plugin-timeout",
    about: "a plugin hangs on RunPodSandbox past the 1 s request timeout and is disconnected",
    drive: drive_plugin_timeout,
    check: check_plugin_timeout,
};

fn drive_plugin_timeout(r: &mut Run) -> Result<()> {
    r.up("1s")?;
    r.plugin("hang", "10", &["--on", "RUN_POD_SANDBOX=hang"])?;
    r.plugin("plain", "20", &[])?;
    r.lifecycle("timeout", 2, 1, 1)?;
    Ok(())
}

fn check_plugin_timeout(t: &[Truth], facts: &mut Vec<String>) -> Result<()> {
    let d = deliveries(t, "hang");
    let hung: Vec<&Delivery<'_>> = d
        .iter()
        .filter(|x| x.event == Some("RUN_POD_SANDBOX"))
        .collect();
    ensure!(
        hung.len() == 1 && hung[0].reply.is_none(),
        "hang plugin should have one unanswered RunPodSandbox, has {}",
        hung.len()
    );
    let gone = plugin_events(t, "hang").into_iter().find_map(|e| match e {
        PluginEvent::Disconnected { reason } => Some(reason.clone()),
        _ => None,
    });
    let reason = gone.context("hang plugin was never disconnected")?;
    facts.push(format!(
        "hang plugin got RunPodSandbox({:?}), never answered, and was disconnected: {reason}",
        hung[0].pod
    ));
    let pods = pods_of(t, "timeout");
    check_pod_order(t, "plain", &pods)?;
    facts.push(format!(
        "plain saw both pods {pods:?} RUN -> STOP -> REMOVE"
    ));
    let later = d.iter().filter(|x| x.recv > hung[0].recv).count();
    ensure!(
        later == 0,
        "hang plugin received {later} requests after it hung"
    );
    facts.push("hang plugin received nothing after the timeout".into());
    for c in cri_calls(t).iter().filter(|c| c.0 == "RunPodSandbox") {
        facts.push(format!(
            "CRI RunPodSandbox({:?}) took {:.1} ms: {:?}",
            c.1,
            ms(c.2),
            c.3
        ));
    }
    Ok(())
}

pub(super) const TEARDOWN_ERROR: Scenario = Scenario {
    name: "teardown-error",
    about: "a low-index plugin fails StopPodSandbox and RemovePodSandbox; a higher-index one is subscribed",
    drive: drive_teardown_error,
    check: check_teardown_error,
};

fn drive_teardown_error(r: &mut Run) -> Result<()> {
    r.up("2s")?;
    let fail = [
        "--on",
        "STOP_POD_SANDBOX=error:teardown refused",
        "--on",
        "REMOVE_POD_SANDBOX=error:teardown refused",
    ];
    r.plugin("failer", "05", &fail)?;
    r.plugin("observer", "50", &[])?;
    let done = r.lifecycle("tderr", 1, 1, 1);
    if r.lab.runtime == Runtime::CriO {
        // CRI-O returns the plugin's StopPodSandbox error to the
        // driver, whose lifecycle then fails (its cleanup still
        // removes the pod): verify checks that from the truth.
        r.note(&format!("lifecycle on CRI-O: {}", outcome(&done)))?;
    } else {
        done?;
    }
    Ok(())
}

fn check_teardown_error(t: &[Truth], facts: &mut Vec<String>) -> Result<()> {
    let d = deliveries(t, "failer");
    for ev in ["STOP_POD_SANDBOX", "REMOVE_POD_SANDBOX"] {
        let x = d
            .iter()
            .find(|x| x.event == Some(ev))
            .with_context(|| format!("failer never got {ev}"))?;
        ensure!(
            matches!(x.outcome, Outcome::Error { .. }),
            "failer answered {ev} with {:?}",
            x.outcome
        );
    }
    facts.push("failer (idx 05) answered StopPodSandbox and RemovePodSandbox with an error".into());
    let (runtime, version) = runtime_of(t, "failer")?;
    for c in cri_calls(t)
        .iter()
        .filter(|c| c.0 == "StopPodSandbox" || c.0 == "RemovePodSandbox")
    {
        if c.0 == "StopPodSandbox" && is_crio(runtime) {
            // CRI-O returns a plugin's StopPodSandbox error to the
            // CRI caller and leaves the pod not stopped, so every
            // try fails alike (server/sandbox_stop_linux.go:
            // `s.nri.stopPodSandbox` errors are returned).
            ensure!(
                matches!(c.3, Outcome::Error { message, .. } if message.contains("teardown refused")),
                "{runtime} {version}: CRI StopPodSandbox: {:?}, expected the plugin's error",
                c.3
            );
            facts.push(format!(
                "{runtime} {version}: CRI StopPodSandbox failed with the plugin's error ({:.1} ms)",
                ms(c.2)
            ));
            continue;
        }
        ensure!(matches!(c.3, Outcome::Ok), "CRI {} failed: {:?}", c.0, c.3);
        facts.push(format!("CRI {} still succeeded ({:.1} ms)", c.0, ms(c.2)));
    }
    let obs = deliveries(t, "observer");
    for ev in ["RUN_POD_SANDBOX", "STOP_POD_SANDBOX", "REMOVE_POD_SANDBOX"] {
        let got = obs.iter().any(|x| x.event == Some(ev));
        facts.push(format!(
            "observer (idx 50) {} {ev}",
            if got { "received" } else { "did NOT receive" }
        ));
    }
    Ok(())
}

pub(super) const LATE_REGISTRATION: Scenario = Scenario {
    name: "late-registration",
    about: "a plugin registers while a RunPodSandbox is in flight (held 3 s by a slow plugin)",
    drive: drive_late_registration,
    check: check_late_registration,
};

fn drive_late_registration(r: &mut Run) -> Result<()> {
    r.up("5s")?;
    r.plugin("slow", "10", &["--on", "RUN_POD_SANDBOX=delay:3000"])?;
    let mut pod = r.driver_spawn(&["up", "--name", "late-pod"])?;
    sleep(Duration::from_secs(1));
    r.note("registering plugin late while RunPodSandbox(late-pod) is in flight")?;
    r.plugin("late", "20", &[])?;
    let out = wait_child(&mut pod, "cri-driver up late-pod")?;
    r.driver(&["down", "--sandbox-id", &sandbox_id_of(&out)?])?;
    Ok(())
}

fn check_late_registration(t: &[Truth], facts: &mut Vec<String>) -> Result<()> {
    all_cri_ok(t)?;
    let synced = plugin_events(t, "late").into_iter().find_map(|e| match e {
        PluginEvent::Synchronized { pods, .. } => {
            Some(pods.iter().map(|p| p.name.clone()).collect::<Vec<_>>())
        }
        _ => None,
    });
    let synced = synced.context("late plugin never synchronized")?;
    let run = deliveries(t, "late")
        .iter()
        .any(|x| x.event == Some("RUN_POD_SANDBOX") && x.pod == Some("late-pod"));
    let (runtime, version) = runtime_of(t, "late")?;
    if nri_race_closed(runtime, version) {
        // containerd 2.1 (NRI 0.8) holds a registering plugin's
        // Synchronize until the CRI calls in flight are done
        // (nri#63 closed): the late plugin hears of late-pod in
        // its Synchronize, after the held RunPodSandbox.
        let sync_at = plugin_event_at(t, "late", |e| matches!(e, PluginEvent::Synchronized { .. }))
            .context("late plugin never synchronized")?;
        // The hook in flight: the slow plugin's RUN_POD_SANDBOX.
        let run_end = deliveries(t, "slow")
            .iter()
            .find(|x| x.event == Some("RUN_POD_SANDBOX") && x.pod == Some("late-pod"))
            .and_then(|x| x.reply)
            .context("the slow plugin did not answer RunPodSandbox(late-pod)")?;
        ensure!(
            synced.iter().any(|n| n == "late-pod") && sync_at >= run_end,
            "{runtime} {version}: late plugin synchronized with {synced:?} at {sync_at}, the held RunPodSandbox(late-pod) hook was answered at {run_end}: expected Synchronize held until then, listing late-pod"
        );
        let registered = plugin_event_at(t, "late", |e| matches!(e, PluginEvent::Registered))
            .context("late plugin never registered")?;
        facts.push(format!(
            "{runtime} {version}: the late plugin registered {:.0} ms before the held RunPodSandbox(late-pod) hook was answered; its Synchronize came {:.1} ms after and listed {synced:?} (nri#63 closed)",
            ms(run_end.saturating_sub(registered)),
            ms(sync_at.saturating_sub(run_end))
        ));
    } else {
        ensure!(
            !synced.iter().any(|n| n == "late-pod") && !run,
            "late plugin heard of late-pod (synced {synced:?}, RunPodSandbox {run}): the race did not happen"
        );
        facts.push(format!("late plugin synchronized with {synced:?}: late-pod missing, and no RunPodSandbox for it (nri#63)"));
    }
    let after: Vec<&str> = deliveries(t, "late")
        .iter()
        .filter(|x| x.pod == Some("late-pod"))
        .filter_map(|x| x.event)
        .collect();
    facts.push(format!(
        "later events for late-pod at the late plugin: {after:?}"
    ));
    Ok(())
}

/// Whether a registering plugin is synchronized only when no CRI request
/// is in flight (containerd/nri#63 fixed, NRI >= 0.8's BlockPluginSync):
/// containerd 2.1 and CRI-O 1.33 (NRI 0.9.1-pre in its go.mod) and 1.36
/// (NRI 0.11.0) do it; containerd 1.7 and 2.0 do not. The lab's
/// containerd 2.2 and 2.3 say v2.2.9 and v2.3.7 (a release build's `git
/// describe`), Debian's 2.1 2.1.9+unknown.
fn nri_race_closed(runtime: &str, version: &str) -> bool {
    let version = version.strip_prefix('v').unwrap_or(version);
    let mut parts = version.split(['.', '~', '+', '-']);
    let major: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    let minor: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    if is_crio(runtime) {
        (major, minor) >= (1, 33)
    } else {
        (major, minor) >= (2, 1)
    }
}

pub(super) const SPLIT_SYNCHRONIZE: Scenario = Scenario {
    name: "split-synchronize",
    about: "12 pods (one container each) whose annotations make 5.6 MiB, then a plugin registers: NRI >= 0.7 (containerd 2.1, not 1.7) splits its Synchronize under ttrpc's 4 MiB message limit, `more` set on all but the last; then one answering without `more` (a pre-v0.7 stub) registers and is closed",
    drive: split_synchronize,
    check: check_split_synchronize,
};

/// Pods of `split-synchronize`, and the annotations that make each big.
const SPLIT_SYNC_PODS: usize = 12;
const SPLIT_SYNC_ANNOTATIONS: usize = 4;
/// One annotation's value: under the kernel's 128 KiB limit of one
/// argument (MAX_ARG_STRLEN), as the driver takes it on its command line.
const SPLIT_SYNC_ANNOTATION_BYTES: usize = 120 << 10;

/// `split-synchronize`: state too big for one ttrpc message (4 MiB,
/// containerd/ttrpc `messageLengthMax`), then a plugin registers.
/// containerd/nri v0.7+ `plugin.synchronize` tries one SynchronizeRequest;
/// ttrpc refuses it before writing (`OversizedMessageErr`, code
/// ResourceExhausted), `recalcObjsPerSyncMsg` scales the pods and
/// containers per message by max/rejected length (at most 0.9), and the
/// parts go out with `more` set on all but the last, each answered
/// (`SynchronizeResponse.more` echoing it). 12 pods x 480 KiB: 5.6 MiB,
/// two messages. NRI 0.6.1 (containerd 1.7) does not split: its
/// registration fails.
fn split_synchronize(r: &mut Run) -> Result<()> {
    r.up("5s")?;
    let blob = "x".repeat(SPLIT_SYNC_ANNOTATION_BYTES);
    let annotations: Vec<String> = (0..SPLIT_SYNC_ANNOTATIONS)
        .map(|j| format!("nri-trace.test/blob-{j}={blob}"))
        .collect();
    let mut ids = Vec::new();
    let mut names = Vec::new();
    for i in 0..SPLIT_SYNC_PODS {
        let name = format!("split-sync-{i}");
        let mut args = vec!["up", "--name", name.as_str()];
        for a in &annotations {
            args.extend(["--annotation", a.as_str()]);
        }
        ids.push(sandbox_id_of(&r.driver(&args)?)?);
        names.push(name);
    }
    r.note("registering a plugin with 12 big pods in the runtime's state")?;
    // Returns at the first Synchronized; the parts that follow are awaited
    // below, before the teardown's events.
    r.plugin("late", "10", &[])?;
    let t0 = std::time::Instant::now();
    loop {
        let t = truth::read(&r.truth).unwrap_or_default();
        let synced: std::collections::BTreeSet<String> = plugin_events(&t, "late")
            .into_iter()
            .filter_map(|e| match e {
                PluginEvent::Synchronized { pods, .. } => Some(pods.iter().map(|p| p.name.clone())),
                _ => None,
            })
            .flatten()
            .collect();
        if names.iter().all(|n| synced.contains(n)) {
            break;
        }
        ensure!(
            t0.elapsed() < Duration::from_secs(30),
            "plugin late: synchronized {synced:?} after 30 s, expected all of {names:?}"
        );
        sleep(Duration::from_millis(50));
    }
    // A plugin answering as one built on a pre-v0.7 stub (`more` false):
    // the runtime closes it after the first part ("plugin does not handle
    // split sync requests", nri v0.7+ `pkg/adaptation/plugin.go`).
    r.note("registering a plugin that answers a split Synchronize without more")?;
    r.plugin("stale", "20", &["--on", "SYNCHRONIZE=unsplit"])?;
    r.wait_plugin(
        "stale",
        |e| matches!(e, PluginEvent::Disconnected { .. }),
        Duration::from_secs(10),
    )?;
    for id in &ids {
        r.driver(&["down", "--sandbox-id", id])?;
    }
    Ok(())
}

fn check_split_synchronize(t: &[Truth], facts: &mut Vec<String>) -> Result<()> {
    let n = all_cri_ok(t)?;
    let parts: Vec<(Vec<&str>, usize)> = plugin_events(t, "late")
        .into_iter()
        .filter_map(|e| match e {
            PluginEvent::Synchronized {
                pods, containers, ..
            } => Some((pods.iter().map(|p| p.name.as_str()).collect(), *containers)),
            _ => None,
        })
        .collect();
    ensure!(
        parts.len() >= 2,
        "plugin late got {} Synchronize message(s), expected the runtime to split it: {:?}",
        parts.len(),
        parts.iter().map(|p| (p.0.len(), p.1)).collect::<Vec<_>>()
    );
    let mut pods: Vec<&str> = parts.iter().flat_map(|p| p.0.iter().copied()).collect();
    let listed = pods.len();
    pods.sort_unstable();
    pods.dedup();
    ensure!(
        listed == pods.len(),
        "a pod was synchronized twice: {parts:?}"
    );
    for i in 0..SPLIT_SYNC_PODS {
        let want = format!("split-sync-{i}");
        ensure!(
            pods.contains(&want.as_str()),
            "{want} in no Synchronize message"
        );
    }
    let containers: usize = parts.iter().map(|p| p.1).sum();
    ensure!(
        containers >= SPLIT_SYNC_PODS,
        "{containers} containers synchronized, expected at least {SPLIT_SYNC_PODS}"
    );
    // The plugin that answered without `more`: closed after the
    // first part, told nothing after it.
    let stale = plugin_events(t, "stale");
    let stale_parts = stale
        .iter()
        .filter(|e| matches!(e, PluginEvent::Synchronized { .. }))
        .count();
    ensure!(
        stale_parts == 1
            && stale
                .iter()
                .any(|e| matches!(e, PluginEvent::Disconnected { .. })),
        "plugin stale (answers without more): expected one Synchronize part, then the \
         runtime closing it; got {stale:?}"
    );
    let stale_events = t
        .iter()
        .filter(|x| matches!(x, Truth::Nri { plugin, event: Some(_), .. } if plugin == "stale"))
        .count();
    ensure!(
        stale_events == 0,
        "plugin stale got {stale_events} events after the runtime closed it"
    );
    facts.push(format!(
        "{n} CRI calls ok; Synchronize split into {} messages (pods, containers): {:?}; \
         plugin stale, answering without more, closed after its first part",
        parts.len(),
        parts.iter().map(|p| (p.0.len(), p.1)).collect::<Vec<_>>()
    ));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The versions the lab's runtimes give in NRI Configure.
    #[test]
    fn nri_race_closed_by_version() {
        assert!(!nri_race_closed("containerd", "1.7.24~ds1"));
        assert!(nri_race_closed("containerd", "2.1.9+unknown"));
        assert!(nri_race_closed("containerd", "v2.2.9"));
        assert!(nri_race_closed("containerd", "v2.3.7"));
        assert!(!nri_race_closed("containerd", "v2.0.7"));
        assert!(nri_race_closed("cri-o", "1.36.3"));
    }
}
