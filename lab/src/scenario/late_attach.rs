//! Late-attach and restart scenarios: what an observer attaching to a
//! node that is already busy meets. A CRI connection older than the
//! observer (`cri-late-attach` and its Go and NRI variants), pods and
//! plugins made before it (`pods-before-attach`, `plugins-before-attach`),
//! the runtime restarted under a pod (`runtime-restart`) or started after
//! the observer (`runtime-after-observer`).

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
    thread::sleep,
    time::Duration,
};

use anyhow::{ensure, Context, Result};

use super::{
    go_cri_client,
    go_plugins::{start_upstream_logger, upstream_logger},
    sandbox_id_of,
    truth_checks::{all_cri_ok, check_handshake, check_pod_order, cri_calls, note_at, pods_of},
    PluginSpec, Run, Scenario,
};
use crate::truth::{self, PluginEvent, Truth};

pub(super) const CRI_LATE_ATTACH: Scenario = Scenario {
    name: "cri-late-attach",
    about: "cri-driver makes a kubelet-like call mix on one connection; the observer attaches after the first half (its HPACK table holds entries it never saw)",
    drive: drive_cri_late_attach,
    check: |t, facts| check_cri_late_attach(CRI_LATE_ATTACH.name, t, facts),
};

fn drive_cri_late_attach(r: &mut Run) -> Result<()> {
    let mut c = r.driver_cmd(&[]);
    c.args(["mix", "--pods", "3"]);
    r.late_attach(c, "cri-driver mix")?;
    Ok(())
}

pub(super) const CRI_LATE_ATTACH_GO: Scenario = Scenario {
    name: "cri-late-attach-go",
    about: "as cri-late-attach with go-cri-client (grpc-go, kubelet's HPACK encoder; built offline from Debian's sources)",
    drive: drive_cri_late_attach_go,
    check: |t, facts| check_cri_late_attach(CRI_LATE_ATTACH_GO.name, t, facts),
};

fn drive_cri_late_attach_go(r: &mut Run) -> Result<()> {
    let bin = go_cri_client()?;
    let mut c = Command::new(bin);
    c.arg("-socket")
        .arg(r.lab.cri_socket())
        .arg("-truth")
        .arg(&r.truth)
        .args(["mix", "-pods", "3"]);
    r.late_attach(c, "go-cri-client mix")?;
    Ok(())
}

pub(super) const CRI_LATE_ATTACH_NRI: Scenario = Scenario {
    name: "cri-late-attach-nri",
    about: "as cri-late-attach with 4 pods per phase, a pre-launched test plugin and two external ones (one subscribed to every event, one to the stop events only), all registered before the observer",
    drive: drive_cri_late_attach_nri,
    check: |t, facts| check_cri_late_attach(CRI_LATE_ATTACH_NRI.name, t, facts),
};

fn drive_cri_late_attach_nri(r: &mut Run) -> Result<()> {
    prelaunched_up(r, "pre", "05")?;
    r.plugin("alpha", "10", &[])?;
    // Subscribed to the stop events only: a RemovePodSandbox's own
    // REMOVE_POD_SANDBOX does not reach it.
    r.plugin(
        "stops",
        "20",
        &["--events", "STOP_POD_SANDBOX,STOP_CONTAINER"],
    )?;
    let mut c = r.driver_cmd(&[]);
    c.args(["mix", "--pods", "4"]);
    r.late_attach_up(c, "cri-driver mix")?;
    Ok(())
}

pub(super) const CRI_LATE_ATTACH_GO_NRI: Scenario = Scenario {
    name: "cri-late-attach-go-nri",
    about: "as cri-late-attach-go with 4 pods per phase, a pre-launched test plugin, an external one and the NRI project's logger plugin, all registered before the observer",
    drive: drive_cri_late_attach_go_nri,
    check: |t, facts| check_cri_late_attach(CRI_LATE_ATTACH_GO_NRI.name, t, facts),
};

fn drive_cri_late_attach_go_nri(r: &mut Run) -> Result<()> {
    let bin = go_cri_client()?;
    for step in ["install", "build"] {
        let st = upstream_logger(&[step]).status()?;
        ensure!(st.success(), "upstream-logger.sh {step} failed ({st})");
    }
    prelaunched_up(r, "pre", "05")?;
    r.plugin("alpha", "10", &[])?;
    start_upstream_logger(r)?;
    let mut c = Command::new(bin);
    c.arg("-socket")
        .arg(r.lab.cri_socket())
        .arg("-truth")
        .arg(&r.truth)
        .args(["mix", "-pods", "4"]);
    r.late_attach_up(c, "go-cri-client mix")?;
    Ok(())
}

/// The four `cri-late-attach` scenarios: the whole call mix answered ok,
/// its count by the scenario's name.
fn check_cri_late_attach(name: &str, t: &[Truth], facts: &mut Vec<String>) -> Result<()> {
    let n = all_cri_ok(t)?;
    // 2 phases x (7 + 14 per pod), 3 pods (4 with plugins);
    // cri-driver adds a connect-time Version.
    let pods = if name.ends_with("-nri") { 4 } else { 3 };
    let tonic = !name.starts_with("cri-late-attach-go");
    let want = 2 * (7 + 14 * pods) + usize::from(tonic);
    ensure!(n == want, "expected {want} CRI calls, got {n}");
    facts.push(format!(
        "{n} CRI calls ok on one connection, observer attached mid-way"
    ));
    Ok(())
}

/// The runtime (re)started with a pre-launched test plugin `idx-name`,
/// once the runtime has configured it (the observer not attached).
fn prelaunched_up(r: &mut Run, name: &str, idx: &str) -> Result<()> {
    r.prelaunch(&PluginSpec {
        name,
        idx,
        args: &[],
    })?;
    r.lab.up("2s")?;
    let configured = |e: &PluginEvent| matches!(e, PluginEvent::Configured { .. });
    r.wait_plugin(name, configured, Duration::from_secs(10))
}

pub(super) const PODS_BEFORE_ATTACH: Scenario = Scenario {
    name: "pods-before-attach",
    about: "2 pods (one container each) made before the observer attaches, then torn down: their teardown calls name them only by id",
    drive: drive_pods_before_attach,
    check: check_pods_before_attach,
};

fn drive_pods_before_attach(r: &mut Run) -> Result<()> {
    r.lab.up("2s")?;
    let ids = ["early-0", "early-1"]
        .into_iter()
        .map(|name| sandbox_id_of(&r.driver(&["up", "--name", name])?))
        .collect::<Result<Vec<_>>>()?;
    r.attach_observer()?;
    for id in &ids {
        r.driver(&["down", "--sandbox-id", id])?;
    }
    Ok(())
}

fn check_pods_before_attach(t: &[Truth], facts: &mut Vec<String>) -> Result<()> {
    let n = all_cri_ok(t)?;
    let up = cri_calls(t)
        .iter()
        .filter(|c| c.0 == "RunPodSandbox")
        .count();
    ensure!(up == 2, "expected 2 RunPodSandbox calls, got {up}");
    facts.push(match note_at(t, truth::OBSERVER_ATTACHED) {
        Some(at) => {
            format!("{n} CRI calls ok; the observer attached at {at} ns, after both pods ran")
        }
        None => format!("{n} CRI calls ok (no observer)"),
    });
    Ok(())
}

pub(super) const PLUGINS_BEFORE_ATTACH: Scenario = Scenario {
    name: "plugins-before-attach",
    about: "seven plugins registered before the observer attaches (external: --name/--idx flags, an NN-name binary with a name past comm's 15 bytes, an -idx-only binary, the upstream logger with Go's -idx/-name; pre-launched: flags, a bare NN-name binary), then 2 lifecycles",
    drive: plugins_before_attach,
    check: check_plugins_before_attach,
};

/// The plugins of `plugins-before-attach`: (name, idx) as each registers.
pub const BEFORE_ATTACH_PLUGINS: [(&str, &str); 7] = [
    ("alpha", "10"),
    ("gamma", "30"),
    ("pre-plain", "35"),
    ("delta-long-plugin-name", "40"),
    ("epsilon", "50"),
    ("omega", "60"),
    ("upstream-logger", "99"),
];

/// Every plugin registers (and is configured and synchronized) before the
/// observer attaches, each named the way real plugins are: what nri-trace
/// sees of them is their process (argv, comm, environment), not their
/// RegisterPlugin. The names and indexes are in
/// [`BEFORE_ATTACH_PLUGINS`]; the test plugin finds a config file beside
/// its argv[0] (`<argv0>.json`).
fn plugins_before_attach(r: &mut Run) -> Result<()> {
    for step in ["install", "build"] {
        let st = upstream_logger(&[step]).status()?;
        ensure!(st.success(), "upstream-logger.sh {step} failed ({st})");
    }
    let truth = r.truth.display().to_string();
    let json = |name: Option<&str>, idx: Option<&str>| {
        serde_json::json!({ "name": name, "idx": idx, "truth": truth }).to_string()
    };
    // Pre-launched: 30-gamma, the lab's wrapper script (exec with --name
    // --idx), and 35-pre-plain, the binary itself as NN-name with no
    // arguments (containerd execs plugin_path/NN-name).
    r.prelaunch(&PluginSpec {
        name: "gamma",
        idx: "30",
        args: &[],
    })?;
    let dir = r.lab.plugin_dir();
    symlink(&r.bins.plugin, &dir.join("35-pre-plain"))?;
    std::fs::write(dir.join("35-pre-plain.json"), json(None, None))?;
    r.lab.up("2s")?;
    let configured = |e: &PluginEvent| matches!(e, PluginEvent::Configured { .. });
    for p in ["gamma", "pre-plain"] {
        r.wait_plugin(p, configured, Duration::from_secs(10))?;
    }
    // External, clap's --name / --idx (one with `=`).
    r.external(&PluginSpec {
        name: "alpha",
        idx: "10",
        args: &[],
    })?;
    // The others: the test plugin run as `exe` with `args`, its config
    // (if any) in `<exe>.json`.
    let bin = r.out.join("bin");
    std::fs::create_dir_all(&bin)?;
    let socket = r.lab.nri_socket().display().to_string();
    let start = |r: &mut Run, exe: &Path, args: &[&str], name: &str| -> Result<()> {
        let log = std::fs::File::create(r.out.join(format!("plugin-{name}.log")))?;
        let child = Command::new(exe)
            .args(args)
            .arg("--socket")
            .arg(&socket)
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", exe.display()))?;
        r.plugins.push(child);
        let synced = |e: &PluginEvent| matches!(e, PluginEvent::Synchronized { .. });
        r.wait_plugin(name, synced, Duration::from_secs(10))
    };
    let linked = |r: &Run, file: &str, cfg: String| -> Result<PathBuf> {
        let link = bin.join(file);
        symlink(&r.bins.plugin, &link)?;
        std::fs::write(bin.join(format!("{file}.json")), cfg)?;
        Ok(link)
    };
    // An NN-name binary, no flags (the stub's ParsePluginName convention);
    // its comm is cut at 15 bytes.
    let long = "delta-long-plugin-name";
    let exe = linked(r, &format!("40-{long}"), json(Some(long), Some("40")))?;
    start(r, &exe, &[], long)?;
    // --idx only: the name is the binary's (the stub's ensureIdentity).
    let exe = linked(r, "epsilon", json(Some("epsilon"), None))?;
    start(r, &exe, &["--idx", "50"], "epsilon")?;
    // --name=omega --idx=60.
    let exe = r.bins.plugin.clone();
    let truth_arg = format!("--truth={truth}");
    start(r, &exe, &["--name=omega", "--idx=60", &truth_arg], "omega")?;
    // The upstream logger: NRI's own stub, Go's flag forms.
    let log = r.out.join("nri-logger.log");
    let _ = std::fs::remove_file(&log);
    let child = upstream_logger(&["run", "-idx", "99", "-name", "upstream-logger", "-log-file"])
        .arg(&log)
        .stdout(Stdio::null())
        .spawn()?;
    r.plugins.push(child);
    let t0 = std::time::Instant::now();
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("Synchronize:")
    {
        ensure!(
            t0.elapsed() < Duration::from_secs(10),
            "the upstream logger did not synchronize"
        );
        sleep(Duration::from_millis(50));
    }
    r.note("all plugins registered")?;
    r.attach_observer()?;
    r.lifecycle("before-attach", 2, 1, 1)?;
    Ok(())
}

fn check_plugins_before_attach(t: &[Truth], facts: &mut Vec<String>) -> Result<()> {
    let n = all_cri_ok(t)?;
    // Noted just before the observer (if any) attaches.
    let attached = note_at(t, "all plugins registered").context("no registration note")?;
    let pods = pods_of(t, "before-attach");
    ensure!(pods.len() == 2, "expected 2 pods, truth has {pods:?}");
    for (p, idx) in BEFORE_ATTACH_PLUGINS {
        if p == "upstream-logger" {
            continue;
        }
        check_handshake(t, p, !matches!(p, "gamma" | "pre-plain"))?;
        let registered = t.iter().find_map(|x| match x {
            Truth::Plugin {
                plugin,
                index,
                what: PluginEvent::Registered,
                mono_ns,
            } if plugin == p => Some((*mono_ns, index.as_str())),
            _ => None,
        });
        ensure!(
            registered.is_some_and(|(r, i)| r < attached && i == idx),
            "plugin {p} did not register as {idx} before the observer attached: \
             {registered:?}"
        );
        check_pod_order(t, p, &pods)?;
    }
    facts.push(format!(
        "{n} CRI calls, all ok; 6 test plugins registered before the observer attached \
         and saw both pods RUN -> STOP -> REMOVE (and the upstream logger)"
    ));
    Ok(())
}

/// `link` made a symlink to `target` (replacing what was there).
fn symlink(target: &Path, link: &Path) -> Result<()> {
    let _ = std::fs::remove_file(link);
    std::os::unix::fs::symlink(target, link)
        .with_context(|| format!("linking {} to {}", link.display(), target.display()))
}

pub(super) const RUNTIME_RESTART: Scenario = Scenario {
    name: "runtime-restart",
    about: "containerd restarts while a pod runs (a pre-launched and an external plugin); the pod is torn down and another made after it",
    drive: runtime_restart,
    check: check_runtime_restart,
};

/// containerd restarted under a running pod: its pre-launched plugin is
/// launched again by the new containerd, the external one (which exits when
/// the runtime closes its connection) is started again as a DaemonSet
/// would; then the old pod is torn down and a new one made.
fn runtime_restart(r: &mut Run) -> Result<()> {
    r.prelaunch(&PluginSpec {
        name: "pre",
        idx: "05",
        args: &[],
    })?;
    r.up("2s")?;
    let configured = |e: &PluginEvent| matches!(e, PluginEvent::Configured { .. });
    r.wait_plugin("pre", configured, Duration::from_secs(10))?;
    r.plugin("alpha", "10", &[])?;
    let out = r.driver(&["up", "--name", "before"])?;
    let before = sandbox_id_of(&out)?;
    r.note("restarting containerd")?;
    r.lab.restart()?;
    r.note("containerd restarted")?;
    r.wait_plugin_times("pre", configured, 2, Duration::from_secs(10))?;
    let synced = |e: &PluginEvent| matches!(e, PluginEvent::Synchronized { .. });
    r.reap_plugins();
    let log = std::fs::File::create(r.out.join("plugin-10-alpha.again.log"))?;
    let child = Command::new(&r.bins.plugin)
        .args(r.plugin_args(&PluginSpec {
            name: "alpha",
            idx: "10",
            args: &[],
        }))
        .arg("--socket")
        .arg(r.lab.nri_socket())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()?;
    r.plugins.push(child);
    r.wait_plugin_times("alpha", synced, 2, Duration::from_secs(10))?;
    r.driver(&["down", "--sandbox-id", &before])?;
    r.lifecycle("after", 1, 1, 1)?;
    Ok(())
}

fn check_runtime_restart(t: &[Truth], facts: &mut Vec<String>) -> Result<()> {
    all_cri_ok(t)?;
    let restarted = note_at(t, "containerd restarted").context("no restart note")?;
    // What each plugin heard of the pod made before the restart,
    // after it: a fact of containerd's, not an expectation.
    for p in ["pre", "alpha"] {
        let after: Vec<String> = t
            .iter()
            .filter_map(|x| match x {
                Truth::Nri {
                    plugin,
                    event: Some(e),
                    pod: Some(pod),
                    recv_mono_ns,
                    ..
                } if plugin == p && *recv_mono_ns > restarted && pod.name == "before" => {
                    Some(e.clone())
                }
                _ => None,
            })
            .collect();
        let synced: Vec<usize> = t
            .iter()
            .filter_map(|x| match x {
                Truth::Plugin {
                    plugin,
                    what: PluginEvent::Synchronized { pods, .. },
                    ..
                } if plugin == p => Some(pods.len()),
                _ => None,
            })
            .collect();
        facts.push(format!(
            "{p}: Synchronize pod counts {synced:?}; events of pod 'before' after the restart: {after:?}"
        ));
    }
    Ok(())
}

pub(super) const RUNTIME_AFTER_OBSERVER: Scenario = Scenario {
    name: "runtime-after-observer",
    about: "the observer starts before containerd (a DaemonSet at node boot): containerd comes up after it, then 1 pod x 1 container with a pre-launched and an external plugin",
    drive: drive_runtime_after_observer,
    check: check_runtime_after_observer,
};

fn drive_runtime_after_observer(r: &mut Run) -> Result<()> {
    r.prelaunch(&PluginSpec {
        name: "pre",
        idx: "05",
        args: &[],
    })?;
    // The runtime down, the observer first; then the runtime.
    r.lab.down()?;
    r.attach_observer()?;
    r.lab.up("2s")?;
    let configured = |e: &PluginEvent| matches!(e, PluginEvent::Configured { .. });
    r.wait_plugin("pre", configured, Duration::from_secs(10))?;
    r.plugin("alpha", "10", &[])?;
    r.lifecycle("first", 1, 1, 1)?;
    Ok(())
}

fn check_runtime_after_observer(t: &[Truth], facts: &mut Vec<String>) -> Result<()> {
    let n = all_cri_ok(t)?;
    let pods = pods_of(t, "first");
    ensure!(pods.len() == 1, "expected 1 pod, truth has {pods:?}");
    for p in ["pre", "alpha"] {
        check_pod_order(t, p, &pods)?;
    }
    facts.push(format!(
        "{n} CRI calls, all ok; pre (pre-launched) and alpha (external) each saw the pod \
         RUN -> STOP -> REMOVE"
    ));
    Ok(())
}
