//! The lab's cluster for a test: lab/cluster.sh up and down under the lab
//! lock, kubectl with its admin kubeconfig, the nri-trace image in the
//! node's runtime and the DaemonSet of deploy/.

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    thread::sleep,
    time::{Duration, Instant},
};

use anyhow::{bail, ensure, Context, Result};
use nri_trace_lab::labctl::{self, LabLock};
use nri_trace_tests::workspace_bin;

use super::{
    otel_collector::{OTLP_GRPC, OTLP_HTTP},
    output,
    pods::TestPod,
};

/// The node's runtime.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum NodeRuntime {
    /// containerd 2.3, the lab cluster's default; kubelet and containerd
    /// trace to the test's collector (traces.rs).
    Containerd23,
    /// CRI-O, no tracing (no collector runs for it).
    Crio,
}

impl NodeRuntime {
    /// NRI_TRACE_LAB_RUNTIME of lab/cluster.sh.
    fn lab_name(self) -> &'static str {
        match self {
            NodeRuntime::Containerd23 => "containerd-2.3",
            NodeRuntime::Crio => "crio",
        }
    }

    /// Its CRI socket under the lab's directory (lab.sh, crio.sh).
    fn cri_socket(self) -> &'static str {
        match self {
            NodeRuntime::Containerd23 => "run/containerd.sock",
            NodeRuntime::Crio => "run/crio.sock",
        }
    }
}
/// The NRI plugin request timeout the node's containerd gets: long enough
/// that a hung hook holds the pod while the test looks (containerd's
/// default, 2 s, closes the plugin first).
const REQUEST_TIMEOUT: &str = "60s";
/// The DaemonSet's image reference, the tag set by the test.
const IMAGE: &str = "localhost/nri-trace/nri-trace";

pub(crate) struct Cluster {
    runtime: NodeRuntime,
    lab: PathBuf,
    repo: PathBuf,
    kubeconfig: PathBuf,
    _lock: LabLock,
}

impl Cluster {
    /// The runtime and Kubernetes built (no-ops when built), then
    /// `cluster.sh up`.
    pub(crate) fn up(out: &Path, runtime: NodeRuntime) -> Result<Self> {
        let lock = labctl::lock()?;
        let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let lab = PathBuf::from(
            std::env::var_os("NRI_TRACE_LAB_DIR")
                .unwrap_or_else(|| "/var/lib/nri-trace-lab".into()),
        );
        let c = Cluster {
            runtime,
            kubeconfig: lab.join("cluster/admin.kubeconfig"),
            lab,
            repo,
            _lock: lock,
        };
        c.script("lab.sh", &["install"])?;
        c.script("k8s.sh", &["install"])?;
        let t0 = Instant::now();
        let up = c.script("cluster.sh", &["up"]);
        std::fs::write(
            out.join("cluster-up.txt"),
            format!("{:.1} s\n", t0.elapsed().as_secs_f64()),
        )?;
        up?;
        Ok(c)
    }

    fn script(&self, name: &str, args: &[&str]) -> Result<String> {
        self.script_traced(name, args, true)
    }

    /// lab/NAME ARGS; on containerd 2.3 kubelet's tracing on or off
    /// (containerd traces either way), on CRI-O none.
    fn script_traced(&self, name: &str, args: &[&str], kubelet_tracing: bool) -> Result<String> {
        let mut cmd = Command::new("bash");
        cmd.arg(self.repo.join("lab").join(name))
            .args(args)
            .env("NRI_TRACE_LAB_DIR", &self.lab)
            .env("NRI_TRACE_LAB_RUNTIME", self.runtime.lab_name())
            .env("NRI_TRACE_LAB_REQUEST_TIMEOUT", REQUEST_TIMEOUT)
            .stderr(Stdio::inherit());
        let traced = self.runtime == NodeRuntime::Containerd23;
        if traced {
            // kubelet and containerd trace to the test's collector
            // (traces.rs).
            cmd.env("NRI_TRACE_LAB_OTLP_ENDPOINT", OTLP_HTTP);
        } else {
            cmd.env_remove("NRI_TRACE_LAB_OTLP_ENDPOINT");
        }
        if traced && kubelet_tracing {
            cmd.env(
                "NRI_TRACE_LAB_KUBELET_OTLP_ENDPOINT",
                OTLP_GRPC.trim_start_matches("http://"),
            );
        } else {
            cmd.env_remove("NRI_TRACE_LAB_KUBELET_OTLP_ENDPOINT");
        }
        output(&mut cmd)
    }

    /// `cluster.sh down`; an error when it left something.
    pub(crate) fn down(&self) -> Result<()> {
        self.script("cluster.sh", &["down"]).map(drop)
    }

    /// The lab's kubectl with the cluster's admin kubeconfig.
    fn kubectl_cmd(&self) -> Command {
        let mut cmd = Command::new(self.lab.join("k8s/bin/kubectl"));
        cmd.env("KUBECONFIG", &self.kubeconfig);
        cmd
    }

    pub(crate) fn kubectl(&self, args: &[&str]) -> Result<String> {
        output(self.kubectl_cmd().args(args))
    }

    /// kubectl with `dir` (the dist's, holding `kubectl-nri_trace`)
    /// first on its PATH: `kubectl nri-trace ...` runs the plugin.
    pub(crate) fn kubectl_plugin(&self, dir: &Path, args: &[&str]) -> Result<String> {
        let path = std::env::join_paths(
            [dir.to_path_buf(), self.lab.join("k8s/bin")]
                .into_iter()
                .chain(std::env::split_paths(
                    &std::env::var_os("PATH").unwrap_or_default(),
                )),
        )?;
        output(self.kubectl_cmd().env("PATH", path).args(args))
    }

    /// `kubectl apply -f -` of `yaml`.
    pub(crate) fn apply(&self, yaml: &str) -> Result<()> {
        use std::io::Write;
        let mut child = self
            .kubectl_cmd()
            .args(["apply", "-f", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("kubectl apply")?;
        child
            .stdin
            .take()
            .context("kubectl's stdin")?
            .write_all(yaml.as_bytes())?;
        let o = child.wait_with_output()?;
        ensure!(
            o.status.success(),
            "kubectl apply: {}\n{yaml}",
            String::from_utf8_lossy(&o.stderr).trim()
        );
        Ok(())
    }

    /// The image of the dist binary (lab/mkimage.py, as `cargo xtask
    /// image` makes it) imported into the node's runtime, as
    /// deploy/README.md says: containerd's `ctr -n k8s.io images import`;
    /// on CRI-O, CRI-O's own copier into its storage (`crio.sh import`).
    pub(crate) fn import_image(&self, bin: &Path, tag: &str, out: &Path) -> Result<()> {
        let tar = out.join("nri-trace.oci.tar");
        let image = Self::image(tag);
        super::dist_bin::pack_image(bin, &image, &tar).map_err(anyhow::Error::msg)?;
        match self.runtime {
            NodeRuntime::Containerd23 => output(
                Command::new(self.lab.join("ctrd23/bin/ctr"))
                    .arg("--address")
                    .arg(self.lab.join("run/containerd.sock"))
                    .args(["-n", "k8s.io", "images", "import"])
                    .arg(&tar),
            )
            .map(drop),
            NodeRuntime::Crio => {
                let tar = tar.to_str().context("the image's path")?;
                self.script("crio.sh", &["import", tar, &image]).map(drop)
            }
        }
    }

    /// The node's name, as the API has it.
    pub(crate) fn node(&self) -> Result<String> {
        let name = self.kubectl(&["get", "nodes", "-o", "jsonpath={.items[0].metadata.name}"])?;
        Ok(name.trim().to_owned())
    }

    /// The nri-trace image's reference with `tag`.
    pub(crate) fn image(tag: &str) -> String {
        format!("{IMAGE}:{tag}")
    }

    /// The repository's root (deploy/, lab/).
    pub(crate) fn repo(&self) -> &Path {
        &self.repo
    }

    /// deploy/daemonset.yaml with the tag set, applied; its pod Ready.
    pub(crate) fn apply_daemonset(&self, tag: &str) -> Result<()> {
        let yaml = std::fs::read_to_string(self.repo.join("deploy/daemonset.yaml"))?;
        ensure!(
            yaml.contains(":VERSION"),
            "deploy/daemonset.yaml: no :VERSION tag to set"
        );
        self.apply(&yaml.replace(":VERSION", &format!(":{tag}")))?;
        self.kubectl(&[
            "rollout",
            "status",
            "-n",
            "kube-system",
            "ds/nri-trace",
            "--timeout=120s",
        ])
        .map(drop)
    }

    /// An external NRI plugin of the lab on the node's runtime.
    pub(crate) fn plugin(&self, name: &str, idx: &str, args: &[&str], out: &Path) -> Result<Child> {
        let log = std::fs::File::create(out.join(format!("plugin-{idx}-{name}.log")))?;
        let child = Command::new(workspace_bin("nri-test-plugin"))
            .args(["--name", name, "--idx", idx])
            .args(args)
            .arg("--socket")
            .arg(self.lab.join("run/nri.sock"))
            .arg("--truth")
            .arg(out.join(format!("plugin-{idx}-{name}.truth.ndjson")))
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting nri-test-plugin")?;
        // Registered once the runtime synchronized it (its truth says so).
        let truth = out.join(format!("plugin-{idx}-{name}.truth.ndjson"));
        let t0 = Instant::now();
        while !std::fs::read_to_string(&truth).is_ok_and(|t| t.contains("ynchroniz")) {
            if t0.elapsed() > Duration::from_secs(30) {
                bail!("plugin {idx}-{name} not synchronized within 30 s");
            }
            sleep(Duration::from_millis(100));
        }
        Ok(child)
    }

    /// The pod created and Running.
    pub(crate) fn create(&self, pod: &TestPod) -> Result<()> {
        self.apply(&pod.yaml())?;
        self.kubectl(&[
            "wait",
            "-n",
            &pod.namespace,
            "--for=condition=Ready",
            &format!("pod/{}", pod.name),
            "--timeout=90s",
        ])
        .map(drop)
    }

    /// `kubectl VERB pod -n NS NAME ARGS...`.
    pub(crate) fn kubectl_pod(&self, verb: &str, pod: &TestPod, args: &[&str]) -> Result<String> {
        let mut all = vec![verb, "pod", "-n", &pod.namespace, &pod.name];
        all.extend_from_slice(args);
        self.kubectl(&all)
    }

    /// `kubectl delete pod --wait=false`, then Terminating in `kubectl
    /// get pod` (a deletion timestamp).
    pub(crate) fn delete(&self, pod: &TestPod) -> Result<()> {
        self.kubectl_pod("delete", pod, &["--wait=false"])?;
        let ts = self.kubectl_pod(
            "get",
            pod,
            &["-o", "jsonpath={.metadata.deletionTimestamp}"],
        )?;
        ensure!(!ts.trim().is_empty(), "{}: no deletion timestamp", pod.name);
        Ok(())
    }

    /// Removed at once, the cause looked at: from the API (`--force`), and
    /// from the node by hand (`crictl stop --timeout 0`, `stopp`, `rmp`).
    /// kubelet would wait out the StopContainer it made with the pod's
    /// grace period, and removes the sandbox of a deleted pod only at its
    /// next garbage collection (each minute). A StopContainer in progress
    /// also holds containerd's synchronization of an NRI plugin that
    /// connects meanwhile (seen on containerd 2.3.7: a plugin registered,
    /// synchronized only when the StopContainer of a pod waiting out 600 s
    /// ended).
    ///
    /// Only for a pod kubelet is already tearing down (deleted through
    /// the API before) or is done with: a running pod's sandbox removed
    /// behind kubelet's back is made again (the CI runs of d1e2b12 and
    /// ae3f8d0: `rmp`, then kubelet's RunPodSandbox "attempt:1" a quarter
    /// of a second later, even with the pod already gone from kubelet's
    /// `/pods`; that sandbox was left to the next garbage collection and
    /// explain rightly said `waiting`).
    pub(crate) fn remove(&self, pod: &TestPod) -> Result<()> {
        // "" when the API has no such pod, "NAME," when it is not being
        // deleted.
        let state = self.kubectl_pod(
            "get",
            pod,
            &[
                "-o",
                "jsonpath={.metadata.name},{.metadata.deletionTimestamp}",
                "--ignore-not-found",
            ],
        )?;
        ensure!(
            !state.trim().ends_with(','),
            "{}: not deleted through the API first: kubelet would make its sandbox again",
            pod.name
        );
        self.kubectl_pod(
            "delete",
            pod,
            // A pod whose teardown went through is gone already.
            &[
                "--grace-period=0",
                "--force",
                "--wait=false",
                "--ignore-not-found",
            ],
        )?;
        for id in self.sandboxes(pod)? {
            self.tear_down(pod, &id)?;
        }
        self.wait_gone(pod, Duration::from_mins(1))
    }

    /// The sandbox's containers stopped at once, the sandbox stopped and
    /// removed (crictl), again while a step fails and the sandbox is
    /// there, for at most 30 s. kubelet, done with the pod, still tears
    /// down what it began and garbage-collects, and the loser of each race
    /// fails: the second CNI DEL of a StopPodSandbox ("failed to delete
    /// \"eth0\": no such device", ci38), a RemovePodSandbox meeting
    /// kubelet's RemoveContainer ("container is already in removing
    /// state", 2026-11-30 under CPU load). The next try finds the work done.
    fn tear_down(&self, pod: &TestPod, sandbox: &str) -> Result<()> {
        let once = || -> Result<()> {
            for c in self.crictl(&["ps", "-a", "-q", "--pod", sandbox])?.lines() {
                self.crictl(&["stop", "--timeout", "0", c.trim()])?;
            }
            self.crictl(&["stopp", sandbox])?;
            self.crictl(&["rmp", sandbox]).map(drop)
        };
        let t0 = Instant::now();
        loop {
            let Err(e) = once() else { return Ok(()) };
            if !self.sandboxes(pod)?.iter().any(|s| s == sandbox) {
                return Ok(());
            }
            ensure!(
                t0.elapsed() < Duration::from_secs(30),
                "{}: removing sandbox {sandbox}: {e:#}",
                pod.name
            );
            eprintln!(
                "{}: removing sandbox {sandbox}: {e:#}; again in 1 s",
                pod.name
            );
            sleep(Duration::from_secs(1));
        }
    }

    /// The runtime's sandboxes of the pod (`crictl pods`).
    fn sandboxes(&self, pod: &TestPod) -> Result<Vec<String>> {
        Ok(self
            .crictl(&[
                "pods",
                "-q",
                "--name",
                &pod.name,
                "--namespace",
                &pod.namespace,
            ])?
            .lines()
            .map(|l| l.trim().to_owned())
            .filter(|l| !l.is_empty())
            .collect())
    }

    /// Until the API no longer has the pod and the runtime no sandbox of
    /// it.
    pub(crate) fn wait_gone(&self, pod: &TestPod, max: Duration) -> Result<()> {
        let t0 = Instant::now();
        loop {
            let on_node = self.sandboxes(pod)?;
            if !on_node.is_empty() {
                if t0.elapsed() > max {
                    bail!(
                        "{}: the runtime still has {on_node:?} after {max:?}",
                        pod.name
                    );
                }
                sleep(Duration::from_millis(500));
                continue;
            }
            let left = self.kubectl(&[
                "get",
                "pods",
                "-n",
                &pod.namespace,
                "--field-selector",
                &format!("metadata.name={}", pod.name),
                "-o",
                "name",
            ])?;
            if left.trim().is_empty() {
                return Ok(());
            }
            if t0.elapsed() > max {
                bail!("{} still in the API after {max:?}", pod.name);
            }
            sleep(Duration::from_millis(500));
        }
    }

    /// crictl (lab/crictl.sh) on the node's runtime.
    pub(crate) fn crictl(&self, args: &[&str]) -> Result<String> {
        let bin = self.script("crictl.sh", &["path"])?;
        output(
            Command::new(bin.trim())
                // crictl gives each call 2 s by default: a StopPodSandbox
                // under CPU load took longer (`stopp` failed, 2026-11-30).
                .args(["--timeout", "60s"])
                .arg("--runtime-endpoint")
                .arg(format!(
                    "unix://{}",
                    self.lab.join(self.runtime.cri_socket()).display()
                ))
                .args(args),
        )
    }

    /// kubelet stopped (SIGTERM; lab/cluster.sh's pid file), its exit
    /// waited for.
    pub(crate) fn stop_kubelet(&self) -> Result<()> {
        let pid = self.kubelet_pid()?;
        // SAFETY: a plain kill(2).
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let t0 = Instant::now();
        // Gone, or a zombie nobody reaped yet.
        let alive = || {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
                s.rsplit_once(") ")
                    .is_some_and(|(_, r)| !r.starts_with('Z'))
            })
        };
        while alive() {
            ensure!(
                t0.elapsed() < Duration::from_secs(20),
                "kubelet (pid {pid}) did not exit on SIGTERM"
            );
            sleep(Duration::from_millis(100));
        }
        Ok(())
    }

    /// kubelet's pid (lab/cluster.sh's pid file).
    pub(crate) fn kubelet_pid(&self) -> Result<i32> {
        let pidfile = self.lab.join("cluster/run/kubelet.pid");
        Ok(std::fs::read_to_string(&pidfile)
            .with_context(|| format!("reading {}", pidfile.display()))?
            .trim()
            .parse()?)
    }

    /// `cluster.sh up` again: it starts what does not run (kubelet), its
    /// configuration written again with its tracing on or off.
    pub(crate) fn start_kubelet(&self, tracing: bool) -> Result<()> {
        self.script_traced("cluster.sh", &["up"], tracing).map(drop)
    }

    /// The lab's directory.
    pub(crate) fn lab_dir(&self) -> &Path {
        &self.lab
    }

    /// kubelet's root directory (lab/cluster.sh `KUBELET_ROOT`).
    pub(crate) fn kubelet_root(&self) -> PathBuf {
        self.lab.join("cluster/state/kubelet")
    }

    /// The pod's uid, as the API has it.
    pub(crate) fn uid(&self, pod: &TestPod) -> Result<String> {
        let uid = self.kubectl_pod("get", pod, &["-o", "jsonpath={.metadata.uid}"])?;
        ensure!(!uid.trim().is_empty(), "{}: no uid", pod.name);
        Ok(uid.trim().to_owned())
    }

    /// The last lines of each component's log, for a failure.
    pub(crate) fn logs_tail(&self) -> String {
        let mut s = String::new();
        let runtime_log = match self.runtime {
            NodeRuntime::Containerd23 => "containerd.log",
            NodeRuntime::Crio => "crio/crio.log",
        };
        for path in [
            self.lab.join("cluster/logs/kubelet.log"),
            self.lab.join(runtime_log),
        ] {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            s.push_str(&format!("---- {} (last 30 lines)\n", path.display()));
            for l in &lines[lines.len().saturating_sub(30)..] {
                s.push_str(l);
                s.push('\n');
            }
        }
        s
    }
}
