//! Pods left Terminating on purpose, one per cause, with the driver
//! retrying their teardown in the background as kubelet's pod worker does
//! (`cri-driver teardown`: StopContainer, StopPodSandbox, unmount the
//! pod's volumes, RemovePodSandbox; a failed step again every
//! `retry_ms`). A test looks at the node meanwhile (`nri-trace explain POD`
//! without a recording) and checks that it names the cause;
//! [`StuckPod::release`] (or dropping it) unblocks the pod, lets the driver
//! finish, and brings the lab down clean.
//!
//! The caller holds the lab lock ([`crate::labctl::lock`]); [`make_stuck`]
//! brings the lab up with what the cause needs (its NRI request timeout,
//! its plugins).
//!
//! What containerd 1.7.24 does with each cause (lab runs, see docs/lab.md):
//!
//! | cause | what keeps the pod | the driver's failing step |
//! | --- | --- | --- |
//! | busy-mount | a host process's cwd is in the container's rootfs: the shim's unmount fails with EBUSY | StopContainer runs into its deadline, every try |
//! | alive-after-sigkill | the container's process sits in a FUSE read never answered (state D), SIGKILL pending | StopContainer runs into its deadline, every try |
//! | hung-teardown-hook | a plugin's StopPodSandbox hook never returns | the first StopPodSandbox runs into its deadline; containerd calls a pod's StopPodSandbox hook once, so the retry succeeds and the pod goes |
//! | plugin-error-on-stop | a plugin answers StopPodSandbox with an error | none: containerd logs the error ("NRI sandbox stop notification failed", `sandbox_stop.go`) and goes on, so the pod is removed at once |
//! | volume-busy | a host process's cwd is in the pod's volume (the driver's tmpfs) | the driver's own umount2 of the volume fails with EBUSY, every try; RemovePodSandbox waits |

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    thread::sleep,
    time::{Duration, Instant},
};

use anyhow::{bail, ensure, Context, Result};

use crate::{
    labctl::Lab,
    scenario::{self, Bins, FuseHang, PluginSpec, Run},
    truth::{self, Outcome, Truth},
    volume,
};

/// Why a pod stays Terminating.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cause {
    /// A host process holds the container's rootfs mount busy.
    BusyMount,
    /// A container process survives SIGKILL (FUSE read never answered).
    AliveAfterSigkill,
    /// A plugin's StopPodSandbox hook never returns.
    HungTeardownHook,
    /// A plugin fails StopPodSandbox (containerd 1.7 goes on regardless).
    PluginErrorOnStop,
    /// A host process keeps the pod's volume busy: the driver's unmount
    /// fails with EBUSY.
    VolumeBusy,
}

impl Cause {
    pub const ALL: [Cause; 5] = [
        Cause::BusyMount,
        Cause::AliveAfterSigkill,
        Cause::HungTeardownHook,
        Cause::PluginErrorOnStop,
        Cause::VolumeBusy,
    ];

    /// `busy-mount`, ... (the pod's name too).
    pub fn name(self) -> &'static str {
        match self {
            Cause::BusyMount => "busy-mount",
            Cause::AliveAfterSigkill => "alive-after-sigkill",
            Cause::HungTeardownHook => "hung-teardown-hook",
            Cause::PluginErrorOnStop => "plugin-error-on-stop",
            Cause::VolumeBusy => "volume-busy",
        }
    }

    pub fn parse(s: &str) -> Result<Self> {
        Self::ALL
            .into_iter()
            .find(|c| c.name() == s)
            .with_context(|| {
                let names: Vec<&str> = Self::ALL.iter().map(|c| c.name()).collect();
                format!("unknown cause {s:?}; one of: {}", names.join(", "))
            })
    }
}

/// The plugin whose StopPodSandbox hook hangs (hung-teardown-hook).
pub const HUNG_PLUGIN: &str = "stuckhook";
/// The plugin that fails StopPodSandbox (plugin-error-on-stop).
pub const FAILING_PLUGIN: &str = "stopfail";
/// The pod's volume (volume-busy).
pub const VOLUME_NAME: &str = "data";
/// The pods' CRI namespace.
pub const NAMESPACE: &str = "stuck";

/// What should be named as the cause, as data.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Expected {
    /// The step that fails on each try of the driver: a CRI method, or
    /// `unmount` (the driver's own umount2); None when nothing fails.
    pub failing_step: Option<String>,
    /// `explain`'s blocker kind for it (docs/schema: `unmount_failed`,
    /// `alive_after_kill`, `hook_pending`); None when the pod goes.
    pub blocker: Option<String>,
    /// The path that cannot be unmounted.
    pub path: Option<PathBuf>,
    /// The errno of that unmount.
    pub errno: Option<i32>,
    /// The process that holds the path, or that survives SIGKILL.
    pub pid: Option<u32>,
    /// The plugin as containerd and nri-trace name it (`NN-name`), and its
    /// hook (the NRI event, e.g. `STOP_POD_SANDBOX`).
    pub plugin: Option<String>,
    pub hook: Option<String>,
    /// False when containerd does not keep the pod (plugin-error-on-stop).
    pub stays_stuck: bool,
}

/// Knobs of [`make_stuck`].
#[derive(Clone, Debug)]
pub struct StuckOptions {
    /// The driver's CRI request timeout (kubelet's is 2 min; StopContainer
    /// gets it plus the 2 s grace).
    pub request_timeout_ms: u64,
    /// The wait between a failed step and its next try.
    pub retry_ms: u64,
}

impl Default for StuckOptions {
    fn default() -> Self {
        Self {
            request_timeout_ms: 10_000,
            retry_ms: 2_000,
        }
    }
}

/// A pod left Terminating, its teardown retried in the background.
pub struct StuckPod {
    pub cause: Cause,
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub sandbox_id: String,
    pub container_ids: Vec<String>,
    /// The retrying driver (the CRI client whose calls fail).
    pub driver_pid: u32,
    /// The truth file: every CRI call, volume step and plugin request.
    pub truth: PathBuf,
    pub expected: Expected,
    run: Option<Run>,
    driver: Option<Child>,
    holder: Option<Child>,
    fuse: Option<FuseHang>,
}

impl StuckPod {
    /// `namespace/name`, as `nri-trace explain` takes it.
    pub fn pod(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    fn records(&self) -> Vec<Truth> {
        truth::read(&self.truth).unwrap_or_default()
    }

    /// The driver's tries so far: (step, retry, outcome), CRI calls and
    /// volume steps of this pod, in the truth file's order.
    pub fn tries(&self) -> Result<Vec<(String, u32, Outcome)>> {
        Ok(truth::read(&self.truth)?
            .into_iter()
            .filter_map(|t| match t {
                Truth::Cri {
                    method,
                    pod: Some(p),
                    outcome,
                    retry,
                    ..
                } if p.uid == self.uid => Some((method, retry, outcome)),
                Truth::Volume {
                    op,
                    pod: Some(p),
                    outcome,
                    retry,
                    ..
                } if p.uid == self.uid => Some((op, retry, outcome)),
                _ => None,
            })
            .collect())
    }

    /// The driver's failed tries so far (of [`Self::tries`]; none while
    /// the truth file cannot be read).
    pub fn failed_tries(&self) -> Vec<(String, u32, Outcome)> {
        self.tries()
            .unwrap_or_default()
            .into_iter()
            .filter(|(_, _, o)| *o != Outcome::Ok)
            .collect()
    }

    /// Did the driver's CRI `method` for this pod succeed?
    fn succeeded(&self, method: &str) -> bool {
        self.records().iter().any(|t| {
            matches!(t, Truth::Cri { method: m, pod: Some(p), outcome: Outcome::Ok, .. }
                if m == method && p.uid == self.uid)
        })
    }

    /// The plugin's request for `event` of this pod, and whether it was
    /// answered (and how).
    fn hook(&self, plugin: &str, event: &str) -> Option<(Option<u64>, Outcome)> {
        self.records().into_iter().find_map(|t| match t {
            Truth::Nri {
                plugin: p,
                event: Some(e),
                pod: Some(pod),
                reply_mono_ns,
                outcome,
                ..
            } if p == plugin && e == event && pod.uid == self.uid => Some((reply_mono_ns, outcome)),
            _ => None,
        })
    }

    /// Proof, from the truth file and /proc, that the pod is held as the
    /// cause says and the driver has tried and failed at least once (for
    /// hung-teardown-hook: the hook is pending and the StopPodSandbox in
    /// flight; for plugin-error-on-stop: the error was answered and the pod
    /// removed all the same). Err says what is missing yet.
    pub fn check(&self) -> Result<Vec<String>> {
        let mut facts = vec![];
        let failed = self.failed_tries();
        if let Some(step) = &self.expected.failing_step {
            if self.cause != Cause::HungTeardownHook {
                let n = failed.iter().filter(|(s, _, _)| s == step).count();
                ensure!(n > 0, "no failed {step} of the driver yet");
                let last = failed.iter().rev().find(|(s, _, _)| s == step);
                facts.push(format!(
                    "{n} failed {step} tries of cri-driver pid {}; last: {:?}",
                    self.driver_pid,
                    last.map(|(_, _, o)| o)
                ));
            }
        }
        match self.cause {
            Cause::BusyMount | Cause::VolumeBusy => {
                let pid = self.expected.pid.context("holder pid")?;
                let path = self.expected.path.clone().context("held path")?;
                let cwd = std::fs::read_link(format!("/proc/{pid}/cwd"))
                    .with_context(|| format!("holder pid {pid} is gone"))?;
                ensure!(cwd == path, "holder pid {pid}'s cwd is {}", cwd.display());
                ensure!(
                    volume::is_mounted(&path),
                    "{} is no longer mounted",
                    path.display()
                );
                facts.push(format!(
                    "pid {pid} has its cwd in {}, which is still mounted",
                    path.display()
                ));
                if self.cause == Cause::VolumeBusy {
                    ensure!(
                        self.succeeded("StopPodSandbox"),
                        "StopPodSandbox did not succeed before the unmount"
                    );
                    ensure!(
                        !self.succeeded("RemovePodSandbox"),
                        "RemovePodSandbox ran with the volume mounted"
                    );
                }
            }
            Cause::AliveAfterSigkill => {
                let pid = self.expected.pid.context("reader pid")?;
                let (state, comm) = scenario::proc_state(pid)
                    .with_context(|| format!("reader pid {pid} is gone"))?;
                ensure!(
                    state == 'D',
                    "reader pid {pid} ({comm}) is in state {state}, not D"
                );
                facts.push(format!(
                    "pid {pid} ({comm}) in state D, SIGKILL pending {}, wchan {}",
                    scenario::sigkill_pending(pid),
                    scenario::wchan(pid)
                ));
            }
            Cause::HungTeardownHook => {
                let (reply, _) = self
                    .hook(HUNG_PLUGIN, "STOP_POD_SANDBOX")
                    .context("the plugin got no StopPodSandbox yet")?;
                ensure!(reply.is_none(), "the plugin answered StopPodSandbox");
                ensure!(
                    !self.succeeded("StopPodSandbox"),
                    "StopPodSandbox already succeeded"
                );
                facts.push(format!(
                    "plugin {HUNG_PLUGIN} holds StopPodSandbox unanswered; cri-driver pid {} waits for it",
                    self.driver_pid
                ));
            }
            Cause::PluginErrorOnStop => {
                let (_, outcome) = self
                    .hook(FAILING_PLUGIN, "STOP_POD_SANDBOX")
                    .context("the plugin got no StopPodSandbox yet")?;
                ensure!(
                    matches!(outcome, Outcome::Error { .. }),
                    "the plugin answered StopPodSandbox with {outcome:?}"
                );
                ensure!(
                    self.succeeded("RemovePodSandbox"),
                    "the pod is not removed yet"
                );
                facts.push(format!(
                    "plugin {FAILING_PLUGIN} failed StopPodSandbox; StopPodSandbox and RemovePodSandbox succeeded all the same ({} failed tries)",
                    failed.len()
                ));
            }
        }
        Ok(facts)
    }

    /// Wait (polling) until [`StuckPod::check`] passes.
    pub fn wait_stuck(&self, within: Duration) -> Result<Vec<String>> {
        let t0 = Instant::now();
        loop {
            match self.check() {
                Ok(f) => return Ok(f),
                Err(e) if t0.elapsed() > within => {
                    bail!(
                        "pod {} not stuck as {} after {within:?}: {e:#}",
                        self.pod(),
                        self.cause.name()
                    )
                }
                Err(_) => sleep(Duration::from_millis(100)),
            }
        }
    }

    /// Unblock the pod (kill the holder, stop the FUSE server), let the
    /// driver finish its teardown (its next try succeeds), then bring the
    /// lab down and check that nothing of the pod is left. Returns what it
    /// saw.
    pub fn release(mut self) -> Result<Vec<String>> {
        self.release_inner()
    }

    fn release_inner(&mut self) -> Result<Vec<String>> {
        let Some(mut run) = self.run.take() else {
            return Ok(vec![]);
        };
        let mut facts = vec![];
        let mut res: Result<()> = Ok(());
        if let Some(mut h) = self.holder.take() {
            let _ = h.kill();
            let _ = h.wait();
            facts.push(format!("holder pid {} killed", h.id()));
        }
        if let Some(mut f) = self.fuse.take() {
            match f.stop() {
                Ok(st) => facts.push(format!("fuse-hang stopped ({st})")),
                Err(e) => res = Err(e),
            }
        }
        // The driver's next try goes through: StopContainer's deadline is
        // the request timeout plus the grace, then the retry wait.
        if let Some(mut d) = self.driver.take() {
            let t0 = Instant::now();
            let status = loop {
                if let Some(st) = d.try_wait()? {
                    break Some(st);
                }
                if t0.elapsed() > Duration::from_secs(90) {
                    let _ = d.kill();
                    let _ = d.wait();
                    break None;
                }
                sleep(Duration::from_millis(100));
            };
            match status {
                Some(st) if st.success() => facts.push(format!(
                    "cri-driver teardown finished after the release ({} failed tries in all)",
                    self.failed_tries().len()
                )),
                // Ctrl-C in `nri-lab stuck` reaches the driver too (same
                // process group); lab down below removes the pod then.
                Some(st) if std::os::unix::process::ExitStatusExt::signal(&st).is_some() => {
                    facts.push(format!("cri-driver teardown ended by a signal ({st})"));
                }
                other => {
                    if res.is_ok() {
                        res = Err(anyhow::anyhow!(
                            "cri-driver teardown did not finish after the release ({other:?}); see {}",
                            self.truth.with_file_name("teardown.log").display()
                        ));
                    }
                }
            }
        }
        let down = run.lab.down();
        run.reap_plugins();
        let _ = run.lab.clear_plugins();
        let mut ids = self.container_ids.clone();
        ids.push(self.sandbox_id.clone());
        ids.retain(|i| !i.is_empty());
        let left = run.lab.leftovers(&ids);
        let kubelet_pod = volume::pod_dir(&volume::kubelet_root(&run.lab.dir), &self.uid);
        res?;
        down?;
        ensure!(left.is_empty(), "left after lab down: {left:?}");
        ensure!(
            !kubelet_pod.exists(),
            "{} is left after the teardown",
            kubelet_pod.display()
        );
        Ok(facts)
    }
}

impl Drop for StuckPod {
    fn drop(&mut self) {
        if let Err(e) = self.release_inner() {
            eprintln!("stuck pod {}: release: {e:#}", self.name);
        }
    }
}

/// A `sleep 3600` whose cwd is `dir`: it keeps the mount of `dir` busy
/// (umount2 fails with EBUSY), as an agent or a shell left in a pod's
/// directory would. Dies with this process (PDEATHSIG) should it be killed
/// without dropping the guard.
/// A host process with its cwd in `path` (a rootfs or a volume): the
/// unmount fails with EBUSY at `failing_step`, on every try. What the pod
/// then expects, and the holder.
fn hold_busy(run: &Run, path: PathBuf, failing_step: &str) -> Result<(Expected, Option<Child>)> {
    let h = hold(&path)?;
    run.note(&format!(
        "holder pid {} has its cwd in {}",
        h.id(),
        path.display()
    ))?;
    let expected = Expected {
        failing_step: Some(failing_step.into()),
        blocker: Some("unmount_failed".into()),
        path: Some(path),
        errno: Some(libc::EBUSY),
        pid: Some(h.id()),
        stays_stuck: true,
        ..Default::default()
    };
    Ok((expected, Some(h)))
}

fn hold(dir: &Path) -> Result<Child> {
    let mut cmd = Command::new("sleep");
    cmd.arg("3600").current_dir(dir).stdin(Stdio::null());
    // SAFETY: prctl is async-signal-safe.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    cmd.spawn()
        .with_context(|| format!("starting a holder in {}", dir.display()))
}

/// Make a pod stuck for `cause` on `lab` (installed; the caller holds the
/// lab lock), its teardown retried by `cri-driver teardown` in the
/// background. `out` gets the truth file and the logs.
pub fn make_stuck(
    lab: Lab,
    bins: Bins,
    cause: Cause,
    out: &Path,
    opts: &StuckOptions,
) -> Result<StuckPod> {
    let lab_ctl = lab.clone();
    make_stuck_inner(lab, bins, cause, out, opts).inspect_err(|_| {
        // Whatever was made goes (a half-made StuckPod's drop did the
        // same already; down is idempotent).
        let _ = lab_ctl.down();
        let _ = lab_ctl.clear_plugins();
    })
}

fn make_stuck_inner(
    lab: Lab,
    bins: Bins,
    cause: Cause,
    out: &Path,
    opts: &StuckOptions,
) -> Result<StuckPod> {
    let mut run = Run::unlisted(&format!("stuck-{}", cause.name()), lab, bins, out)?;
    run.lab.clear_plugins()?;
    let mut pod = StuckPod {
        cause,
        namespace: NAMESPACE.into(),
        name: cause.name().into(),
        uid: String::new(),
        sandbox_id: String::new(),
        container_ids: vec![],
        driver_pid: 0,
        truth: run.truth.clone(),
        expected: Expected {
            stays_stuck: true,
            ..Default::default()
        },
        run: None,
        driver: None,
        holder: None,
        fuse: None,
    };
    // The NRI request timeout: a hung hook must outlive the CRI call's
    // deadline (containerd gives up on the hook when the call's context
    // ends), so that the call, not the plugin timer, ends it.
    let request_timeout = match cause {
        Cause::HungTeardownHook => "60s",
        _ => "2s",
    };
    run.up(request_timeout)?;
    let mut up_args: Vec<String> = ["up", "--name", cause.name(), "--namespace", NAMESPACE]
        .map(String::from)
        .to_vec();
    match cause {
        Cause::HungTeardownHook => {
            run.external(&PluginSpec {
                name: HUNG_PLUGIN,
                idx: "10",
                args: &["--on", "STOP_POD_SANDBOX=hang"],
            })?;
            // Own netns: with the hook hung the network teardown runs on
            // an expired context and fails, so the first StopPodSandbox
            // fails every time (scenario/hung_teardown.rs hung_teardown_hook).
            up_args.push("--netns".into());
        }
        Cause::PluginErrorOnStop => {
            run.external(&PluginSpec {
                name: FAILING_PLUGIN,
                idx: "10",
                args: &["--on", "STOP_POD_SANDBOX=error:teardown refused"],
            })?;
        }
        Cause::VolumeBusy => {
            up_args.extend(["--volume".into(), VOLUME_NAME.into()]);
        }
        Cause::AliveAfterSigkill => {
            let mnt = run.lab.dir.join("fuse-hang");
            let fuse = FuseHang::start(&run.bins.fuse_hang(), &mnt, &run.out)?;
            pod.fuse = Some(fuse);
            up_args.extend([
                "--mount".into(),
                format!("{}:/hang", mnt.display()),
                "--".into(),
                "sh".into(),
                "-c".into(),
                "cat /hang/hang; sleep 3600".into(),
            ]);
        }
        Cause::BusyMount => {}
    }
    let up_ref: Vec<&str> = up_args.iter().map(String::as_str).collect();
    let up_out = run.driver(&up_ref);
    let lab_dir = run.lab.dir.clone();
    pod.run = Some(run);
    let up_out = up_out?;
    pod.sandbox_id = scenario::sandbox_id_of(&up_out)?;
    let container = scenario::container_id_of(&up_out)?;
    pod.container_ids.push(container.clone());
    let v: serde_json::Value = up_out
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
        .context("cri-driver up printed no JSON")?;
    v["pod"]["uid"]
        .as_str()
        .context("pod uid")?
        .clone_into(&mut pod.uid);
    let run = pod.run.as_ref().context("run")?;
    run.note(&format!(
        "stuck pod {}/{} ({}) uid {} sandbox {} container {container}",
        NAMESPACE,
        pod.name,
        cause.name(),
        pod.uid,
        pod.sandbox_id
    ))?;
    // Hold the pod before its teardown starts.
    match cause {
        Cause::BusyMount => {
            // The task's rootfs mount lives under the lab's containerd
            // state dir (lab.sh), not /run/containerd.
            let rootfs = lab_dir
                .join("state/io.containerd.runtime.v2.task/k8s.io")
                .join(&container)
                .join("rootfs");
            ensure!(
                rootfs.is_dir(),
                "container rootfs {} not found",
                rootfs.display()
            );
            (pod.expected, pod.holder) = hold_busy(run, rootfs, "StopContainer")?;
        }
        Cause::VolumeBusy => {
            let path = volume::empty_dir(&volume::kubelet_root(&lab_dir), &pod.uid, VOLUME_NAME);
            (pod.expected, pod.holder) = hold_busy(run, path, "unmount")?;
        }
        Cause::AliveAfterSigkill => {
            let fuse = pod.fuse.as_ref().context("fuse-hang")?;
            let pid = fuse.held_reader(Duration::from_secs(20))?;
            let cgroup = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
            ensure!(
                cgroup.contains(&container),
                "reader pid {pid} is not in container {container}'s cgroup: {cgroup}"
            );
            run.note(&format!(
                "reader pid {pid} of container {container} blocked in a FUSE read"
            ))?;
            pod.expected = Expected {
                failing_step: Some("StopContainer".into()),
                blocker: Some("alive_after_kill".into()),
                pid: Some(pid),
                stays_stuck: true,
                ..Default::default()
            };
        }
        Cause::HungTeardownHook => {
            pod.expected = Expected {
                failing_step: Some("StopPodSandbox".into()),
                blocker: Some("hook_pending".into()),
                plugin: Some(format!("10-{HUNG_PLUGIN}")),
                hook: Some("STOP_POD_SANDBOX".into()),
                // Only the first StopPodSandbox hangs (see the module doc).
                stays_stuck: false,
                ..Default::default()
            };
        }
        Cause::PluginErrorOnStop => {
            pod.expected = Expected {
                plugin: Some(format!("10-{FAILING_PLUGIN}")),
                hook: Some("STOP_POD_SANDBOX".into()),
                stays_stuck: false,
                ..Default::default()
            };
        }
    }
    // kubelet's pod worker: the teardown, retried.
    let timeout = opts.request_timeout_ms.to_string();
    let retry = opts.retry_ms.to_string();
    let out_dir = run.out.clone();
    let driver = run
        .driver_cmd(&[
            "--request-timeout-ms",
            &timeout,
            "teardown",
            "--sandbox-id",
            &pod.sandbox_id,
            "--retry-ms",
            &retry,
        ])
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(out_dir.join("teardown.out"))?)
        .stderr(std::fs::File::create(out_dir.join("teardown.log"))?)
        .spawn()
        .context("starting cri-driver teardown")?;
    pod.driver_pid = driver.id();
    pod.driver = Some(driver);
    Ok(pod)
}
