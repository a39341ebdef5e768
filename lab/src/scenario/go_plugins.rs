//! The Go NRI plugins of the lab and their scenarios: go-nri-plugin on
//! the NRI project's own stubs (`go-plugins`), and the NRI project's
//! logger plugin as a second witness beside a test plugin
//! (`upstream-witness`). The helpers that build and start them serve
//! other scenarios too (`adjustment-rejected`, the late-attach ones).

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
    thread::sleep,
    time::Duration,
};

use anyhow::{bail, ensure, Context, Result};

use super::{
    truth_checks::{
        all_cri_ok, check_handshake, check_pod_order, is_crio, note_at, plugin_event_at, pods_of,
        runtime_of,
    },
    Run, Scenario,
};
use crate::{
    labctl::Lab,
    truth::{Outcome, PluginEvent, Truth},
};

pub(super) const UPSTREAM_WITNESS: Scenario = Scenario {
    name: "upstream-witness",
    about: "the NRI project's own logger plugin (built offline from Debian's sources) witnesses 2 lifecycles beside a test plugin",
    drive: upstream_witness,
    check: check_upstream_witness,
};

/// lab/upstream-logger.sh: the upstream NRI logger plugin, built offline.
pub(super) fn upstream_logger(args: &[&str]) -> Command {
    let mut c = Command::new("bash");
    c.arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("upstream-logger.sh"))
        .args(args);
    c
}

/// The NRI project's logger plugin and a test plugin watch the same two pod
/// lifecycles. The logger's log is turned into truth notes
/// ("upstream-logger: EVENT KIND ID") so that `verify` compares the two
/// witnesses from the truth file alone.
fn upstream_witness(r: &mut Run) -> Result<()> {
    for step in ["install", "build"] {
        let st = upstream_logger(&[step]).status()?;
        ensure!(st.success(), "upstream-logger.sh {step} failed ({st})");
    }
    r.up("2s")?;
    r.plugin("alpha", "10", &[])?;
    let log = start_upstream_logger(r)?;
    r.lifecycle("witness", 2, 1, 1)?;
    r.lab.down()?;
    for (event, kind, id) in parse_logger_log(&std::fs::read_to_string(&log)?) {
        r.note(&format!("upstream-logger: {event} {kind} {id}"))?;
    }
    Ok(())
}

fn check_upstream_witness(t: &[Truth], facts: &mut Vec<String>) -> Result<()> {
    all_cri_ok(t)?;
    // (event, id) in delivery order, per witness: pod events by pod
    // id, container events by container id.
    let logger: Vec<(String, String)> = t
        .iter()
        .filter_map(|x| match x {
            Truth::Note { text, .. } => text.strip_prefix("upstream-logger: "),
            _ => None,
        })
        .filter_map(|n| {
            let v: Vec<&str> = n.split(' ').collect();
            let pod_event = v.first()?.ends_with("POD_SANDBOX");
            let kind = if pod_event { "pod" } else { "container" };
            (v.len() == 3 && v[1] == kind).then(|| (v[0].to_string(), v[2].to_string()))
        })
        .collect();
    let alpha: Vec<(String, String)> = t
        .iter()
        .filter_map(|x| match x {
            Truth::Nri {
                plugin,
                event: Some(ev),
                pod,
                container,
                ..
            } if plugin == "alpha" => {
                let id = if ev.ends_with("POD_SANDBOX") {
                    pod.as_ref().map(|p| p.id.clone())
                } else {
                    container.as_ref().map(|c| c.id.clone())
                };
                id.map(|id| (ev.clone(), id))
            }
            _ => None,
        })
        .collect();
    ensure!(
        !logger.is_empty(),
        "the upstream logger's log names no event"
    );
    ensure!(
        logger == alpha,
        "the two witnesses disagree:\n upstream logger: {logger:?}\n test plugin:     {alpha:?}"
    );
    let pods = logger.iter().filter(|e| e.0 == "RUN_POD_SANDBOX").count();
    facts.push(format!(
        "the upstream logger and the test plugin saw the same {} events in the same order ({pods} pods)",
        logger.len()
    ));
    Ok(())
}

/// Start the upstream logger (index 99, logging to `nri-logger.log` in the
/// run's directory) and wait until it has synchronized; its log's path.
pub(super) fn start_upstream_logger(r: &mut Run) -> Result<PathBuf> {
    let log = r.out.join("nri-logger.log");
    let _ = std::fs::remove_file(&log);
    let child = upstream_logger(&["run", "-idx", "99", "-name", "upstream-logger", "-log-file"])
        .arg(&log)
        .stdout(Stdio::null())
        .spawn()?;
    r.plugins.push(child);
    // The logger logs Synchronize once it is registered and synchronized.
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
    Ok(log)
}

/// (EVENT, "pod"|"container", id) per object dump in the upstream logger's
/// log. Its format (plugins/logger in containerd/nri 0.6.1, logrus text): a
/// line `msg="<Event>: pod:"` or `msg="<Event>: container:"` starts a YAML
/// dump whose lines are `msg="<Event>:    <yaml>"`; the first `id:` is the
/// object's id. Event names become NRI's enum style (RunPodSandbox ->
/// RUN_POD_SANDBOX).
pub fn parse_logger_log(text: &str) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    let mut open: Option<(String, String)> = None;
    for line in text.lines() {
        let Some(msg) = line
            .split("msg=\"")
            .nth(1)
            .and_then(|m| m.strip_suffix('"'))
        else {
            continue;
        };
        let Some((event, rest)) = msg.split_once(':') else {
            continue;
        };
        match rest.trim() {
            "pod:" | "container:" => {
                open = Some((
                    event.to_string(),
                    rest.trim().trim_end_matches(':').to_string(),
                ));
            }
            r if r.starts_with("id: ") => {
                if let Some((ev, kind)) = open.take().filter(|(ev, _)| ev == event) {
                    out.push((enum_style(&ev), kind, r["id: ".len()..].trim().to_string()));
                }
            }
            _ => {}
        }
    }
    out
}

fn enum_style(camel: &str) -> String {
    let mut s = String::new();
    for (i, c) in camel.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            s.push('_');
        }
        s.push(c.to_ascii_uppercase());
    }
    s
}

/// `go-plugins` ([`GO_PLUGINS`] is its plugins' list).
pub(super) const GO_PLUGINS_SCENARIO: Scenario = Scenario {
    name: "go-plugins",
    about: "go-nri-plugin, on the NRI project's own Go stub (built by lab/go-nri-plugin.sh through the Go module proxy), as external plugins registered before the observer attaches: 10-go12 on the v0.12.2 stub, 20-go08 on the v0.8.0 stub; then 2 lifecycles. NRI 0.12 runtimes (containerd 2.3) send go12 a method per event and go08 its first one too, which it answers Unimplemented, then StateChange; older runtimes send both StateChange",
    drive: go_plugins,
    check: check_go_plugins,
};

/// The plugins of `go-plugins`: (name, index, NRI stub version), each an
/// external go-nri-plugin registered before the observer attaches.
pub const GO_PLUGINS: [(&str, &str, &str); 2] =
    [("go12", "10", "v0.12.2"), ("go08", "20", "v0.8.0")];

/// lab/go-nri-plugin.sh: builds go-nri-plugin for each of `versions`
/// (through the Go module proxy; idempotent, 0.4 s when up to date, a
/// cold build of both about 2 min) and gives each binary's path, as the
/// lab builds its runtimes when a scenario needs them.
pub fn go_nri_plugin(lab: &Lab, versions: &[&str]) -> Result<Vec<PathBuf>> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("go-nri-plugin.sh");
    let sh = |args: &[&str]| {
        let mut c = Command::new("bash");
        c.arg(&script).args(args).env("NRI_TRACE_LAB_DIR", &lab.dir);
        c
    };
    let mut build = vec!["build"];
    build.extend_from_slice(versions);
    let st = sh(&build)
        .stdout(Stdio::null())
        .status()
        .context("running go-nri-plugin.sh build")?;
    ensure!(
        st.success(),
        "go-nri-plugin.sh build {} failed ({st}); it needs Go and the Go module proxy \
         (docs/lab.md, go-nri-plugin)",
        versions.join(" ")
    );
    versions
        .iter()
        .map(|v| {
            let out = sh(&["path", v]).output().context("go-nri-plugin.sh path")?;
            ensure!(
                out.status.success(),
                "go-nri-plugin.sh path {v} failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
            let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
            ensure!(
                !path.is_empty(),
                "go-nri-plugin.sh path {v} printed nothing"
            );
            Ok(PathBuf::from(path))
        })
        .collect()
}

/// Start go-nri-plugin `bin` as `idx`-`name` with `args`, dialing the
/// lab's NRI socket itself and writing to the run's truth file (its log
/// beside it), and wait for its Synchronize.
pub(super) fn start_go_plugin(
    r: &mut Run,
    bin: &Path,
    name: &str,
    idx: &str,
    args: &[&str],
) -> Result<()> {
    let log = std::fs::File::create(r.out.join(format!("plugin-{idx}-{name}.log")))?;
    let child = Command::new(bin)
        .arg("-socket")
        .arg(r.lab.nri_socket())
        .args(["-idx", idx, "-name", name, "-truth"])
        .arg(&r.truth)
        .args(args)
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .with_context(|| format!("starting {} as {idx}-{name}", bin.display()))?;
    r.plugins.push(child);
    let synced = |e: &PluginEvent| matches!(e, PluginEvent::Synchronized { .. });
    r.wait_plugin(name, synced, Duration::from_secs(10))
}

/// `go-plugins`: go-nri-plugin on the v0.12.2 and on the v0.8.0 stub, each
/// dialing the lab's NRI socket itself (`-socket`, `-idx`, `-name`, Go's
/// flag forms: nri-trace, attached after their registration, names them
/// from these), registered and synchronized before the observer attaches;
/// then two pod lifecycles. Each writes the truth of every request as it
/// crossed its socket (lab/go-nri-plugin/wire.go).
fn go_plugins(r: &mut Run) -> Result<()> {
    let versions: Vec<&str> = GO_PLUGINS.iter().map(|p| p.2).collect();
    let bins = go_nri_plugin(&r.lab, &versions)?;
    r.lab.up("2s")?;
    for ((name, idx, _), bin) in GO_PLUGINS.iter().zip(&bins) {
        start_go_plugin(r, bin, name, idx, &[])?;
    }
    r.note("all plugins registered")?;
    r.attach_observer()?;
    r.lifecycle("goplug", 2, 1, 1)?;
    Ok(())
}

fn check_go_plugins(t: &[Truth], facts: &mut Vec<String>) -> Result<()> {
    let n = all_cri_ok(t)?;
    let attached = note_at(t, "all plugins registered").context("no registration note")?;
    let pods = pods_of(t, "goplug");
    ensure!(pods.len() == 2, "expected 2 pods, truth has {pods:?}");
    let (runtime, version) = runtime_of(t, "go12")?;
    let per_event = per_event_methods(runtime, version);
    for (p, idx, stub) in GO_PLUGINS {
        check_handshake(t, p, true)?;
        let registered = plugin_event_at(t, p, |e| matches!(e, PluginEvent::Registered));
        ensure!(
            registered.is_some_and(|r| r < attached),
            "plugin {idx}-{p} did not register before the observer attached"
        );
        check_pod_order(t, p, &pods)?;
        // The plugin's event deliveries in the order it got them.
        let got: Vec<(&str, &str, &Outcome, Option<&str>)> = t
            .iter()
            .filter_map(|x| match x {
                Truth::Nri {
                    plugin,
                    method,
                    event: Some(e),
                    pod,
                    outcome,
                    ..
                } if plugin == p => Some((
                    method.as_str(),
                    e.as_str(),
                    outcome,
                    pod.as_ref().map(|p| p.id.as_str()),
                )),
                _ => None,
            })
            .collect();
        let unimplemented = |o: &Outcome| matches!(o, Outcome::Error { code, .. } if *code == 12);
        let refused = got.iter().filter(|g| unimplemented(g.2)).count();
        // A plugin on the v0.8.0 stub has no per-event method: an
        // NRI 0.12 runtime tries the first event's, gets
        // Unimplemented (ttrpc's, status 12), sends the same event
        // as StateChange at once, and StateChange from then on.
        let old_stub = stub == "v0.8.0";
        let rest = if per_event && old_stub {
            let [(m0, e0, _, pod0), (m1, e1, o1, pod1), ..] = got[..] else {
                bail!("plugin {p}: {} event deliveries", got.len());
            };
            ensure!(
                refused == 1 && unimplemented(got[0].2),
                "plugin {p} (v0.8.0 stub) on {runtime} {version}: expected its first \
                 event delivery, and only that, answered Unimplemented; got {:?}",
                got.iter()
                    .map(|g| format!("{} {} {:?}", g.0, g.1, g.2))
                    .collect::<Vec<_>>()
            );
            ensure!(
                (m0, e0) == ("RunPodSandbox", "RUN_POD_SANDBOX")
                    && (m1, e1) == ("StateChange", "RUN_POD_SANDBOX")
                    && pod0 == pod1
                    && matches!(o1, Outcome::Ok),
                "plugin {p}: the refused RunPodSandbox was not followed by StateChange \
                 RUN_POD_SANDBOX of its pod: {:?}",
                &got[..2]
            );
            &got[1..]
        } else {
            ensure!(
                refused == 0,
                "plugin {p} answered {refused} requests Unimplemented"
            );
            &got[..]
        };
        for (m, e, o, _) in rest {
            ensure!(
                matches!(o, Outcome::Ok),
                "plugin {p}: {m} {e} answered {o:?}"
            );
            let want = event_method(e, per_event && !old_stub);
            ensure!(
                *m == want,
                "plugin {p} ({stub} stub) on {runtime} {version}: {e} came as {m}, \
                 expected {want}"
            );
        }
        // Pod: RUN, STOP, REMOVE; its container: CREATE,
        // POST_CREATE, START, POST_START, STOP, REMOVE; and where
        // the v0.12 stub subscribes to it, VALIDATE_CONTAINER_ADJUSTMENT.
        let per_pod = if per_event && !old_stub { 10 } else { 9 };
        ensure!(
            rest.len() == per_pod * pods.len(),
            "plugin {p}: {} events answered, expected {per_pod} for each of {} pods",
            rest.len(),
            pods.len()
        );
        let mut methods: Vec<&str> = got.iter().map(|g| g.0).collect();
        methods.sort_unstable();
        methods.dedup();
        facts.push(format!(
            "{idx}-{p} ({stub} stub) on {runtime} {version}: {} events, {refused} \
             answered Unimplemented; methods {methods:?}",
            got.len()
        ));
    }
    facts.push(format!(
        "{n} CRI calls, all ok; both plugins registered before the observer attached"
    ));
    Ok(())
}

/// Whether a runtime sends each pod and container event as its own ttrpc
/// method (NRI v0.12's RunPodSandbox, StopPodSandbox, ...; StateChange
/// only to a plugin that answers one Unimplemented), by the name and
/// version it gives in NRI Configure: containerd from 2.3 (NRI v0.12.0).
/// containerd 1.7 (NRI 0.6.1), 2.1 (0.8.0), 2.2 (0.11.0) and CRI-O 1.33-1.36
/// (0.9.1-pre to 0.11.0) send StateChange.
pub fn per_event_methods(runtime: &str, version: &str) -> bool {
    let version = version.strip_prefix('v').unwrap_or(version);
    let mut parts = version.split(['.', '~', '+', '-']);
    let major: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    let minor: u32 = parts.next().and_then(|p| p.parse().ok()).unwrap_or(0);
    !is_crio(runtime) && (major, minor) >= (2, 3)
}

/// [`per_event_methods`] of the runtime that configured plugin `name`, by
/// its own record of NRI Configure.
pub fn per_event_methods_of(t: &[Truth], name: &str) -> Result<bool> {
    let (runtime, version) = runtime_of(t, name)?;
    Ok(per_event_methods(runtime, version))
}

/// The ttrpc method that carries NRI event `event` (RUN_POD_SANDBOX) to a
/// plugin: with `per_event` the event's own method (RunPodSandbox);
/// else StateChange, but for the events that always had a method of their
/// own (CreateContainer, UpdateContainer, StopContainer).
pub fn event_method(event: &str, per_event: bool) -> String {
    let mut camel = String::new();
    for w in event.split('_') {
        let mut c = w.chars();
        if let Some(f) = c.next() {
            camel.push(f.to_ascii_uppercase());
            camel.push_str(&c.as_str().to_ascii_lowercase());
        }
    }
    let own = matches!(
        event,
        "CREATE_CONTAINER" | "UPDATE_CONTAINER" | "STOP_CONTAINER"
    );
    if per_event || own {
        camel
    } else {
        "StateChange".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// NRI's per-event methods by the runtime's Configure version, and the
    /// method each event comes as.
    #[test]
    fn per_event_methods_by_version() {
        assert!(!per_event_methods("containerd", "1.7.24~ds1"));
        assert!(!per_event_methods("containerd", "2.1.9+unknown"));
        assert!(!per_event_methods("containerd", "v2.2.9"));
        assert!(per_event_methods("containerd", "v2.3.7"));
        assert!(per_event_methods("containerd", "v2.4.0"));
        assert!(!per_event_methods("cri-o", "1.36.3"));
        assert_eq!(event_method("RUN_POD_SANDBOX", true), "RunPodSandbox");
        assert_eq!(event_method("RUN_POD_SANDBOX", false), "StateChange");
        assert_eq!(
            event_method("VALIDATE_CONTAINER_ADJUSTMENT", true),
            "ValidateContainerAdjustment"
        );
        assert_eq!(event_method("STOP_CONTAINER", false), "StopContainer");
        assert_eq!(event_method("POST_START_CONTAINER", false), "StateChange");
        assert_eq!(
            event_method("POST_START_CONTAINER", true),
            "PostStartContainer"
        );
    }

    #[test]
    fn logger_log_is_parsed() {
        // Real lines from the upstream logger (containerd/nri 0.6.1).
        let log = r#"time="2026-11-21T14:19:27Z" level=info msg="Synchronize:    null"
time="2026-11-21T14:19:27Z" level=info msg="RunPodSandbox: pod:"
time="2026-11-21T14:19:27Z" level=info msg="RunPodSandbox:    annotations:"
time="2026-11-21T14:19:27Z" level=info msg="RunPodSandbox:    id: 087f32b0fd03"
time="2026-11-21T14:19:27Z" level=info msg="RunPodSandbox:    uid: 121e7d69"
time="2026-11-21T14:19:27Z" level=info msg="CreateContainer: pod:"
time="2026-11-21T14:19:27Z" level=info msg="CreateContainer:    id: 087f32b0fd03"
time="2026-11-21T14:19:27Z" level=info msg="CreateContainer: container:"
time="2026-11-21T14:19:27Z" level=info msg="CreateContainer:    id: 4fca9cb67649"
"#;
        assert_eq!(
            parse_logger_log(log),
            vec![
                (
                    "RUN_POD_SANDBOX".into(),
                    "pod".into(),
                    "087f32b0fd03".into()
                ),
                (
                    "CREATE_CONTAINER".into(),
                    "pod".into(),
                    "087f32b0fd03".into()
                ),
                (
                    "CREATE_CONTAINER".into(),
                    "container".into(),
                    "4fca9cb67649".into()
                ),
            ]
        );
        assert_eq!(enum_style("PostStartContainer"), "POST_START_CONTAINER");
    }
}
