//! Lab scenarios: each drives the private containerd with the CRI driver and
//! fault-injecting NRI plugins, writes one ground-truth file, and checks
//! that the truth shows what the scenario intends (a slow plugin really was
//! slow, a hung one really was disconnected, ...). Later nri-trace tests
//! compare against these facts, not against assumptions.
//!
//! A scenario never reads anything but the truth file to verify itself, so
//! `verify` can run again on a saved file.

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    thread::sleep,
    time::Duration,
};

use anyhow::{bail, ensure, Context, Result};

pub mod adjustment_rejected;
mod pod_resize;

use crate::{
    labctl::{Lab, Runtime},
    truth::{self, Outcome, PluginEvent, Truth, TruthWriter},
};

/// Every scenario, with a one-line description.
pub const SCENARIOS: &[(&str, &str)] = &[
    ("happy", "3 pods x 2 containers, full lifecycle, 3 plugins (2 external, 1 pre-launched)"),
    ("slow-plugin", "a plugin delays RunPodSandbox and StopPodSandbox by 500 ms"),
    ("plugin-timeout", "a plugin hangs on RunPodSandbox past the 1 s request timeout and is disconnected"),
    ("teardown-error", "a low-index plugin fails StopPodSandbox and RemovePodSandbox; a higher-index one is subscribed"),
    ("late-registration", "a plugin registers while a RunPodSandbox is in flight (held 3 s by a slow plugin)"),
    ("cri-deadline-retry", "RunPodSandbox outlives the driver's 1 s deadline; the driver retries the same name and attempt"),
    ("ignore-sigterm", "a container ignores SIGTERM: StopContainer waits for the grace period and SIGKILL"),
    ("busy-mount", "a host process holds the container's rootfs mount busy during teardown"),
    ("load", "100 pod lifecycles with 3 plugins, 4 pods in flight"),
    ("cri-late-attach", "cri-driver makes a kubelet-like call mix on one connection; the observer attaches after the first half (its HPACK table holds entries it never saw)"),
    ("cri-deadline-retry-go", "as cri-deadline-retry with go-cri-client (grpc-go's client-side deadline, kubelet's stack)"),
    ("pods-before-attach", "2 pods (one container each) made before the observer attaches, then torn down: their teardown calls name them only by id"),
    ("cri-late-attach-go", "as cri-late-attach with go-cri-client (grpc-go, kubelet's HPACK encoder; built offline from Debian's sources)"),
    ("cri-late-attach-nri", "as cri-late-attach with 4 pods per phase, a pre-launched test plugin and two external ones (one subscribed to every event, one to the stop events only), all registered before the observer"),
    ("cri-late-attach-go-nri", "as cri-late-attach-go with 4 pods per phase, a pre-launched test plugin, an external one and the NRI project's logger plugin, all registered before the observer"),
    ("upstream-witness", "the NRI project's own logger plugin (built offline from Debian's sources) witnesses 2 lifecycles beside a test plugin"),
    ("runtime-restart", "containerd restarts while a pod runs (a pre-launched and an external plugin); the pod is torn down and another made after it"),
    ("unkillable", "a container process blocked in a FUSE read that is never answered survives StopContainer's SIGKILL in state D"),
    ("hung-teardown-hook", "a plugin's StopPodSandbox hook never returns (30 s plugin timeout); the CRI StopPodSandbox outlives its 5 s deadline"),
    ("runtime-after-observer", "the observer starts before containerd (a DaemonSet at node boot): containerd comes up after it, then 1 pod x 1 container with a pre-launched and an external plugin"),
    ("hung-teardown-client-gone", "a plugin's StopPodSandbox hook never returns; the CRI client is killed 1 s into the call (8 s deadline): containerd keeps the plugin connected with the request open"),
    ("container-exits", "2 pods x 1 container whose process exits on its own (exit code 3) 0.3 s after it starts; the driver stops it 2 s after the start, as kubelet would; 2 plugins"),
    ("netns-teardown", "2 pods with their own network namespace (the lab's bridge CNI network) and a shared PID namespace (pause is PID 1), one container each, full lifecycle, one external plugin: when the netns goes against the plugins' StopPodSandbox"),
    ("split-synchronize", "12 pods (one container each) whose annotations make 5.6 MiB, then a plugin registers: NRI >= 0.7 (containerd 2.1, not 1.7) splits its Synchronize under ttrpc's 4 MiB message limit, `more` set on all but the last; then one answering without `more` (a pre-v0.7 stub) registers and is closed"),
    ("cri-retry-slow-sandbox", "CRI-O only: RunPodSandbox slowed 3 s outside the CRI request's context (crio's pinns, as under i/o load), no NRI plugin; the driver retries the same name at 1 s deadlines: CRI-O's name reservation holds every retry (cri-o#4221; its log says \"name is reserved\"), the retry after the sandbox is made takes it from the resource cache"),
    ("adjustment-rejected", "NRI validation failing CreateContainer (containerd 2.2, 2.3): the built-in default validator rejecting plugin 10-hooks' OCI hook (pod rejected-0), then validating plugin 90-judge rejecting 20-env's adjustment (pod rejected-1); go-nri-plugin on the v0.12.2 stub"),
    ("pod-resize", "a pod resized in place: CRI UpdatePodSandboxResources by k8s.io/cri-api's own Go client (lab/go-cri-resize, built by lab/go-cri-resize.sh through the Go module proxy); containerd 2.3 tells the plugins UpdatePodSandbox and PostUpdatePodSandbox inside the call; one plugin"),
    ("crictl", "while the driver runs 3 pod lifecycles, crictl (the CRI CLI an SRE runs on a node; sigs.k8s.io/cri-tools, built by lab/crictl.sh) lists and inspects pods and containers, stops one of 2 pods the driver made and force-removes both (pods, inspectp, ps, stopp, rmp -f) from a cgroup of its own; one plugin"),
    ("plugins-before-attach", "seven plugins registered before the observer attaches (external: --name/--idx flags, an NN-name binary with a name past comm's 15 bytes, an -idx-only binary, the upstream logger with Go's -idx/-name; pre-launched: flags, a bare NN-name binary), then 2 lifecycles"),
    ("go-plugins", "go-nri-plugin, on the NRI project's own Go stub (built by lab/go-nri-plugin.sh through the Go module proxy), as external plugins registered before the observer attaches: 10-go12 on the v0.12.2 stub, 20-go08 on the v0.8.0 stub; then 2 lifecycles. NRI 0.12 runtimes (containerd 2.3) send go12 a method per event and go08 its first one too, which it answers Unimplemented, then StateChange; older runtimes send both StateChange"),
];

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
            SCENARIOS.iter().any(|(n, _)| *n == name),
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
/// sandbox or container id in the truth, or a process, mount or cgroup of
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
    if ids.is_empty() {
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
    match r.name.as_str() {
        "happy" => {
            r.prelaunch(&PluginSpec {
                name: "gamma",
                idx: "30",
                args: &[],
            })?;
            r.up("2s")?;
            // containerd 1.7 sends Synchronize only to plugins that connect
            // through the socket (nri pkg/adaptation acceptPluginConnections),
            // not to pre-launched ones at start-up.
            let configured = |e: &PluginEvent| matches!(e, PluginEvent::Configured { .. });
            r.wait_plugin("gamma", configured, Duration::from_secs(10))?;
            r.plugin("alpha", "10", &[])?;
            r.plugin("beta", "20", &[])?;
            r.driver(&[
                "lifecycle",
                "--pods",
                "3",
                "--containers",
                "2",
                "--run-secs",
                "0.5",
                "--prefix",
                "happy",
                "--concurrency",
                "1",
            ])?;
        }
        "container-exits" => {
            r.up("2s")?;
            r.plugin("alpha", "10", &[])?;
            r.plugin("beta", "20", &[])?;
            r.driver(&[
                "lifecycle",
                "--pods",
                "2",
                "--containers",
                "1",
                "--run-secs",
                "2",
                "--prefix",
                "exits",
                "--concurrency",
                "1",
                "--",
                "sh",
                "-c",
                "sleep 0.3; exit 3",
            ])?;
        }
        "netns-teardown" => {
            r.up("2s")?;
            r.plugin("observer", "10", &[])?;
            r.driver(&[
                "lifecycle",
                "--pods",
                "2",
                "--containers",
                "1",
                "--netns",
                // pause is PID 1 of the pod: CRI-O (drop_infra_ctr) runs
                // it only for a pod that shares its PID namespace.
                "--share-pid",
                "--prefix",
                "netns",
                "--concurrency",
                "1",
            ])?;
        }
        "slow-plugin" => {
            r.up("2s")?;
            let slow = [
                "--on",
                "RUN_POD_SANDBOX=delay:500",
                "--on",
                "STOP_POD_SANDBOX=delay:500",
            ];
            r.plugin("slow", "10", &slow)?;
            r.plugin("plain", "20", &[])?;
            r.lifecycle("slow", 2, 1, 1)?;
        }
        "plugin-timeout" => {
            r.up("1s")?;
            r.plugin("hang", "10", &["--on", "RUN_POD_SANDBOX=hang"])?;
            r.plugin("plain", "20", &[])?;
            r.lifecycle("timeout", 2, 1, 1)?;
        }
        "teardown-error" => {
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
        }
        "late-registration" => {
            r.up("5s")?;
            r.plugin("slow", "10", &["--on", "RUN_POD_SANDBOX=delay:3000"])?;
            let mut pod = r.driver_spawn(&["up", "--name", "late-pod"])?;
            sleep(Duration::from_secs(1));
            r.note("registering plugin late while RunPodSandbox(late-pod) is in flight")?;
            r.plugin("late", "20", &[])?;
            let out = wait_child(&mut pod, "cri-driver up late-pod")?;
            r.driver(&["down", "--sandbox-id", &sandbox_id_of(&out)?])?;
        }
        "cri-deadline-retry" => {
            r.up("5s")?;
            r.plugin("slow", "10", &["--on", "RUN_POD_SANDBOX=delay:3000"])?;
            r.driver(&["--backoff-ms", "250", "retry", "--deadline-ms", "1000"])?;
        }
        "pod-resize" => pod_resize::drive(r)?,
        "adjustment-rejected" => adjustment_rejected::drive(r)?,
        "ignore-sigterm" => {
            r.up("2s")?;
            r.driver(&["ignore-sigterm", "--grace-secs", "2"])?;
        }
        "cri-retry-slow-sandbox" => cri_retry_slow_sandbox(r)?,
        "busy-mount" => busy_mount(r)?,
        "unkillable" => unkillable(r)?,
        "hung-teardown-hook" => hung_teardown_hook(r)?,
        "hung-teardown-client-gone" => hung_teardown_client_gone(r)?,
        "cri-late-attach" => {
            let mut c = r.driver_cmd(&[]);
            c.args(["mix", "--pods", "3"]);
            r.late_attach(c, "cri-driver mix")?;
        }
        "pods-before-attach" => {
            r.lab.up("2s")?;
            let ids = ["early-0", "early-1"]
                .into_iter()
                .map(|name| sandbox_id_of(&r.driver(&["up", "--name", name])?))
                .collect::<Result<Vec<_>>>()?;
            r.attach_observer()?;
            for id in &ids {
                r.driver(&["down", "--sandbox-id", id])?;
            }
        }
        "cri-deadline-retry-go" => {
            r.up("5s")?;
            r.plugin("slow", "10", &["--on", "RUN_POD_SANDBOX=delay:3000"])?;
            let out = Command::new(go_cri_client()?)
                .arg("-socket")
                .arg(r.lab.cri_socket())
                .arg("-truth")
                .arg(&r.truth)
                .args(["retry", "-deadline-ms", "1000", "-backoff-ms", "250"])
                .output()
                .context("running go-cri-client retry")?;
            ensure!(
                out.status.success(),
                "go-cri-client retry failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        "cri-late-attach-nri" => {
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
        }
        "cri-late-attach-go-nri" => {
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
        }
        "cri-late-attach-go" => {
            let bin = go_cri_client()?;
            let mut c = Command::new(bin);
            c.arg("-socket")
                .arg(r.lab.cri_socket())
                .arg("-truth")
                .arg(&r.truth)
                .args(["mix", "-pods", "3"]);
            r.late_attach(c, "go-cri-client mix")?;
        }
        "upstream-witness" => upstream_witness(r)?,
        "crictl" => crate::crictl::drive(r)?,
        "plugins-before-attach" => plugins_before_attach(r)?,
        "go-plugins" => go_plugins(r)?,
        "split-synchronize" => split_synchronize(r)?,
        "runtime-restart" => runtime_restart(r)?,
        "runtime-after-observer" => {
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
        }
        "load" => {
            r.up("2s")?;
            for (name, idx) in [("alpha", "10"), ("beta", "20"), ("gamma", "30")] {
                r.plugin(name, idx, &[])?;
            }
            r.lifecycle("load", 100, 1, 4)?;
        }
        other => bail!("unknown scenario {other}"),
    }
    Ok(())
}

/// The demo behind `cargo xtask demo`: the lab with a slow and a plain
/// plugin, `nri-trace watch -o text` on the lab's CRI and NRI sockets (its output,
/// each CRI call with the NRI hooks it caused and their times, then the
/// latency tables, goes to this terminal), two pod lifecycles, then
/// everything is torn down.
pub fn demo(lab: Lab, bins: Bins, nri_trace: &Path, nri_args: &[String]) -> Result<()> {
    let out = std::env::temp_dir().join("nri-trace-demo");
    let mut r = Run::new("happy", lab, bins, &out)?;
    let res = (|| -> Result<()> {
        r.lab.clear_plugins()?;
        r.prelaunch(&PluginSpec {
            name: "audit",
            idx: "30",
            args: &[],
        })?;
        r.lab.up("2s")?;
        let configured = |e: &PluginEvent| matches!(e, PluginEvent::Configured { .. });
        r.wait_plugin("audit", configured, Duration::from_secs(10))?;
        eprintln!("demo: lab up; pre-launched plugin 30-audit registered");
        if std::io::IsTerminal::is_terminal(&std::io::stdout()) && nri_args.is_empty() {
            return demo_tui(&mut r, nri_trace);
        }
        // `-o text` unless the arguments choose a format.
        let format_given = nri_args
            .iter()
            .any(|a| a == "-o" || a.starts_with("--output") || a.starts_with("-o"));
        let text: &[&str] = if format_given { &[] } else { &["-o", "text"] };
        let mut trace = Command::new(nri_trace)
            .arg("watch")
            .args(text)
            .arg("--cri-socket")
            .arg(r.lab.cri_socket())
            .arg("--nri-socket")
            .arg(r.lab.nri_socket())
            .args(nri_args)
            .spawn()
            .with_context(|| format!("starting {}", nri_trace.display()))?;
        // Attaching takes well under a second (doctor reports the time).
        sleep(Duration::from_millis(1500));
        eprintln!("demo: external plugins 10-slow (RunPodSandbox +300 ms) and 20-plain connect");
        r.plugin("slow", "10", &["--on", "RUN_POD_SANDBOX=delay:300"])?;
        r.plugin("plain", "20", &[])?;
        eprintln!("demo: driving 2 pod lifecycles (kubelet-like CRI calls)");
        let res = r.lifecycle("demo", 2, 1, 1);
        sleep(Duration::from_millis(500));
        unsafe { libc::kill(trace.id() as i32, libc::SIGTERM) };
        let _ = trace.wait();
        res?;
        Ok(())
    })();
    let down = r.lab.down();
    let lab = r.lab.clone();
    drop(r);
    let _ = lab.clear_plugins();
    res?;
    down?;
    eprintln!(
        "demo: done; ground truth of what the driver and plugins did: {}",
        out.join("truth.ndjson").display()
    );
    Ok(())
}

/// The demo on a terminal: the TUI on the lab while a scenario mix runs
/// (a slow plugin, a plugin that fails teardown, a plain one), until the
/// user quits it. Nothing else writes to the terminal meanwhile.
fn demo_tui(r: &mut Run, nri_trace: &Path) -> Result<()> {
    eprintln!(
        "demo: opening the TUI; plugins 05-failer, 10-slow, 20-plain join 30-audit and \
         pods come and go until you quit it with q"
    );
    sleep(Duration::from_millis(1500));
    // No socket flags: it finds the lab's containerd as it would a node's.
    let mut tui = Command::new(nri_trace)
        .args(["watch", "-o", "tui"])
        .spawn()
        .with_context(|| format!("starting {}", nri_trace.display()))?;
    // Attached before the plugins register, so it sees their names.
    sleep(Duration::from_millis(1500));
    r.plugin(
        "failer",
        "05",
        &["--on", "STOP_POD_SANDBOX=error:demo teardown refusal"],
    )?;
    r.plugin("slow", "10", &["--on", "RUN_POD_SANDBOX=delay:300"])?;
    r.plugin("plain", "20", &[])?;
    let mut rounds = 0u32;
    let mut failed = None;
    let status = loop {
        if let Some(st) = tui.try_wait()? {
            break st;
        }
        // A round: two pods through their whole lifecycle, one at a time.
        if failed.is_none() {
            if let Err(e) = r.lifecycle("demo", 2, 1, 1) {
                failed = Some(e);
            }
            rounds += 1;
        } else {
            sleep(Duration::from_millis(200));
        }
    };
    eprintln!("demo: the TUI exited ({status}) after {rounds} rounds of 2 pods");
    if let Some(e) = failed {
        return Err(e.context("the demo's pod lifecycles"));
    }
    Ok(())
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

/// lab/upstream-logger.sh: the upstream NRI logger plugin, built offline.
fn upstream_logger(args: &[&str]) -> Command {
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

/// Start the upstream logger (index 99, logging to `nri-logger.log` in the
/// run's directory) and wait until it has synchronized; its log's path.
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

fn start_upstream_logger(r: &mut Run) -> Result<PathBuf> {
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

/// Seconds `cri-retry-slow-sandbox` holds crio's pinns.
const SLOW_PINNS_SECS: u64 = 3;
/// The note `cri-retry-slow-sandbox` leaves with crio's own account.
const CRIO_LOG_NOTE: &str = "crio log:";

/// `cri-retry-slow-sandbox`: the seed's situation (cri-o#4221) on CRI-O
/// 1.33 and 1.36: the sandbox is slow to make for a reason the CRI request's
/// context does not cut short (crio runs pinns with no context:
/// internal/config/nsmgr `NewPodNamespaces`; the lab's pinns wrapper sleeps
/// while `$LAB/crio/slow-pinns` holds seconds), and the client retries the
/// same name after each 1 s deadline. Since cri-o#4221's fix a retry that
/// finds the name reserved waits for the first request
/// (`server/utils.go` getResourceOrWait) until its own deadline, instead
/// of answering "name is reserved" at once; the sandbox, made after the
/// first request's deadline, goes to the resource cache, and the next
/// retry takes it. No NRI plugin: CRI-O calls NRI with the request's
/// context, which has expired by then, and the call would fail the
/// sandbox (cri-deadline-retry shows that path). crio's own account of
/// the retries is read from its log into a note.
fn cri_retry_slow_sandbox(r: &mut Run) -> Result<()> {
    ensure!(
        r.lab.runtime == Runtime::CriO,
        "cri-retry-slow-sandbox slows crio's pinns: run it on CRI-O \
         (`cargo xtask lab --runtime crio run cri-retry-slow-sandbox`)"
    );
    r.up("5s")?;
    let crio = r.lab.dir.join("crio");
    let log = crio.join("crio.log");
    let from = std::fs::metadata(&log).map_or(0, |m| m.len());
    let slow = crio.join("slow-pinns");
    std::fs::write(&slow, format!("{SLOW_PINNS_SECS}\n"))
        .with_context(|| format!("writing {}", slow.display()))?;
    let driven = r.driver(&["--backoff-ms", "250", "retry", "--deadline-ms", "1000"]);
    let _ = std::fs::remove_file(&slow);
    // The driver tears the pod down itself once a try succeeded.
    driven?;
    let text = std::fs::read(&log).with_context(|| format!("reading {}", log.display()))?;
    let text = String::from_utf8_lossy(
        text.get(usize::try_from(from).unwrap_or(0)..)
            .unwrap_or_default(),
    );
    let reserved = text
        .lines()
        .filter(|l| {
            l.contains("error reserving pod name k8s_retry-0_") && l.contains("name is reserved")
        })
        .count();
    let cached = text
        .lines()
        .filter(|l| l.contains("in resource cache; using it") && l.contains("k8s_retry-0_"))
        .count();
    r.note(&format!(
        "{CRIO_LOG_NOTE} {reserved} name is reserved, {cached} taken from the resource cache"
    ))?;
    Ok(())
}

/// `link` made a symlink to `target` (replacing what was there).
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

fn symlink(target: &Path, link: &Path) -> Result<()> {
    let _ = std::fs::remove_file(link);
    std::os::unix::fs::symlink(target, link)
        .with_context(|| format!("linking {} to {}", link.display(), target.display()))
}

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
fn start_go_plugin(r: &mut Run, bin: &Path, name: &str, idx: &str, args: &[&str]) -> Result<()> {
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

/// A host process keeps its working directory inside the container's rootfs
/// mount while the pod is torn down, as an agent or a CSI driver holding a
/// mount would. The truth records what the runtime answered; then the holder
/// is killed and the pod removed for real.
fn busy_mount(r: &mut Run) -> Result<()> {
    r.up("2s")?;
    let out = r.driver(&["up", "--name", "busy"])?;
    let sandbox = sandbox_id_of(&out)?;
    let container = container_id_of(&out)?;
    let rootfs = container_rootfs(&r.lab, &container)?;
    ensure!(
        rootfs.is_dir(),
        "container rootfs {} not found",
        rootfs.display()
    );
    let mut holder = Command::new("sleep")
        .arg("600")
        .current_dir(&rootfs)
        .spawn()?;
    r.note(&format!(
        "holder pid {} has its cwd in {}",
        holder.id(),
        rootfs.display()
    ))?;
    // A 10 s CRI deadline (kubelet's is 2 min): with the mount held, the
    // teardown blocks until the deadline; no need to wait the full 2 min.
    let first = r.driver(&[
        "--request-timeout-ms",
        "10000",
        "down",
        "--sandbox-id",
        &sandbox,
    ]);
    r.note(&format!(
        "teardown with the mount held: {}",
        outcome(&first)
    ))?;
    // A test may look at the node while the pod is stuck (`explain`).
    hold_stuck(r, "holder")?;
    let _ = holder.kill();
    let _ = holder.wait();
    r.note("holder killed")?;
    // Whatever is left of the pod goes now.
    if first.is_err() {
        r.driver(&["down", "--sandbox-id", &sandbox])?;
    }
    Ok(())
}

/// The host path of a running container's rootfs mount.
fn container_rootfs(lab: &Lab, container: &str) -> Result<PathBuf> {
    match lab.runtime {
        // The task's rootfs mount lives under containerd's state dir (the
        // lab's own, see lab.sh), not /run/containerd.
        Runtime::Containerd17
        | Runtime::Containerd21
        | Runtime::Containerd22
        | Runtime::Containerd23 => Ok(lab
            .dir
            .join("state/io.containerd.runtime.v2.task/k8s.io")
            .join(container)
            .join("rootfs")),
        // CRI-O: the overlay's merged dir in its own storage, as the OCI
        // spec of the container names it (`root.path` of the config.json
        // in the container's userdata dir under the run root; lab/crio.sh).
        Runtime::CriO => {
            let config = lab
                .dir
                .join("crio/runroot/overlay-containers")
                .join(container)
                .join("userdata/config.json");
            let spec: serde_json::Value = serde_json::from_slice(
                &std::fs::read(&config).with_context(|| format!("reading {}", config.display()))?,
            )
            .with_context(|| format!("parsing {}", config.display()))?;
            let root = spec["root"]["path"]
                .as_str()
                .with_context(|| format!("{}: no root.path", config.display()))?;
            Ok(PathBuf::from(root))
        }
    }
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

/// A running `fuse-hang MOUNTPOINT` (src/bin/fuse-hang.rs). Dropping it
/// (also when a scenario fails half-way, or panics) stops the server, which
/// aborts its FUSE connection so that a reader stuck in state D can die of
/// its pending SIGKILL, and detaches the mount: neither a D-state process
/// nor a mount under the lab dir outlives the scenario.
pub(crate) struct FuseHang {
    child: Option<Child>,
    pub(crate) pid: u32,
    mnt: PathBuf,
    /// Its stdout: one JSON object per line.
    events: PathBuf,
}

impl FuseHang {
    /// Start it and wait until it has mounted.
    pub(crate) fn start(bin: &Path, mnt: &Path, out: &Path) -> Result<Self> {
        ensure!(
            bin.is_file(),
            "{} not found (build it: cargo build -p nri-trace-lab --bins)",
            bin.display()
        );
        let events = out.join("fuse-hang.ndjson");
        let mut cmd = Command::new(bin);
        // Should this process die without dropping the guard (SIGKILL),
        // fuse-hang still stops: its reader is freed, its mount detached.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                Ok(())
            });
        }
        let child = cmd
            .arg(mnt)
            .stdout(std::fs::File::create(&events)?)
            .stderr(std::fs::File::create(out.join("fuse-hang.log"))?)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let mut g = Self {
            pid: child.id(),
            child: Some(child),
            mnt: mnt.to_path_buf(),
            events,
        };
        let t0 = std::time::Instant::now();
        while !g.events().iter().any(|v| v.get("mounted").is_some()) {
            if let Some(st) = g.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                let log = std::fs::read_to_string(out.join("fuse-hang.log")).unwrap_or_default();
                bail!("fuse-hang exited ({st}) before mounting: {}", log.trim());
            }
            ensure!(
                t0.elapsed() < Duration::from_secs(10),
                "fuse-hang did not mount {} within 10 s",
                mnt.display()
            );
            sleep(Duration::from_millis(20));
        }
        Ok(g)
    }

    fn events(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(&self.events)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// The pid of the first reader whose READ it holds.
    pub(crate) fn held_reader(&self, max: Duration) -> Result<u32> {
        let t0 = std::time::Instant::now();
        loop {
            let pid = self.events().iter().find_map(|v| {
                v.get("held")?;
                v.get("pid")?.as_u64()
            });
            if let Some(pid) = pid {
                return Ok(pid as u32);
            }
            ensure!(
                t0.elapsed() < max,
                "no read of {}/hang reached fuse-hang within {max:?}",
                self.mnt.display()
            );
            sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM (it closes /dev/fuse, then detaches the mount); SIGKILL
    /// after 5 s.
    pub(crate) fn stop(&mut self) -> Result<std::process::ExitStatus> {
        let mut c = self.child.take().context("fuse-hang already stopped")?;
        unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
        let t0 = std::time::Instant::now();
        loop {
            if let Some(st) = c.try_wait()? {
                return Ok(st);
            }
            if t0.elapsed() > Duration::from_secs(5) {
                let _ = c.kill();
                return Ok(c.wait()?);
            }
            sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for FuseHang {
    fn drop(&mut self) {
        if self.child.is_some() {
            if let Err(e) = self.stop() {
                eprintln!("fuse-hang: stopping: {e:#}");
            }
        }
        // fuse-hang detaches its mount when it stops; not when it was killed.
        if let Ok(p) = std::ffi::CString::new(self.mnt.as_os_str().as_encoded_bytes()) {
            unsafe { libc::umount2(p.as_ptr(), libc::MNT_DETACH) };
        }
        let _ = std::fs::remove_dir(&self.mnt);
    }
}

/// (state, comm) of a process, from /proc/PID/stat.
pub(crate) fn proc_state(pid: u32) -> Option<(char, String)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let comm = stat.get(open + 1..close)?.to_string();
    let state = stat.get(close + 1..)?.trim_start().chars().next()?;
    Some((state, comm))
}

/// Is SIGKILL pending for the thread or its process (/proc/PID/status)?
pub(crate) fn sigkill_pending(pid: u32) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status.lines().any(|l| {
        let Some((k, v)) = l.split_once(':') else {
            return false;
        };
        (k == "SigPnd" || k == "ShdPnd")
            && u64::from_str_radix(v.trim(), 16).is_ok_and(|m| m & (1 << (libc::SIGKILL - 1)) != 0)
    })
}

/// The kernel function the process sleeps in, when /proc shows it.
pub(crate) fn wchan(pid: u32) -> String {
    match std::fs::read_to_string(format!("/proc/{pid}/wchan")) {
        Ok(w) if !w.trim().is_empty() && w.trim() != "0" => w.trim().to_string(),
        _ => "?".into(),
    }
}

/// A container process reads a file of a FUSE mount (fuse-hang, mounted
/// on the host and passed in as a hostPath-like CRI mount) whose daemon
/// read the request and never answers it. StopContainer (grace 2 s) sends
/// SIGTERM to the container's PID 1 (`sh`, which ignores it as its PID
/// namespace's init), then SIGKILL; `sh` dies and the kernel kills the
/// rest of the PID namespace, but the reader sits in
/// `request_wait_answer`'s uninterruptible wait with SIGKILL pending
/// (state D), `sh` cannot finish exiting until it is gone, and the task
/// never exits: StopContainer runs into the 12 s CRI deadline (10 s request
/// timeout + the grace). Then, after the optional hold, fuse-hang is
/// stopped: its connection is aborted, the reader dies, and the pod is torn
/// down for real.
///
/// Notes written (exact formats; PID is the reader's host pid):
/// - `fuse-hang pid N serves MNT`
/// - `reader pid PID (COMM) of container ID blocked in a FUSE read of
///   MNT/hang: state S, wchan W` (before the teardown: an interruptible wait)
/// - `stuck pid PID (COMM) in state D: SIGKILL pending yes|no, wchan W`
/// - `teardown with the reader stuck: failed: ...` (or `succeeded`)
/// - `stuck pid PID kept N s more` (only with NRI_TRACE_LAB_HOLD_SECS)
/// - `pid PID before the release: state D`
/// - `fuse-hang stopped (EXIT STATUS): pid PID gone after N ms`
fn unkillable(r: &mut Run) -> Result<()> {
    r.up("2s")?;
    let mnt = r.lab.dir.join("fuse-hang");
    let mut fuse = FuseHang::start(&r.bins.fuse_hang(), &mnt, &r.out)?;
    r.note(&format!(
        "fuse-hang pid {} serves {}",
        fuse.pid,
        mnt.display()
    ))?;
    let mount = format!("{}:/hang", mnt.display());
    let out = r.driver(&[
        "up",
        "--name",
        "unkillable",
        "--mount",
        &mount,
        "--",
        "sh",
        "-c",
        "cat /hang/hang; sleep 3600",
    ])?;
    let sandbox = sandbox_id_of(&out)?;
    let container = container_id_of(&out)?;
    let pid = fuse.held_reader(Duration::from_secs(20))?;
    let (state, comm) = proc_state(pid).with_context(|| format!("reader pid {pid} is gone"))?;
    let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
    ensure!(
        cgroup.contains(&container),
        "reader pid {pid} ({comm}) is not in container {container}'s cgroup: {cgroup}"
    );
    r.note(&format!(
        "reader pid {pid} ({comm}) of container {container} blocked in a FUSE read of {}/hang: state {state}, wchan {}",
        mnt.display(),
        wchan(pid)
    ))?;
    // A 10 s CRI deadline (kubelet's is 2 min), StopContainer 10 s + grace.
    let mut down = KillOnDrop(Some(r.driver_spawn(&[
        "--request-timeout-ms",
        "10000",
        "down",
        "--sandbox-id",
        &sandbox,
        "--grace-secs",
        "2",
    ])?));
    let t0 = std::time::Instant::now();
    let comm = loop {
        match proc_state(pid) {
            Some(('D', comm)) => break comm,
            Some(_) => {}
            None => bail!("reader pid {pid} exited: the SIGKILL did end it"),
        }
        ensure!(
            t0.elapsed() < Duration::from_secs(20),
            "reader pid {pid} not in state D 20 s into the teardown ({:?})",
            proc_state(pid)
        );
        sleep(Duration::from_millis(50));
    };
    r.note(&format!(
        "stuck pid {pid} ({comm}) in state D: SIGKILL pending {}, wchan {}",
        if sigkill_pending(pid) { "yes" } else { "no" },
        wchan(pid)
    ))?;
    let first = down.wait("cri-driver down");
    r.note(&format!(
        "teardown with the reader stuck: {}",
        outcome(&first)
    ))?;
    hold_stuck(r, &format!("stuck pid {pid}"))?;
    let before = proc_state(pid).map_or_else(|| "gone".to_string(), |(s, _)| format!("state {s}"));
    r.note(&format!("pid {pid} before the release: {before}"))?;
    // Release: the server's connection is aborted, the read fails, and the
    // pending SIGKILL ends the reader.
    let t = std::time::Instant::now();
    let st = fuse.stop()?;
    while proc_state(pid).is_some_and(|(s, _)| s != 'Z') {
        ensure!(
            t.elapsed() < Duration::from_secs(10),
            "pid {pid} still there 10 s after fuse-hang stopped ({:?})",
            proc_state(pid)
        );
        sleep(Duration::from_millis(20));
    }
    r.note(&format!(
        "fuse-hang stopped ({st}): pid {pid} gone after {} ms",
        t.elapsed().as_millis()
    ))?;
    drop(fuse);
    r.driver(&["down", "--sandbox-id", &sandbox])?;
    Ok(())
}

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

// ------------------------------------------------------------- verification

/// NRI deliveries to `plugin` (event, pod name, recv, reply, outcome).
struct Delivery<'a> {
    event: Option<&'a str>,
    pod: Option<&'a str>,
    recv: u64,
    reply: Option<u64>,
    outcome: &'a Outcome,
}

fn deliveries<'a>(t: &'a [Truth], plugin_name: &str) -> Vec<Delivery<'a>> {
    t.iter()
        .filter_map(|x| match x {
            Truth::Nri {
                plugin,
                event,
                pod,
                recv_mono_ns,
                reply_mono_ns,
                outcome,
                ..
            } if plugin == plugin_name => Some(Delivery {
                event: event.as_deref(),
                pod: pod.as_ref().map(|p| p.name.as_str()),
                recv: *recv_mono_ns,
                reply: *reply_mono_ns,
                outcome,
            }),
            _ => None,
        })
        .collect()
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

/// (method, pod name, duration ns, outcome, retry) of every CRI call.
fn cri_calls(t: &[Truth]) -> Vec<(&str, Option<&str>, u64, &Outcome, u32)> {
    t.iter()
        .filter_map(|x| match x {
            Truth::Cri {
                method,
                pod,
                start_mono_ns,
                end_mono_ns,
                outcome,
                retry,
                ..
            } => Some((
                method.as_str(),
                pod.as_ref().map(|p| p.name.as_str()),
                end_mono_ns.saturating_sub(*start_mono_ns),
                outcome,
                *retry,
            )),
            _ => None,
        })
        .collect()
}

fn plugin_events<'a>(t: &'a [Truth], name: &str) -> Vec<&'a PluginEvent> {
    t.iter()
        .filter_map(|x| match x {
            Truth::Plugin { plugin, what, .. } if plugin == name => Some(what),
            _ => None,
        })
        .collect()
}

/// When plugin `name` was disconnected first, and why.
fn disconnected_at<'a>(t: &'a [Truth], name: &str) -> Option<(u64, &'a str)> {
    t.iter().find_map(|x| match x {
        Truth::Plugin {
            plugin,
            mono_ns,
            what: PluginEvent::Disconnected { reason },
            ..
        } if plugin == name => Some((*mono_ns, reason.as_str())),
        _ => None,
    })
}

/// When the note `text` was written.
fn note_at(t: &[Truth], text: &str) -> Option<u64> {
    t.iter().find_map(|x| match x {
        Truth::Note { text: n, mono_ns } if n == text => Some(*mono_ns),
        _ => None,
    })
}

fn pods_of(t: &[Truth], prefix: &str) -> Vec<String> {
    let mut v: Vec<String> = cri_calls(t)
        .iter()
        .filter(|c| c.0 == "RunPodSandbox")
        .filter_map(|c| c.1)
        .filter(|n| n.starts_with(prefix))
        .map(String::from)
        .collect();
    v.sort();
    v.dedup();
    v
}

/// The plugin registered and was configured (and, for an external plugin,
/// synchronized: pre-launched plugins get no Synchronize at start-up).
fn check_handshake(t: &[Truth], plugin: &str, external: bool) -> Result<()> {
    let ev = plugin_events(t, plugin);
    let registered = ev.iter().any(|e| matches!(e, PluginEvent::Registered));
    let configured = ev
        .iter()
        .any(|e| matches!(e, PluginEvent::Configured { .. }));
    let synced = ev
        .iter()
        .any(|e| matches!(e, PluginEvent::Synchronized { .. }));
    ensure!(registered, "plugin {plugin} was never Registered");
    ensure!(configured, "plugin {plugin} was never Configured");
    ensure!(
        synced || !external,
        "plugin {plugin} was never Synchronized"
    );
    Ok(())
}

/// Each pod went RUN -> STOP -> REMOVE (by receive time) at `plugin`.
fn check_pod_order(t: &[Truth], plugin: &str, pods: &[String]) -> Result<()> {
    let d = deliveries(t, plugin);
    for pod in pods {
        let at = |ev: &str| {
            d.iter()
                .find(|x| x.event == Some(ev) && x.pod == Some(pod.as_str()))
                .map(|x| x.recv)
        };
        let (Some(run), Some(stop), Some(rm)) = (
            at("RUN_POD_SANDBOX"),
            at("STOP_POD_SANDBOX"),
            at("REMOVE_POD_SANDBOX"),
        ) else {
            bail!("plugin {plugin} lacks a pod event for {pod}");
        };
        ensure!(
            run < stop && stop < rm,
            "plugin {plugin}: {pod} events out of order"
        );
    }
    Ok(())
}

fn all_cri_ok(t: &[Truth]) -> Result<usize> {
    let calls = cri_calls(t);
    for c in &calls {
        ensure!(
            matches!(c.3, Outcome::Ok),
            "CRI {} for {:?} failed: {:?}",
            c.0,
            c.1,
            c.3
        );
    }
    Ok(calls.len())
}

/// The scenario's notes, in order.
fn notes(t: &[Truth]) -> Vec<&str> {
    t.iter()
        .filter_map(|x| match x {
            Truth::Note { text, .. } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

/// The runtime's name and version plugin `name` was configured with (its
/// own record of the NRI Configure request): ("containerd", "1.7.24~ds1"),
/// ("containerd", "2.1.9+unknown"), ("cri-o", "1.36.3"; until 2026-11-28 "1.33.13").
fn runtime_of<'a>(t: &'a [Truth], name: &str) -> Result<(&'a str, &'a str)> {
    plugin_events(t, name)
        .into_iter()
        .find_map(|e| match e {
            PluginEvent::Configured {
                runtime, version, ..
            } => Some((runtime.as_str(), version.as_str())),
            _ => None,
        })
        .with_context(|| format!("plugin {name} was never configured"))
}

/// CRI-O names itself "cri-o" in NRI Configure (containerd "containerd").
fn is_crio(runtime: &str) -> bool {
    runtime == "cri-o"
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

/// When plugin `name` first recorded an event matching `pred`.
fn plugin_event_at(t: &[Truth], name: &str, pred: impl Fn(&PluginEvent) -> bool) -> Option<u64> {
    t.iter().find_map(|x| match x {
        Truth::Plugin {
            plugin,
            mono_ns,
            what,
            ..
        } if plugin == name && pred(what) => Some(*mono_ns),
        _ => None,
    })
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

/// Check that the truth shows what scenario `name` intends; returns the
/// facts it established, one line each.
pub fn verify(name: &str, path: &Path) -> Result<Vec<String>> {
    let t = truth::read(path).with_context(|| format!("reading {}", path.display()))?;
    let mut facts = Vec::new();
    match name {
        "happy" => {
            let n = all_cri_ok(&t)?;
            let pods = pods_of(&t, "happy");
            ensure!(pods.len() == 3, "expected 3 pods, truth has {pods:?}");
            for p in ["alpha", "beta", "gamma"] {
                check_handshake(&t, p, p != "gamma")?;
                check_pod_order(&t, p, &pods)?;
                let d = deliveries(&t, p);
                ensure!(
                    d.iter().all(|x| matches!(x.outcome, Outcome::Ok)),
                    "plugin {p} answered an error"
                );
                let containers = d
                    .iter()
                    .filter(|x| x.event == Some("CREATE_CONTAINER"))
                    .count();
                ensure!(
                    containers == 6,
                    "plugin {p} saw {containers} CreateContainer, expected 6"
                );
            }
            facts.push(format!("{n} CRI calls, all ok; 3 pods x 2 containers"));
            facts.push("alpha, beta (external) and gamma (pre-launched) each saw every pod RUN -> STOP -> REMOVE and 6 CreateContainer".into());
            let synced = plugin_events(&t, "gamma")
                .iter()
                .any(|e| matches!(e, PluginEvent::Synchronized { .. }));
            facts.push(format!(
                "pre-launched gamma {} a Synchronize at start-up",
                if synced { "got" } else { "did not get" }
            ));
        }
        "container-exits" => {
            let n = all_cri_ok(&t)?;
            let pods = pods_of(&t, "exits");
            ensure!(pods.len() == 2, "expected 2 pods, truth has {pods:?}");
            for p in ["alpha", "beta"] {
                check_handshake(&t, p, true)?;
                let stops = deliveries(&t, p)
                    .iter()
                    .filter(|x| x.event == Some("STOP_CONTAINER"))
                    .count();
                ensure!(
                    stops == 2,
                    "plugin {p} saw {stops} StopContainer, expected one per container"
                );
            }
            facts.push(format!(
                "{n} CRI calls, all ok; 2 pods x 1 container that exited on its own"
            ));
            facts.push("alpha and beta each saw one StopContainer per container".into());
        }
        "netns-teardown" => {
            let n = all_cri_ok(&t)?;
            let pods = pods_of(&t, "netns");
            ensure!(pods.len() == 2, "expected 2 pods, truth has {pods:?}");
            check_handshake(&t, "observer", true)?;
            check_pod_order(&t, "observer", &pods)?;
            facts.push(format!(
                "{n} CRI calls, all ok; observer saw both own-netns pods RUN -> STOP -> REMOVE"
            ));
        }
        "slow-plugin" => {
            all_cri_ok(&t)?;
            let d = deliveries(&t, "slow");
            for ev in ["RUN_POD_SANDBOX", "STOP_POD_SANDBOX"] {
                let times: Vec<f64> = d
                    .iter()
                    .filter(|x| x.event == Some(ev))
                    .map(|x| ms(x.reply.unwrap_or(0).saturating_sub(x.recv)))
                    .collect();
                ensure!(
                    times.len() == 2 && times.iter().all(|&m| m >= 500.0),
                    "slow plugin {ev} handler times {times:?} (want 2 >= 500 ms)"
                );
                facts.push(format!("slow plugin held {ev} for {times:.1?} ms"));
            }
            let runs: Vec<f64> = cri_calls(&t)
                .iter()
                .filter(|c| c.0 == "RunPodSandbox")
                .map(|c| ms(c.2))
                .collect();
            ensure!(
                runs.iter().all(|&m| m >= 500.0),
                "RunPodSandbox durations {runs:?} should include the 500 ms hook"
            );
            facts.push(format!("CRI RunPodSandbox took {runs:.1?} ms"));
            // NRI calls plugins one after another: plain receives after
            // slow replied, so after slow's 500 ms hold from its receipt.
            // Not after slow's `reply` stamp: slow takes it when its write
            // returns, and descheduled there it stamps after containerd
            // has already passed the request on (CI 2026-11-28).
            let plain = deliveries(&t, "plain");
            for s in d.iter().filter(|x| x.event == Some("RUN_POD_SANDBOX")) {
                let p = plain
                    .iter()
                    .find(|x| x.event == Some("RUN_POD_SANDBOX") && x.pod == s.pod)
                    .context("plain missed a RunPodSandbox")?;
                ensure!(
                    p.recv >= s.recv + 500_000_000,
                    "plain received {:?} {:.1} ms after slow did, within slow's 500 ms hold",
                    s.pod,
                    ms(p.recv.saturating_sub(s.recv))
                );
            }
            facts.push(
                "plain received each RunPodSandbox only after slow replied (serialized delivery)"
                    .into(),
            );
        }
        "plugin-timeout" => {
            let d = deliveries(&t, "hang");
            let hung: Vec<&Delivery<'_>> = d
                .iter()
                .filter(|x| x.event == Some("RUN_POD_SANDBOX"))
                .collect();
            ensure!(
                hung.len() == 1 && hung[0].reply.is_none(),
                "hang plugin should have one unanswered RunPodSandbox, has {}",
                hung.len()
            );
            let gone = plugin_events(&t, "hang").into_iter().find_map(|e| match e {
                PluginEvent::Disconnected { reason } => Some(reason.clone()),
                _ => None,
            });
            let reason = gone.context("hang plugin was never disconnected")?;
            facts.push(format!("hang plugin got RunPodSandbox({:?}), never answered, and was disconnected: {reason}", hung[0].pod));
            let pods = pods_of(&t, "timeout");
            check_pod_order(&t, "plain", &pods)?;
            facts.push(format!(
                "plain saw both pods {pods:?} RUN -> STOP -> REMOVE"
            ));
            let later = d.iter().filter(|x| x.recv > hung[0].recv).count();
            ensure!(
                later == 0,
                "hang plugin received {later} requests after it hung"
            );
            facts.push("hang plugin received nothing after the timeout".into());
            for c in cri_calls(&t).iter().filter(|c| c.0 == "RunPodSandbox") {
                facts.push(format!(
                    "CRI RunPodSandbox({:?}) took {:.1} ms: {:?}",
                    c.1,
                    ms(c.2),
                    c.3
                ));
            }
        }
        "teardown-error" => {
            let d = deliveries(&t, "failer");
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
            facts.push(
                "failer (idx 05) answered StopPodSandbox and RemovePodSandbox with an error".into(),
            );
            let (runtime, version) = runtime_of(&t, "failer")?;
            for c in cri_calls(&t)
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
            let obs = deliveries(&t, "observer");
            for ev in ["RUN_POD_SANDBOX", "STOP_POD_SANDBOX", "REMOVE_POD_SANDBOX"] {
                let got = obs.iter().any(|x| x.event == Some(ev));
                facts.push(format!(
                    "observer (idx 50) {} {ev}",
                    if got { "received" } else { "did NOT receive" }
                ));
            }
        }
        "late-registration" => {
            all_cri_ok(&t)?;
            let synced = plugin_events(&t, "late").into_iter().find_map(|e| match e {
                PluginEvent::Synchronized { pods, .. } => {
                    Some(pods.iter().map(|p| p.name.clone()).collect::<Vec<_>>())
                }
                _ => None,
            });
            let synced = synced.context("late plugin never synchronized")?;
            let run = deliveries(&t, "late")
                .iter()
                .any(|x| x.event == Some("RUN_POD_SANDBOX") && x.pod == Some("late-pod"));
            let (runtime, version) = runtime_of(&t, "late")?;
            if nri_race_closed(runtime, version) {
                // containerd 2.1 (NRI 0.8) holds a registering plugin's
                // Synchronize until the CRI calls in flight are done
                // (nri#63 closed): the late plugin hears of late-pod in
                // its Synchronize, after the held RunPodSandbox.
                let sync_at = plugin_event_at(&t, "late", |e| {
                    matches!(e, PluginEvent::Synchronized { .. })
                })
                .context("late plugin never synchronized")?;
                // The hook in flight: the slow plugin's RUN_POD_SANDBOX.
                let run_end = deliveries(&t, "slow")
                    .iter()
                    .find(|x| x.event == Some("RUN_POD_SANDBOX") && x.pod == Some("late-pod"))
                    .and_then(|x| x.reply)
                    .context("the slow plugin did not answer RunPodSandbox(late-pod)")?;
                ensure!(
                    synced.iter().any(|n| n == "late-pod") && sync_at >= run_end,
                    "{runtime} {version}: late plugin synchronized with {synced:?} at {sync_at}, the held RunPodSandbox(late-pod) hook was answered at {run_end}: expected Synchronize held until then, listing late-pod"
                );
                let registered =
                    plugin_event_at(&t, "late", |e| matches!(e, PluginEvent::Registered))
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
            let after: Vec<&str> = deliveries(&t, "late")
                .iter()
                .filter(|x| x.pod == Some("late-pod"))
                .filter_map(|x| x.event)
                .collect();
            facts.push(format!(
                "later events for late-pod at the late plugin: {after:?}"
            ));
        }
        "cri-retry-slow-sandbox" => {
            let runs: Vec<_> = cri_calls(&t)
                .into_iter()
                .filter(|c| c.0 == "RunPodSandbox")
                .collect();
            let (last, retried) = runs.split_last().context("no RunPodSandbox")?;
            ensure!(
                !retried.is_empty()
                    && retried
                        .iter()
                        .all(|c| matches!(c.3, Outcome::DeadlineExceeded))
                    && matches!(last.3, Outcome::Ok),
                "expected tries that ran into their deadline, then one ok: {:?}",
                runs.iter().map(|c| c.3).collect::<Vec<_>>()
            );
            let note = notes(&t)
                .into_iter()
                .find(|n| n.starts_with(CRIO_LOG_NOTE))
                .context("no note of crio's log")?;
            // Every retry ran into the reservation (a warning in crio's
            // log, none on the wire); the last took the cached sandbox.
            let want = format!(
                "{CRIO_LOG_NOTE} {} name is reserved, 1 taken from the resource cache",
                runs.len() - 1
            );
            ensure!(note == want, "{note:?}, expected {want:?}");
            facts.push(format!(
                "{} RunPodSandbox tries, {} DeadlineExceeded then ok; {note}",
                runs.len(),
                retried.len()
            ));
        }
        "cri-deadline-retry" | "cri-deadline-retry-go" => {
            let runs: Vec<_> = cri_calls(&t)
                .into_iter()
                .filter(|c| c.0 == "RunPodSandbox")
                .collect();
            ensure!(
                runs.len() >= 2,
                "expected a timed-out try and retries, got {} RunPodSandbox",
                runs.len()
            );
            ensure!(
                matches!(runs[0].3, Outcome::DeadlineExceeded),
                "first try: {:?}",
                runs[0].3
            );
            let adopted = notes(&t)
                .into_iter()
                .find(|n| n.starts_with("adopted sandbox"));
            let (runtime, version) = runtime_of(&t, "slow")?;
            let containerd_2 = !is_crio(runtime) && !version.starts_with("1.");
            if let (Some(note), true) = (adopted, containerd_2) {
                // containerd 2.x lists the sandbox READY once its pause
                // container runs, before the NRI RunPodSandbox hook
                // returns: the retry finds the name reserved and cri-driver
                // adopts the sandbox of the timed-out try it lists (kubelet
                // would retry until the name is free).
                ensure!(
                    runs.last().is_some_and(|c| matches!(c.3, Outcome::Error { message, .. } if crate::cri::reserved_for(message).is_some())),
                    "containerd {version}: adopted a sandbox but the last try was {:?}",
                    runs.last().map(|c| c.3)
                );
                facts.push(format!("containerd {version}: {note}"));
            } else {
                ensure!(
                    matches!(runs.last().map(|c| c.3), Some(Outcome::Ok)),
                    "last try: {:?}",
                    runs.last().map(|c| c.3)
                );
            }
            if is_crio(runtime) {
                // CRI-O calls the NRI hooks with the CRI request's context:
                // when the caller's deadline passes during the slow hook,
                // the NRI call ends DeadlineExceeded, which NRI takes for
                // the plugin's timeout and closes it (nri pkg/adaptation
                // plugin.go isFatalError); the sandbox is then made at once
                // and the retry gets it from CRI-O's resource cache.
                let first_start = t
                    .iter()
                    .find_map(|x| match x {
                        Truth::Cri {
                            method,
                            start_mono_ns,
                            ..
                        } if method == "RunPodSandbox" => Some(*start_mono_ns),
                        _ => None,
                    })
                    .unwrap_or(0);
                if let Some((at, why)) = disconnected_at(&t, "slow") {
                    facts.push(format!(
                        "{runtime} {version}: the slow plugin was disconnected {:.0} ms after the first try began ({why})",
                        ms(at.saturating_sub(first_start))
                    ));
                }
            }
            let names: Vec<_> = runs.iter().map(|c| c.1).collect();
            ensure!(
                names.windows(2).all(|w| w[0] == w[1]),
                "retries changed the pod name: {names:?}"
            );
            let attempts: Vec<u32> = t
                .iter()
                .filter_map(|x| match x {
                    Truth::Cri {
                        method,
                        pod: Some(p),
                        ..
                    } if method == "RunPodSandbox" => Some(p.attempt),
                    _ => None,
                })
                .collect();
            ensure!(
                attempts.windows(2).all(|w| w[0] == w[1]),
                "retries changed the attempt: {attempts:?}"
            );
            for c in &runs {
                facts.push(format!(
                    "RunPodSandbox try {} ({:?}): {:.1} ms, {:?}",
                    c.4,
                    c.1,
                    ms(c.2),
                    c.3
                ));
            }
        }
        "ignore-sigterm" => {
            all_cri_ok(&t)?;
            let stop = cri_calls(&t)
                .into_iter()
                .find(|c| c.0 == "StopContainer")
                .context("no StopContainer")?;
            ensure!(
                ms(stop.2) >= 2000.0,
                "StopContainer took {:.1} ms, expected >= the 2 s grace",
                ms(stop.2)
            );
            facts.push(format!(
                "StopContainer took {:.1} ms (grace 2 s, then SIGKILL)",
                ms(stop.2)
            ));
        }
        "busy-mount" => {
            let notes: Vec<&str> = t
                .iter()
                .filter_map(|x| {
                    if let Truth::Note { text, .. } = x {
                        Some(text.as_str())
                    } else {
                        None
                    }
                })
                .collect();
            ensure!(
                notes.iter().any(|n| n.starts_with("holder pid")),
                "no holder was started"
            );
            let outcome = notes
                .iter()
                .find(|n| n.starts_with("teardown with the mount held"))
                .context("no teardown outcome")?;
            facts.push(outcome.to_string());
            for c in cri_calls(&t).iter().filter(|c| !matches!(c.3, Outcome::Ok)) {
                facts.push(format!("CRI {} failed: {:?}", c.0, c.3));
            }
        }
        "unkillable" => {
            let notes = notes(&t);
            let note = |prefix: &str| {
                notes
                    .iter()
                    .find(|n| n.starts_with(prefix))
                    .with_context(|| format!("no note {prefix:?}..."))
            };
            facts.push(note("reader pid ")?.to_string());
            let stuck = note("stuck pid ")?;
            ensure!(stuck.contains("in state D"), "{stuck}");
            facts.push(stuck.to_string());
            let outcome = note("teardown with the reader stuck: ")?;
            ensure!(
                outcome.contains(": failed: "),
                "the teardown did not fail: {outcome}"
            );
            facts.push(outcome.to_string());
            let calls = cri_calls(&t);
            let stop = calls
                .iter()
                .find(|c| c.0 == "StopContainer")
                .context("no StopContainer")?;
            ensure!(
                matches!(stop.3, Outcome::DeadlineExceeded),
                "the first StopContainer ended {:?}, not at its deadline",
                stop.3
            );
            facts.push(format!(
                "the first StopContainer ran into its deadline after {:.1} ms",
                ms(stop.2)
            ));
            let before = note("pid ")?;
            ensure!(
                before.ends_with("before the release: state D"),
                "not stuck until the release: {before}"
            );
            facts.push(before.to_string());
            facts.push(note("fuse-hang stopped")?.to_string());
            let removed = calls
                .iter()
                .any(|c| c.0 == "RemovePodSandbox" && matches!(c.3, Outcome::Ok));
            ensure!(removed, "the pod was never removed");
            let after: Vec<String> = calls
                .iter()
                .skip_while(|c| !std::ptr::eq(*c, stop))
                .skip(1)
                .map(|c| format!("{} {:?}", c.0, c.3))
                .collect();
            facts.push(format!("CRI calls after it: {}", after.join(", ")));
        }
        "hung-teardown-hook" => {
            let calls = cri_calls(&t);
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
            let hung = deliveries(&t, "hung");
            let hook = unanswered_stop(&hung)?;
            // The call's start and end, for the hook's place in it.
            let (start, end) = t
                .iter()
                .find_map(|x| match x {
                    Truth::Cri {
                        method,
                        start_mono_ns,
                        end_mono_ns,
                        ..
                    } if method == "StopPodSandbox" => Some((*start_mono_ns, *end_mono_ns)),
                    _ => None,
                })
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
            let removal = t
                .iter()
                .rev()
                .find_map(|x| match x {
                    Truth::Cri {
                        method,
                        start_mono_ns,
                        ..
                    } if method == "RemovePodSandbox" => Some(*start_mono_ns),
                    _ => None,
                })
                .unwrap_or(u64::MAX);
            let rel = |at: u64| {
                let d = at as f64 - end as f64;
                format!("{:+.1} ms from the deadline", d / 1e6)
            };
            for p in ["hung", "plain"] {
                let stop = deliveries(&t, p)
                    .into_iter()
                    .filter(|x| x.event == Some("STOP_POD_SANDBOX"))
                    .map(|x| rel(x.recv))
                    .collect::<Vec<_>>();
                let gone = disconnected_at(&t, p);
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
        }
        "hung-teardown-client-gone" => {
            let killed = note_at(&t, "cri-driver killed during StopPodSandbox")
                .context("no note of the driver's kill")?;
            let hung = deliveries(&t, "hung");
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
            let gone = disconnected_at(&t, "hung");
            ensure!(
                gone.is_none_or(|(g, _)| hung.iter().all(|x| x.recv < g)),
                "plugin hung was disconnected before its last delivery"
            );
            let removed = cri_calls(&t)
                .iter()
                .any(|c| c.0 == "RemovePodSandbox" && matches!(c.3, Outcome::Ok));
            ensure!(removed, "the pod was never removed");
            facts.push(format!(
                "plugin hung received StopPodSandbox {:.1} ms before the client was killed and never answered; it stayed connected and got {} after",
                ms(killed - hook.recv),
                later.join(", ")
            ));
        }
        "plugins-before-attach" => {
            let n = all_cri_ok(&t)?;
            // Noted just before the observer (if any) attaches.
            let attached = note_at(&t, "all plugins registered").context("no registration note")?;
            let pods = pods_of(&t, "before-attach");
            ensure!(pods.len() == 2, "expected 2 pods, truth has {pods:?}");
            for (p, idx) in BEFORE_ATTACH_PLUGINS {
                if p == "upstream-logger" {
                    continue;
                }
                check_handshake(&t, p, !matches!(p, "gamma" | "pre-plain"))?;
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
                check_pod_order(&t, p, &pods)?;
            }
            facts.push(format!(
                "{n} CRI calls, all ok; 6 test plugins registered before the observer attached \
                 and saw both pods RUN -> STOP -> REMOVE (and the upstream logger)"
            ));
        }
        "go-plugins" => {
            let n = all_cri_ok(&t)?;
            let attached = note_at(&t, "all plugins registered").context("no registration note")?;
            let pods = pods_of(&t, "goplug");
            ensure!(pods.len() == 2, "expected 2 pods, truth has {pods:?}");
            let (runtime, version) = runtime_of(&t, "go12")?;
            let per_event = per_event_methods(runtime, version);
            for (p, idx, stub) in GO_PLUGINS {
                check_handshake(&t, p, true)?;
                let registered = plugin_event_at(&t, p, |e| matches!(e, PluginEvent::Registered));
                ensure!(
                    registered.is_some_and(|r| r < attached),
                    "plugin {idx}-{p} did not register before the observer attached"
                );
                check_pod_order(&t, p, &pods)?;
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
                let unimplemented =
                    |o: &Outcome| matches!(o, Outcome::Error { code, .. } if *code == 12);
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
        }
        "upstream-witness" => {
            all_cri_ok(&t)?;
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
        }
        "pods-before-attach" => {
            let n = all_cri_ok(&t)?;
            let up = cri_calls(&t)
                .iter()
                .filter(|c| c.0 == "RunPodSandbox")
                .count();
            ensure!(up == 2, "expected 2 RunPodSandbox calls, got {up}");
            facts.push(match note_at(&t, truth::OBSERVER_ATTACHED) {
                Some(at) => format!(
                    "{n} CRI calls ok; the observer attached at {at} ns, after both pods ran"
                ),
                None => format!("{n} CRI calls ok (no observer)"),
            });
        }
        "split-synchronize" => {
            let n = all_cri_ok(&t)?;
            let parts: Vec<(Vec<&str>, usize)> = plugin_events(&t, "late")
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
            let stale = plugin_events(&t, "stale");
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
                .filter(
                    |x| matches!(x, Truth::Nri { plugin, event: Some(_), .. } if plugin == "stale"),
                )
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
        }
        "cri-late-attach"
        | "cri-late-attach-go"
        | "cri-late-attach-nri"
        | "cri-late-attach-go-nri" => {
            let n = all_cri_ok(&t)?;
            // 2 phases x (7 + 14 per pod), 3 pods (4 with plugins);
            // cri-driver adds a connect-time Version.
            let pods = if name.ends_with("-nri") { 4 } else { 3 };
            let tonic = !name.starts_with("cri-late-attach-go");
            let want = 2 * (7 + 14 * pods) + usize::from(tonic);
            ensure!(n == want, "expected {want} CRI calls, got {n}");
            facts.push(format!(
                "{n} CRI calls ok on one connection, observer attached mid-way"
            ));
        }
        "runtime-after-observer" => {
            let n = all_cri_ok(&t)?;
            let pods = pods_of(&t, "first");
            ensure!(pods.len() == 1, "expected 1 pod, truth has {pods:?}");
            for p in ["pre", "alpha"] {
                check_pod_order(&t, p, &pods)?;
            }
            facts.push(format!(
                "{n} CRI calls, all ok; pre (pre-launched) and alpha (external) each saw the pod \
                 RUN -> STOP -> REMOVE"
            ));
        }
        "runtime-restart" => {
            all_cri_ok(&t)?;
            let restarted = note_at(&t, "containerd restarted").context("no restart note")?;
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
        }
        "crictl" => facts.extend(crate::crictl::verify(&t)?),
        "pod-resize" => facts.extend(pod_resize::verify(&t)?),
        "adjustment-rejected" => facts.extend(adjustment_rejected::verify(&t)?),
        "load" => {
            let n = all_cri_ok(&t)?;
            let pods = pods_of(&t, "load");
            ensure!(pods.len() == 100, "expected 100 pods, got {}", pods.len());
            for p in ["alpha", "beta", "gamma"] {
                check_pod_order(&t, p, &pods)?;
            }
            facts.push(format!(
                "{n} CRI calls ok; 100 pods; each of 3 plugins saw every pod RUN -> STOP -> REMOVE"
            ));
        }
        other => bail!("unknown scenario {other}"),
    }
    Ok(facts)
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
