//! Lab scenarios: each drives the private containerd with the CRI driver and
//! fault-injecting NRI plugins, writes one ground-truth file, and checks
//! that the truth shows what the scenario intends (a slow plugin really was
//! slow, a hung one really was disconnected, ...). Later nri-trace tests
//! compare against these facts, not against assumptions.
//!
//! A scenario never reads anything but the truth file to verify itself, so
//! `verify` can run again on a saved file.
//!
//! Each scenario is a [`Scenario`] of [`SCENARIOS`]: its name, its
//! one-line description, its driver and its check, defined together in
//! the file of its theme under scenario/ (lifecycle, plugin faults, hung
//! teardown, CRI retries, late attach and restart, Terminating causes, Go
//! plugins, ...). This file holds what they share: [`Run`] and its
//! plugins, driver and truth file, [`run`], `drive` and [`verify`] by
//! the registry, and the helpers several scenario files use; what their
//! checks read from the truth is in scenario/truth_checks.rs.

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    thread::sleep,
    time::Duration,
};

use anyhow::{bail, ensure, Context, Result};

pub mod adjustment_rejected;
mod cri_retries;
mod demo;
mod go_plugins;
mod hung_teardown;
mod late_attach;
mod lifecycle;
mod plugin_faults;
mod pod_resize;
mod terminating;
mod truth_checks;

pub use cri_retries::RETRIES_SPENT;
pub use demo::demo;
pub use go_plugins::{
    event_method, go_nri_plugin, parse_logger_log, per_event_methods, per_event_methods_of,
    GO_PLUGINS,
};
pub use late_attach::BEFORE_ATTACH_PLUGINS;
pub use terminating::FuseHang;
pub(crate) use terminating::{proc_state, sigkill_pending, wchan};

use crate::{
    labctl::Lab,
    truth::{self, PluginEvent, Truth, TruthWriter},
};

/// A scenario: its name and one-line description (`nri-lab list`), the
/// driver that makes the lab do it and the check that reads the truth
/// file alone.
pub struct Scenario {
    pub name: &'static str,
    pub about: &'static str,
    /// Drives the lab (its plugins cleared, the runtime not started),
    /// writing the truth file.
    drive: fn(&mut Run) -> Result<()>,
    /// Checks that the truth shows what the scenario intends, pushing the
    /// facts it established, one line each.
    check: fn(&[Truth], &mut Vec<String>) -> Result<()>,
}

/// Every scenario, with a one-line description, its driver and its check.
pub const SCENARIOS: &[Scenario] = &[
    lifecycle::HAPPY,
    lifecycle::SLOW_PLUGIN,
    plugin_faults::PLUGIN_TIMEOUT,
    plugin_faults::TEARDOWN_ERROR,
    plugin_faults::LATE_REGISTRATION,
    cri_retries::CRI_DEADLINE_RETRY,
    lifecycle::IGNORE_SIGTERM,
    terminating::BUSY_MOUNT,
    lifecycle::LOAD,
    late_attach::CRI_LATE_ATTACH,
    cri_retries::CRI_DEADLINE_RETRY_GO,
    late_attach::PODS_BEFORE_ATTACH,
    late_attach::CRI_LATE_ATTACH_GO,
    late_attach::CRI_LATE_ATTACH_NRI,
    late_attach::CRI_LATE_ATTACH_GO_NRI,
    go_plugins::UPSTREAM_WITNESS,
    late_attach::RUNTIME_RESTART,
    terminating::UNKILLABLE,
    hung_teardown::HUNG_TEARDOWN_HOOK,
    late_attach::RUNTIME_AFTER_OBSERVER,
    hung_teardown::HUNG_TEARDOWN_CLIENT_GONE,
    lifecycle::CONTAINER_EXITS,
    lifecycle::NETNS_TEARDOWN,
    plugin_faults::SPLIT_SYNCHRONIZE,
    cri_retries::CRI_RETRY_SLOW_SANDBOX,
    adjustment_rejected::ADJUSTMENT_REJECTED,
    pod_resize::POD_RESIZE,
    CRICTL,
    late_attach::PLUGINS_BEFORE_ATTACH,
    go_plugins::GO_PLUGINS_SCENARIO,
];

/// The scenario named `name`, if [`SCENARIOS`] has it.
pub fn find(name: &str) -> Option<&'static Scenario> {
    SCENARIOS.iter().find(|s| s.name == name)
}

/// `crictl`: its driver and check are crictl.rs's, beside its crictl runs.
const CRICTL: Scenario = Scenario {
    name: "crictl",
    about: "while the driver runs 3 pod lifecycles, crictl (the CRI CLI an SRE runs on a node; sigs.k8s.io/cri-tools, built by lab/crictl.sh) lists and inspects pods and containers, stops one of 2 pods the driver made and force-removes both (pods, inspectp, ps, stopp, rmp -f) from a cgroup of its own; one plugin",
    drive: crate::crictl::drive,
    check: |t, facts| {
        facts.extend(crate::crictl::verify(t)?);
        Ok(())
    },
};

/// Paths of the lab binaries (built together in one target dir).
#[derive(Clone, Debug)]
pub struct Bins {
    pub driver: PathBuf,
    pub plugin: PathBuf,
}

impl Bins {
    /// fuse-hang, built beside the driver (same package, same target dir).
    pub fn fuse_hang(&self) -> PathBuf {
        self.driver.with_file_name("fuse-hang")
    }

    /// The binaries next to the running executable.
    pub fn beside_current_exe() -> Result<Self> {
        let exe = std::env::current_exe()?;
        let dir = exe.parent().context("executable has no directory")?;
        // Integration tests run from target/<profile>/deps.
        let dir = if dir.ends_with("deps") {
            dir.parent().unwrap_or(dir)
        } else {
            dir
        };
        Ok(Self {
            driver: dir.join("cri-driver"),
            plugin: dir.join("nri-test-plugin"),
        })
    }
}

/// One run of a scenario.
pub struct Run {
    pub name: String,
    pub lab: Lab,
    pub bins: Bins,
    /// Where the truth file and logs go.
    pub out: PathBuf,
    pub truth: PathBuf,
    plugins: Vec<Child>,
    /// Attached right after the runtime is up, detached before it goes down.
    observer: Option<Box<dyn Observer>>,
}

/// Something that watches a scenario from outside (e.g. nri-trace): it is
/// attached once the runtime is up (pre-launched plugins already
/// registered; external plugins not yet connected) and detached after the
/// scenario's last action, before the runtime goes down.
pub trait Observer {
    fn attach(&mut self, lab: &Lab, out: &Path) -> Result<()>;
    fn detach(&mut self) -> Result<()>;
}

/// A test plugin: name, index and `--on` / `--events` options.
pub struct PluginSpec<'a> {
    pub name: &'a str,
    pub idx: &'a str,
    pub args: &'a [&'a str],
}

impl Run {
    pub fn new(name: &str, lab: Lab, bins: Bins, out: &Path) -> Result<Self> {
        ensure!(
            find(name).is_some(),
            "unknown scenario {name:?}; see `nri-lab list`"
        );
        Self::unlisted(name, lab, bins, out)
    }

    /// A run that is not one of [`SCENARIOS`] (e.g. a stuck pod of
    /// `stuck.rs`): the same plugins, driver and truth file.
    pub(crate) fn unlisted(name: &str, lab: Lab, bins: Bins, out: &Path) -> Result<Self> {
        // A run starts the runtime itself, with its own request timeout and
        // pre-launched plugins (which containerd reads only when it starts):
        // a lab left up (`cargo xtask lab up`, or a run that was killed)
        // comes down first, and plugins a killed run left behind go.
        if let Some(runtime) = lab.running() {
            eprintln!(
                "lab: the lab is up ({runtime}); bringing it down so that {name} starts it with its own plugins ({})",
                lab.runtime.name()
            );
            lab.down()
                .context("bringing down the lab that was up before the scenario")?;
        }
        lab.clear_plugins()?;
        std::fs::create_dir_all(out)?;
        let truth = out.join("truth.ndjson");
        let _ = std::fs::remove_file(&truth);
        Ok(Self {
            name: name.into(),
            lab,
            bins,
            out: out.to_path_buf(),
            truth,
            plugins: vec![],
            observer: None,
        })
    }

    /// Bring the runtime up (plugin request timeout `request_timeout`) and
    /// attach the observer, if any.
    pub fn up(&mut self, request_timeout: &str) -> Result<()> {
        self.lab.up(request_timeout)?;
        self.attach_observer()
    }

    /// Attach the observer, if any, and note when in the truth.
    fn attach_observer(&mut self) -> Result<()> {
        if let Some(o) = self.observer.as_mut() {
            o.attach(&self.lab, &self.out)?;
            self.note(truth::OBSERVER_ATTACHED)?;
        }
        Ok(())
    }

    /// A client whose connection predates the observer: `cmd` runs a call
    /// mix with `--pause-file`; the observer attaches once it has paused,
    /// then it resumes on the same connection.
    fn late_attach(&mut self, cmd: Command, what: &str) -> Result<()> {
        self.lab.up("2s")?;
        self.late_attach_up(cmd, what)
    }

    /// [`Self::late_attach`] with the runtime already up (and plugins
    /// connected before the observer).
    fn late_attach_up(&mut self, mut cmd: Command, what: &str) -> Result<()> {
        let resume = self.out.join("resume");
        let _ = std::fs::remove_file(&resume);
        let mut child = cmd
            .arg("--pause-file")
            .arg(&resume)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("starting {what}"))?;
        let mut lines = std::io::BufReader::new(child.stdout.take().expect("piped"));
        let mut first = String::new();
        std::io::BufRead::read_line(&mut lines, &mut first)?;
        if !first.contains("\"paused\"") {
            let _ = child.kill();
            bail!("{what}: expected the paused line, got {first:?}");
        }
        self.note(&format!("{what} paused"))?;
        self.attach_observer()?;
        std::fs::write(&resume, b"")?;
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut lines, &mut rest)?;
        let st = child.wait()?;
        ensure!(st.success(), "{what} failed ({st})");
        self.note(&format!("{what} done: {}", rest.trim()))
    }

    pub fn note(&self, text: &str) -> Result<()> {
        TruthWriter::append(&self.truth)?.write(&Truth::Note {
            mono_ns: truth::mono_ns(),
            text: text.into(),
        })?;
        Ok(())
    }

    fn plugin_args(&self, p: &PluginSpec<'_>) -> Vec<String> {
        let mut a = vec![
            "--name".into(),
            p.name.into(),
            "--idx".into(),
            p.idx.into(),
            "--truth".into(),
            self.truth.display().to_string(),
        ];
        a.extend(p.args.iter().map(ToString::to_string));
        a
    }

    /// Install a pre-launched plugin (before `up`).
    pub fn prelaunch(&self, p: &PluginSpec<'_>) -> Result<()> {
        self.lab
            .install_prelaunched(p.idx, p.name, &self.bins.plugin, &self.plugin_args(p))?;
        Ok(())
    }

    /// Start an external plugin and wait until the runtime configured it.
    pub fn external(&mut self, p: &PluginSpec<'_>) -> Result<()> {
        let log = std::fs::File::create(self.out.join(format!("plugin-{}-{}.log", p.idx, p.name)))?;
        let child = Command::new(&self.bins.plugin)
            .args(self.plugin_args(p))
            .arg("--socket")
            .arg(self.lab.nri_socket())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", self.bins.plugin.display()))?;
        self.plugins.push(child);
        self.wait_plugin(
            p.name,
            |e| matches!(e, PluginEvent::Synchronized { .. }),
            Duration::from_secs(10),
        )
    }

    /// Wait until the truth shows `pred` for plugin `name`.
    pub fn wait_plugin(
        &self,
        name: &str,
        pred: impl Fn(&PluginEvent) -> bool,
        max: Duration,
    ) -> Result<()> {
        self.wait_plugin_times(name, pred, 1, max)
    }

    /// Wait until the truth shows `pred` `times` times for plugin `name`
    /// (a plugin started again shows its handshake again).
    pub fn wait_plugin_times(
        &self,
        name: &str,
        pred: impl Fn(&PluginEvent) -> bool,
        times: usize,
        max: Duration,
    ) -> Result<()> {
        let t0 = std::time::Instant::now();
        loop {
            let found = truth::read(&self.truth)
                .unwrap_or_default()
                .iter()
                .filter(
                    |t| matches!(t, Truth::Plugin { plugin, what, .. } if plugin == name && pred(what)),
                )
                .count()
                >= times;
            if found {
                return Ok(());
            }
            if t0.elapsed() > max {
                bail!("plugin {name}: expected event not in the truth after {max:?}");
            }
            sleep(Duration::from_millis(20));
        }
    }

    /// Run the CRI driver to completion; returns its stdout.
    pub fn driver(&self, args: &[&str]) -> Result<String> {
        let out = self
            .driver_cmd(args)
            .output()
            .context("running cri-driver")?;
        if !out.status.success() {
            bail!(
                "cri-driver {} failed ({}): {}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Start the CRI driver in the background.
    pub fn driver_spawn(&self, args: &[&str]) -> Result<Child> {
        Ok(self
            .driver_cmd(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?)
    }

    pub(crate) fn driver_cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.bins.driver);
        c.arg("--socket")
            .arg(self.lab.cri_socket())
            .arg("--truth")
            .arg(&self.truth)
            .args(args);
        c
    }

    /// Stop external plugins that are still running (the runtime's `down`
    /// disconnects them; this reaps them).
    pub(crate) fn reap_plugins(&mut self) {
        for mut c in self.plugins.drain(..) {
            for _ in 0..50 {
                if let Ok(Some(_)) = c.try_wait() {
                    break;
                }
                sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Run {
    /// Whatever way the run ends (an error returned half-way, a panic),
    /// its external plugins are reaped and its pre-launched plugins leave
    /// the plugin dir, so the next `up` does not start them.
    fn drop(&mut self) {
        self.reap_plugins();
        if let Err(e) = self.lab.clear_plugins() {
            eprintln!("lab: {e:#}");
        }
    }
}

/// Run scenario `name` on `lab` (which must be installed), leaving the truth
/// in `out/truth.ndjson`; then check it. The lab is brought up and down.
pub fn run(name: &str, lab: Lab, bins: Bins, out: &Path) -> Result<Vec<String>> {
    run_observed(name, lab, bins, out, None)
}

/// [`run`], with `observer` attached while the runtime is up.
pub fn run_observed(
    name: &str,
    lab: Lab,
    bins: Bins,
    out: &Path,
    observer: Option<Box<dyn Observer>>,
) -> Result<Vec<String>> {
    let mut r = Run::new(name, lab, bins, out)?;
    r.observer = observer;
    let mut res = drive(&mut r);
    if let Some(mut o) = r.observer.take() {
        let detached = o.detach();
        if res.is_ok() {
            res = detached.context("detaching the observer");
        }
    }
    let down = r.lab.down();
    let truth_path = r.truth.clone();
    // Reaps the plugins and clears the pre-launched ones, failed run or not.
    drop(r);
    res?;
    down?;
    verify(name, &truth_path)
}

/// Sandbox and container ids the scenario's driver created, sorted.
fn created_ids(t: &[Truth]) -> Vec<String> {
    let mut v: Vec<String> = t
        .iter()
        .flat_map(|x| match x {
            Truth::Cri { pod, container, .. } => vec![
                pod.as_ref().and_then(|p| p.sandbox_id.clone()),
                container.as_ref().and_then(|c| c.id.clone()),
            ],
            _ => vec![],
        })
        .flatten()
        .collect();
    v.sort();
    v.dedup();
    v
}

/// What is wrong after a finished run on `lab` (brought down by
/// [`run_observed`]), from its truth file: a plugin configured by another
/// runtime than the lab's (by the version NRI Configure gave it), no
/// sandbox or container id in the truth of a run that made a sandbox, or a process, mount or cgroup of
/// the run `down` left behind ([`Lab::leftovers`]). Empty when clean. The
/// caller still holds the lab lock (another run's lab is not this one's
/// leftover).
pub fn after_run_problems(name: &str, lab: &Lab, truth_path: &Path) -> Result<Vec<String>> {
    let t = truth::read(truth_path).with_context(|| format!("reading {}", truth_path.display()))?;
    let want = lab.runtime.configure_version_prefix();
    let mut problems: Vec<String> = t
        .iter()
        .filter_map(|x| match x {
            Truth::Plugin {
                plugin,
                what: PluginEvent::Configured { version, .. },
                ..
            } if !version.starts_with(want) => Some(format!(
                "{name}: plugin {plugin} was configured by runtime version {version}, not {}",
                lab.runtime.name()
            )),
            _ => None,
        })
        .collect();
    let ids = created_ids(&t);
    // A run in which no RunPodSandbox succeeded (cri-deadline-retry on
    // CRI-O when the driver gives up) has no sandbox to name.
    let made_one = t.iter().any(|x| {
        matches!(x, Truth::Cri { method, outcome: truth::Outcome::Ok, .. } if method == "RunPodSandbox")
    });
    if ids.is_empty() && made_one {
        problems.push(format!("{name}: the truth names no sandbox or container"));
    }
    problems.extend(
        lab.leftovers(&ids)
            .into_iter()
            .map(|l| format!("{name}: lab down left behind: {l}")),
    );
    Ok(problems)
}

impl Run {
    /// Start external plugin NN-name with these options.
    fn plugin(&mut self, name: &str, idx: &str, args: &[&str]) -> Result<()> {
        self.external(&PluginSpec { name, idx, args })
    }

    /// `cri-driver lifecycle` for `pods` pods named PREFIX-i.
    fn lifecycle(
        &self,
        prefix: &str,
        pods: u32,
        containers: u32,
        concurrency: u32,
    ) -> Result<String> {
        let (p, c, k) = (
            pods.to_string(),
            containers.to_string(),
            concurrency.to_string(),
        );
        self.driver(&[
            "lifecycle",
            "--pods",
            &p,
            "--containers",
            &c,
            "--prefix",
            prefix,
            "--concurrency",
            &k,
        ])
    }
}

fn drive(r: &mut Run) -> Result<()> {
    r.lab.clear_plugins()?;
    let Some(scenario) = find(&r.name) else {
        bail!("unknown scenario {}", r.name);
    };
    (scenario.drive)(r)
}

/// lab/go-cri-client.sh: install (idempotent) and build (offline) the
/// grpc-go CRI client; its path.
fn go_cri_client() -> Result<PathBuf> {
    go_lab_binary("go-cri-client.sh", &["install", "build"])
}

/// A Go program of the lab built by its script (lab/SCRIPT): each of
/// `steps` run in turn, the last printing the binary's path.
fn go_lab_binary(script: &str, steps: &[&str]) -> Result<PathBuf> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(script);
    let mut printed = String::new();
    for step in steps {
        let out = Command::new(&path)
            .arg(step)
            .output()
            .with_context(|| format!("running {script} {step}"))?;
        ensure!(
            out.status.success(),
            "{script} {step} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
        printed = String::from_utf8_lossy(&out.stdout).into_owned();
    }
    let bin = printed.lines().last().unwrap_or("").trim();
    ensure!(
        !bin.is_empty(),
        "{script} {} printed no path",
        steps.join(", ")
    );
    Ok(PathBuf::from(bin))
}

/// Keep the pod stuck for `NRI_TRACE_LAB_HOLD_SECS` after its failed
/// teardown, so that a test can look at the node meanwhile; the note
/// "`what` kept N s more" says when the hold starts.
fn hold_stuck(r: &Run, what: &str) -> Result<()> {
    let secs = std::env::var("NRI_TRACE_LAB_HOLD_SECS")
        .ok()
        .and_then(|s| s.parse::<u64>().ok());
    if let Some(secs) = secs {
        r.note(&format!("{what} kept {secs} s more"))?;
        sleep(Duration::from_secs(secs));
    }
    Ok(())
}

/// A child process killed (and reaped) when the guard goes, e.g. a
/// background cri-driver when the scenario fails before waiting for it.
struct KillOnDrop(Option<Child>);

impl KillOnDrop {
    /// Wait for it; its stdout, or an error with its stderr.
    fn wait(&mut self, what: &str) -> Result<String> {
        let child = self.0.take().context("already waited for")?;
        let out = child.wait_with_output()?;
        if !out.status.success() {
            bail!(
                "{what} failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A driver run's outcome for a note: "succeeded", or "failed: " and the
/// driver's last line (which call failed and why).
fn outcome<T>(r: &Result<T>) -> String {
    match r {
        Ok(_) => "succeeded".to_string(),
        Err(e) => format!(
            "failed: {}",
            format!("{e:#}").lines().last().unwrap_or_default()
        ),
    }
}

pub(crate) fn wait_child(c: &mut Child, what: &str) -> Result<String> {
    let out = std::mem::replace(c, Command::new("true").spawn()?).wait_with_output()?;
    if !out.status.success() {
        bail!(
            "{what} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

pub(crate) fn json_field(out: &str, key: &str) -> Result<String> {
    for line in out.lines() {
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(line) {
            if let Some(s) = v.get(key).and_then(|x| x.as_str()) {
                return Ok(s.to_string());
            }
        }
    }
    bail!("no {key:?} in cri-driver output: {out}")
}

pub(crate) fn sandbox_id_of(out: &str) -> Result<String> {
    json_field(out, "sandbox_id")
}

pub(crate) fn container_id_of(out: &str) -> Result<String> {
    json_field(out, "container_id")
}

/// Check that the truth shows what scenario `name` intends; returns the
/// facts it established, one line each.
pub fn verify(name: &str, path: &Path) -> Result<Vec<String>> {
    let t = truth::read(path).with_context(|| format!("reading {}", path.display()))?;
    let mut facts = Vec::new();
    let Some(scenario) = find(name) else {
        bail!("unknown scenario {name}");
    };
    (scenario.check)(&t, &mut facts)?;
    Ok(facts)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::labctl::Runtime;

    /// A scenario that fails half-way (here: `up` fails right after the
    /// pre-launched plugin was installed) leaves no plugin in the plugin
    /// dir, brings the runtime down, and a lab found up (with a plugin a
    /// killed run left behind) is brought down and cleared before the run
    /// starts it. lab.sh is replaced by a script that logs its calls, so
    /// this runs without root or containerd.
    #[test]
    fn failed_run_cleans_up_and_a_lab_found_up_goes_down_first() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("scenario-cleanup-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let calls = dir.join("calls");
        let script = dir.join("fake-lab.sh");
        std::fs::write(
            &script,
            format!(
                "#!/bin/sh\necho \"$1 $NRI_TRACE_LAB_RUNTIME plugins: $(ls \"$NRI_TRACE_LAB_DIR/nri/plugins\" | tr '\\n' ' ')\" >>'{}'\n\
                 [ \"$1\" = up ] && {{ echo 'fake up fails' >&2; exit 1; }}\nexit 0\n",
                calls.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let lab = Lab {
            dir: dir.clone(),
            runtime: Runtime::Containerd21,
            script,
            otlp_endpoint: None,
        };
        // "Our containerd": a process whose command line names the lab's
        // config, as lab.sh's pid file check wants.
        let mut holder = Command::new("sh")
            .args(["-c", "sleep 60"])
            .arg(dir.join("config.toml"))
            .spawn()
            .unwrap();
        std::fs::write(dir.join("containerd.pid"), holder.id().to_string()).unwrap();
        // spawn() returns once the child is past exec's point of no return,
        // which is before the kernel sets the new program's argument area
        // (fs/exec.c: the vfork/close-on-exec wake-up comes in
        // begin_new_exec, the args in load_elf_binary's create_elf_tables
        // after it): /proc/PID/cmdline can still read empty here. Wait for it.
        let config = dir.join("config.toml");
        let cmdline = format!("/proc/{}/cmdline", holder.id());
        let named = || {
            std::fs::read(&cmdline).is_ok_and(|c| {
                c.split(|b| *b == 0)
                    .any(|a| a == config.as_os_str().as_encoded_bytes())
            })
        };
        for _ in 0..500 {
            if named() {
                break;
            }
            sleep(Duration::from_millis(10));
        }
        std::fs::write(dir.join("runtime"), "containerd-1.7\n").unwrap();
        assert_eq!(lab.running().as_deref(), Some("containerd-1.7"));
        lab.install_prelaunched("40", "stale", Path::new("/nonexistent"), &[])
            .unwrap();

        let bins = Bins {
            driver: PathBuf::from("/nonexistent/cri-driver"),
            plugin: PathBuf::from("/nonexistent/nri-test-plugin"),
        };
        let err = run("happy", lab.clone(), bins, &dir.join("out")).unwrap_err();
        let _ = holder.kill();
        let _ = holder.wait();
        assert!(format!("{err:#}").contains("lab.sh up failed"), "{err:#}");
        let calls = std::fs::read_to_string(&calls).unwrap();
        let calls: Vec<&str> = calls.lines().map(str::trim_end).collect();
        assert_eq!(
            calls,
            [
                // The lab found up comes down (its stale plugin still there) ...
                "down containerd-2.1 plugins: 40-stale",
                // ... and the run starts it with its own plugin only ...
                "up containerd-2.1 plugins: 30-gamma",
                // ... and brings it down after the failure.
                "down containerd-2.1 plugins: 30-gamma",
            ]
        );
        let left: Vec<_> = std::fs::read_dir(lab.plugin_dir())
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert!(left.is_empty(), "plugins left behind: {left:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Each scenario's name is its own, and looking it up finds it.
    #[test]
    fn registry_names_are_unique_and_found() {
        let mut names: Vec<&str> = SCENARIOS.iter().map(|s| s.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), SCENARIOS.len(), "a name is there twice");
        for s in SCENARIOS {
            let found = find(s.name).expect(s.name);
            assert_eq!((found.name, found.about), (s.name, s.about));
        }
        assert!(find("no-such-scenario").is_none());
    }
}
