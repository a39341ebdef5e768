//! nri-trace on the lab's one-node Kubernetes cluster (lab/cluster.sh,
//! docs/cluster.md; issue 32): kubelet and its API server on containerd
//! 2.3, the image of the dist binary imported into the node's runtime,
//! deploy/daemonset.yaml applied with kubectl as a user applies it, and
//! pods deleted through the API that stay Terminating for a reason
//! `nri-trace explain` in the DaemonSet's pod must name. Then the cluster
//! once more on CRI-O, for the cause whose CRI answer differs there
//! (crio.rs).
//!
//! One cluster per runtime: `cluster up` costs about 20 s, and each cause
//! below is a pod of its own on it. `cluster down` at the end must leave
//! nothing (its own leftover check).
//!
//! Needs root, the dist binary (`cargo xtask dist`; NRI_TRACE_DIST_BIN in
//! `cargo xtask test`), Kubernetes built by lab/k8s.sh (the lab's peers
//! build it) and the lab; mandatory under CI=true.

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    thread::sleep,
    time::{Duration, Instant},
};

use anyhow::{bail, ensure, Context, Result};
use nri_trace_lab::scenario::FuseHang;
use nri_trace_tests::workspace_bin;
use serde_json::Value;

mod cluster;
mod crio;
mod debug_node;
#[path = "../dist_bin/mod.rs"]
mod dist_bin;
mod late_attach;
#[path = "../otel_collector/mod.rs"]
mod otel_collector;
mod pods;
mod prometheus;
#[path = "../prometheus_api/mod.rs"]
mod prometheus_api;
mod traces;

use cluster::{Cluster, NodeRuntime};
use pods::TestPod;

/// Where deploy/daemonset.yaml's recorder keeps its files on the node.
const HOST_RECORDER: &str = "/var/lib/nri-trace";

/// The DaemonSet's flight recorder writes to the host (its hostPath):
/// gone again when this is dropped if the test made it (it was not there
/// before), so that no later explain on this machine reads it. Dropped
/// after the cluster is down (the recorder's pod gone).
struct HostRecorder {
    made: bool,
}

impl HostRecorder {
    fn claim() -> Self {
        HostRecorder {
            made: !Path::new(HOST_RECORDER).exists(),
        }
    }
}

impl Drop for HostRecorder {
    fn drop(&mut self) {
        if self.made {
            let _ = std::fs::remove_dir_all(HOST_RECORDER);
        }
    }
}

/// The DaemonSet's pod is up and its recorder has seen kubelet's calls;
/// each cause's pod, deleted, stays Terminating, and explain in the
/// DaemonSet's pod names why; `kubectl nri-trace explain` from outside
/// the node gives the same answer.
#[test]
fn cluster_daemonset_explains_terminating_pods() {
    let Some(bin) = dist_bin::guard("cluster_lab", &["nri-test-plugin", "fuse-hang"]) else {
        return;
    };
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cluster");
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out).unwrap();
    let recorder = HostRecorder::claim();
    // kubelet's and containerd's spans, and nri-trace's (traces.rs).
    let spans = out.join("spans.json");
    let _ports = otel_collector::ports();
    let collector = otel_collector::Collector::start(&out, &spans);
    let cluster = Cluster::up(&out, NodeRuntime::Containerd23).expect("cluster up");
    let result = run_all(&cluster, &bin, &out, &spans);
    let down = cluster.down();
    drop(collector);
    drop(recorder);
    if let Err(e) = &result {
        eprintln!("{}", cluster.logs_tail());
        panic!("{e:#}");
    }
    down.expect("cluster down leaves nothing");
}

/// The cluster on CRI-O, kubelet's StopPodSandbox failing with an NRI
/// plugin's error (crio.rs); explained by the DaemonSet's pod and by
/// explain attaching live, as on a node without the DaemonSet. One
/// cluster at a time: the lab's lock orders this test
/// and the one above.
#[test]
fn cluster_on_crio_explains_a_failing_stop_hook() {
    let Some(bin) = dist_bin::guard("cluster_lab", &["nri-test-plugin"]) else {
        return;
    };
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("cluster-crio");
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out).unwrap();
    let recorder = HostRecorder::claim();
    let cluster = Cluster::up(&out, NodeRuntime::Crio).expect("cluster up on CRI-O");
    let result = crio::failing_stop_hook(&cluster, &bin, &out);
    let down = cluster.down();
    drop(recorder);
    if let Err(e) = &result {
        eprintln!("{}", cluster.logs_tail());
        panic!("{e:#}");
    }
    down.expect("cluster down leaves nothing");
}

fn run_all(c: &Cluster, bin: &Path, out: &Path, spans: &Path) -> Result<()> {
    let mut t = Timings::new(out);
    let tag = dist_bin::commit_in_name(bin);
    c.import_image(bin, &tag, out)?;
    c.apply_daemonset(&tag)?;
    t.lap("image imported, DaemonSet Ready")?;
    debug_node::debug_node_recipe(c, &tag, out)?;
    t.lap("kubectl debug node recipe")?;
    prometheus::prometheus_scrapes_the_pod(c, out)?;
    t.lap("Prometheus scrapes the DaemonSet's pod")?;
    traces::traces_join_kubelet(c, bin, out, spans)?;
    t.lap("traces: kubelet, containerd and nri-trace joined")?;
    traces::untraced_kubelet(c, bin, out, spans)?;
    t.lap("traces: kubelet's tracing off, one trace per lifecycle")?;
    let held = finalizer_start(c)?;
    t.lap("finalizer: pod deleted")?;
    grace_period(c, bin)?;
    t.lap("grace period")?;
    hung_stop_hook(c, out)?;
    t.lap("hung StopPodSandbox hook")?;
    failing_stop_hook(c, out)?;
    t.lap("failing StopPodSandbox hook")?;
    volume_busy(c)?;
    t.lap("volume busy")?;
    host_path_held(c)?;
    t.lap("hostPath held")?;
    alive_after_sigkill(c, out)?;
    t.lap("alive after SIGKILL")?;
    finalizer_check(c, &held)?;
    t.lap("finalizer: checked")?;
    // kubelet restarted by the untraced step: minutes old by now.
    late_attach::late_attach(c, bin, out, spans)?;
    t.lap("late attach to kubelet with 30 pods")?;
    kubelet_stopped(c)?;
    t.lap("kubelet stopped")
}

/// How long each part took, in `timings.txt` of the test's directory and
/// on stderr (the suite's budget, docs/cluster.md).
struct Timings {
    file: PathBuf,
    t0: Instant,
}

impl Timings {
    fn new(out: &Path) -> Self {
        Timings {
            file: out.join("timings.txt"),
            t0: Instant::now(),
        }
    }

    fn lap(&mut self, what: &str) -> Result<()> {
        use std::io::Write;
        let line = format!("{:6.1} s  {what}", self.t0.elapsed().as_secs_f64());
        eprintln!("cluster test: {line}");
        self.t0 = Instant::now();
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.file)?;
        writeln!(f, "{line}")?;
        Ok(())
    }
}

/// kubelet stopped while the pod waits out its grace period: its
/// connection closes, nobody asks the runtime to stop the pod. With
/// kubelet gone `kubectl exec` cannot reach the pod, so explain runs in
/// the DaemonSet's container through the runtime (crictl exec, as an SRE
/// on the node would). Then kubelet is started again and the pod removed.
fn kubelet_stopped(c: &Cluster) -> Result<()> {
    let pod = TestPod::new("orphan", "trap '' TERM; while :; do sleep 1; done").grace(600);
    c.create(&pod)?;
    c.delete(&pod)?;
    sleep(Duration::from_secs(3));
    let container = c.crictl(&["ps", "--name", "nri-trace", "-q"])?;
    let container = container
        .lines()
        .next()
        .context("no nri-trace container")?
        .to_owned();
    c.stop_kubelet()?;
    let result = (|| {
        let text = c.crictl(&[
            "exec",
            &container,
            "nri-trace",
            "explain",
            &format!("{}/{}", pod.namespace, pod.name),
            "-o",
            "json",
        ])?;
        eprintln!(
            "explain {}/{} with kubelet stopped:\n{text}",
            pod.namespace, pod.name
        );
        let lines = json_output(&text)?;
        let e = explanation(&lines)?;
        ensure!(e["verdict"] == "blocked", "{e}");
        ensure!(e["blocker"]["kind"] == "client_gone", "{e}");
        ensure!(
            e["blocker"]["client"]
                .as_str()
                .is_some_and(|c| c.starts_with("kubelet[")),
            "{e}"
        );
        Ok(())
    })();
    c.start_kubelet(true)?;
    result?;
    c.remove(&pod)
}

/// A host process with its cwd in the pod's emptyDir (medium Memory: a
/// tmpfs kubelet mounts and must unmount): kubelet's unmount fails with
/// EBUSY and it retries; the pod stays Terminating. explain names the
/// failed unmount of the volume's path and, on the node, who holds it.
fn volume_busy(c: &Cluster) -> Result<()> {
    let pod = TestPod::new("volume", "sleep 3600")
        .grace(1)
        .memory_volume("data");
    c.create(&pod)?;
    let uid = c.uid(&pod)?;
    let path = c
        .kubelet_root()
        .join(format!("pods/{uid}/volumes/kubernetes.io~empty-dir/data"));
    let mut holder = hold_cwd(&path)?;
    c.delete(&pod)?;
    let e = wait_explained(c, &pod, |e| e["blocker"]["kind"] == "unmount_failed");
    let _ = holder.kill();
    let _ = holder.wait();
    let e = e?;
    let b = &e["blocker"];
    ensure!(e["verdict"] == "blocked", "{e}");
    ensure!(b["errno"] == libc::EBUSY, "{e}");
    ensure!(
        b["path"].as_str() == path.to_str(),
        "the unmount of {}: {e}",
        path.display()
    );
    c.remove(&pod)
}

/// A hostPath volume whose host directory a host process holds (its
/// cwd), as the emptyDir of [`volume_busy`] is held: kubelet has nothing
/// to unmount there (the host-path plugin's TearDown returns nil:
/// k8s.io/kubernetes v1.37.2 pkg/volume/hostpath/host_path.go), and the
/// runtime's bind mount of it went with the container's mount namespace.
/// So the pod's teardown goes through, the API lets go of it with the
/// holder still there, and explain blames nothing; a holder is a cause
/// only for a volume kubelet mounted itself (emptyDir of medium Memory,
/// secrets, projected tokens, CSI).
fn host_path_held(c: &Cluster) -> Result<()> {
    let dir = c.lab_dir().join("host-path-held");
    std::fs::create_dir_all(&dir)?;
    let pod = TestPod::new("hostpath", "sleep 3600")
        .grace(1)
        .host_path("data", &dir, "/data");
    c.create(&pod)?;
    let mut holder = hold_cwd(&dir)?;
    let result = (|| {
        c.delete(&pod)?;
        c.kubectl_pod("wait", &pod, &["--for=delete", "--timeout=90s"])?;
        let e = explain(c, &pod)?;
        let e = explanation(&e)?;
        ensure!(e["verdict"] != "blocked", "{e}");
        ensure!(e["blocker"].is_null(), "{e}");
        ensure!(
            holder.try_wait()?.is_none(),
            "the holder of {} exited",
            dir.display()
        );
        eprintln!(
            "hostPath held by pid {}: the pod left the API; explain: {}",
            holder.id(),
            e["sentence"]
        );
        Ok(())
    })();
    let _ = holder.kill();
    let _ = holder.wait();
    result?;
    c.remove(&pod)?;
    std::fs::remove_dir(&dir).with_context(|| format!("removing {}", dir.display()))
}

/// A container process in a FUSE read the server never answers (state D;
/// the lab's fuse-hang, through a hostPath volume): SIGKILL stays pending,
/// the process does not exit and StopContainer does not return. explain
/// names the process alive after SIGKILL.
fn alive_after_sigkill(c: &Cluster, out: &Path) -> Result<()> {
    let mnt = c.lab_dir().join("fuse-hang-cluster");
    std::fs::create_dir_all(&mnt)?;
    let mut fuse = FuseHang::start(&workspace_bin("fuse-hang"), &mnt, out)?;
    let pod = TestPod::new("sigkill", "cat /hang/hang; sleep 3600")
        .grace(1)
        .host_path("hang", &mnt, "/hang");
    let result = (|| {
        c.create(&pod)?;
        let reader = fuse.held_reader(Duration::from_secs(30))?;
        c.delete(&pod)?;
        let e = wait_explained(c, &pod, |e| e["blocker"]["kind"] == "alive_after_kill")?;
        ensure!(e["verdict"] == "blocked", "{e}");
        ensure!(e["blocker"]["pid"] == reader, "reader pid {reader}: {e}");
        Ok(())
    })();
    // The reader dies of its pending SIGKILL once the server is gone.
    let _ = fuse.stop();
    result?;
    c.remove(&pod)
}

/// A `sleep` whose cwd is `dir`, killed with this process.
fn hold_cwd(dir: &Path) -> Result<Child> {
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new("sleep");
    cmd.arg("3600").current_dir(dir).stdin(Stdio::null());
    // SAFETY: prctl is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    cmd.spawn()
        .with_context(|| format!("a holder in {}", dir.display()))
}

/// `nri-trace explain NS/NAME -o json` in the DaemonSet's pod: its lines.
fn explain(c: &Cluster, pod: &TestPod) -> Result<Vec<Value>> {
    let text = c.kubectl(&[
        "exec",
        "-n",
        "kube-system",
        "ds/nri-trace",
        "--",
        "nri-trace",
        "explain",
        &format!("{}/{}", pod.namespace, pod.name),
        "--wait",
        "20",
        "-o",
        "json",
    ])?;
    eprintln!("explain {}/{}:\n{text}", pod.namespace, pod.name);
    json_output(&text)
}

/// The lines of an output that holds JSON lines only (an `-o json`
/// stdout): every non-empty line must be one.
fn json_output(text: &str) -> Result<Vec<Value>> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).with_context(|| format!("not a JSON line: {l:?}")))
        .collect()
}

/// The JSON lines among other lines (a pod's log holds nri-trace's
/// stderr too).
fn json_lines_among(text: &str) -> Result<Vec<Value>> {
    text.lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).with_context(|| format!("a bad JSON line: {l:?}")))
        .collect()
}

/// The explanation line of explain's output.
fn explanation(lines: &[Value]) -> Result<&Value> {
    lines
        .iter()
        .find(|v| v["type"] == "explanation")
        .context("no explanation line")
}

/// A container that ignores SIGTERM with a 600 s grace period: kubelet's
/// StopContainer carries the grace period as its timeout and waits it
/// out. Not stuck: explain says the pod waits out its grace period and
/// how long is left.
///
/// The same from outside the node, as a user runs it: `kubectl nri-trace
/// explain POD -n NS` (the dist's kubectl plugin on the PATH beside the
/// lab's kubectl) finds the pod's node and the nri-trace pod there.
fn grace_period(c: &Cluster, bin: &Path) -> Result<()> {
    let pod = TestPod::new("grace", "trap '' TERM; while :; do sleep 1; done").grace(600);
    c.create(&pod)?;
    c.delete(&pod)?;
    // kubelet sends SIGTERM, then waits.
    sleep(Duration::from_secs(3));
    let lines = explain(c, &pod)?;
    let e = explanation(&lines)?;
    let plugin = c.kubectl_plugin(
        bin.parent().context("the dist directory")?,
        &[
            "nri-trace",
            "explain",
            &pod.name,
            "-n",
            &pod.namespace,
            "--",
            "-o",
            "json",
        ],
    )?;
    eprintln!("kubectl nri-trace explain {}:\n{plugin}", pod.name);
    let outside = json_lines_among(&plugin)?;
    let o = explanation(&outside)?;
    ensure!(
        (&o["verdict"], &o["progress"]["kind"]) == (&e["verdict"], &e["progress"]["kind"]),
        "kubectl nri-trace said {o}, in the pod {e}"
    );
    ensure!(e["verdict"] == "waiting", "{e}");
    let progress = &e["progress"];
    ensure!(progress["kind"] == "call_pending", "{e}");
    ensure!(progress["method"] == "StopContainer", "{e}");
    // kubelet passes what is left of the pod's grace period.
    let grace = progress["grace_period_ns"]
        .as_u64()
        .context("no grace period")?;
    ensure!(
        (590_000_000_000..=600_000_000_000).contains(&grace),
        "a grace period of about 600 s: {e}"
    );
    let left = progress["grace_left_ns"].as_u64().context("no time left")?;
    ensure!(left > 500_000_000_000 && left < grace, "{e}");
    c.remove(&pod)
}

/// An NRI plugin whose StopPodSandbox hook does not answer. The lab's
/// containerd here has a 60 s plugin request timeout (containerd's
/// default is 2 s, after which it closes the plugin): explain names the
/// plugin and the hook it waits for.
fn hung_stop_hook(c: &Cluster, out: &Path) -> Result<()> {
    let pod = TestPod::new("hook", "sleep 3600").grace(1);
    c.create(&pod)?;
    with_plugin(c, "hang", &["--on", "STOP_POD_SANDBOX=hang"], out, || {
        c.delete(&pod)?;
        let e = wait_explained(c, &pod, |e| e["blocker"]["kind"] == "hook_pending")?;
        let b = &e["blocker"];
        ensure!(b["plugin"] == "10-hang", "{e}");
        ensure!(b["event"] == "STOP_POD_SANDBOX", "{e}");
        ensure!(e["verdict"] == "blocked", "{e}");
        Ok(())
    })?;
    c.remove(&pod)
}

/// An NRI plugin that fails StopPodSandbox: containerd logs the error and
/// goes on (internal/cri/server/sandbox_stop.go: "NRI sandbox stop
/// notification failed"), so kubelet's StopPodSandbox succeeds; explain
/// names the failed hook under the call that still succeeded.
fn failing_stop_hook(c: &Cluster, out: &Path) -> Result<()> {
    let pod = TestPod::new("refused", "sleep 3600").grace(1);
    c.create(&pod)?;
    let args = ["--on", "STOP_POD_SANDBOX=error:teardown refused"];
    with_plugin(c, "refuse", &args, out, || {
        c.delete(&pod)?;
        let e = wait_explained(c, &pod, |e| e["progress"]["kind"] == "hook_failed")?;
        let step = refused_stop(&e)?;
        ensure!(step["outcome"]["kind"] == "ok", "the runtime went on: {e}");
        Ok(())
    })?;
    c.remove(&pod)
}

/// The StopPodSandbox step of explanation `e` whose hook failed: plugin
/// 10-refuse's, "teardown refused" (the refuse plugin of
/// [`failing_stop_hook`] and crio.rs).
fn refused_stop(e: &Value) -> Result<&Value> {
    ensure!(e["progress"]["kind"] == "hook_failed", "{e}");
    let step = &e["steps"][e["progress"]["step"].as_u64().context("its step")? as usize];
    ensure!(step["method"] == "StopPodSandbox", "{e}");
    let hook = &step["hooks"][e["progress"]["hook"].as_u64().context("its hook")? as usize];
    ensure!(hook["plugin"] == "10-refuse", "{e}");
    ensure!(
        hook["outcome"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("teardown refused")),
        "{e}"
    );
    Ok(step)
}

/// `nri-trace ARGS` on the node, its stdout and stderr to files, once it
/// says it is ready (killed if it does not within 30 s).
fn start_ready(bin: &Path, args: &[&str], stdout: &Path, stderr: &Path) -> Result<Child> {
    let mut child = Command::new(bin)
        .args(args)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(stdout)?)
        .stderr(std::fs::File::create(stderr)?)
        .spawn()
        .context("starting nri-trace")?;
    if let Err(e) = nri_trace_tests::wait_for_lines(
        &mut child,
        stderr,
        &["nri-trace: ready"],
        Duration::from_secs(30),
        "nri-trace",
    ) {
        let _ = child.kill();
        let _ = child.wait();
        return Err(e.into());
    }
    Ok(child)
}

/// `f` with the lab's NRI test plugin NAME (index 10, `args`) connected to
/// the node's runtime; the plugin is killed after, whatever `f` gave.
fn with_plugin(
    c: &Cluster,
    name: &str,
    args: &[&str],
    out: &Path,
    f: impl FnOnce() -> Result<()>,
) -> Result<()> {
    let mut plugin = c.plugin(name, "10", args, out)?;
    let result = f();
    let _ = plugin.kill();
    let _ = plugin.wait();
    result
}

/// A finalizer on the pod: the node has finished with it (containers
/// gone, sandbox removed) and what holds it is not on this node.
///
/// kubelet removes the sandbox of a pod the API still holds only at its
/// next garbage collection (every minute: k8s.io/kubernetes
/// pkg/kubelet/kubelet.go `ContainerGCPeriod`), so the pod is deleted
/// first ([`finalizer_start`]) and looked at after the other causes.
fn finalizer_start(c: &Cluster) -> Result<TestPod> {
    let pod = TestPod::new("final", "sleep 3600")
        .grace(1)
        .finalizer("nri-trace.test/hold");
    c.create(&pod)?;
    c.delete(&pod)?;
    Ok(pod)
}

fn finalizer_check(c: &Cluster, pod: &TestPod) -> Result<()> {
    // Gone from the runtime, and nothing of it left on the node (kubelet
    // removes the pod cgroup and the volumes' directories after the
    // sandbox): the sentence says that what holds it is elsewhere.
    let e = wait_explained(c, pod, |e| {
        e["verdict"] == "gone"
            && e["sentence"]
                .as_str()
                .is_some_and(|s| s.contains("nothing of it is left on this node"))
    })?;
    ensure!(
        e["sentence"]
            .as_str()
            .is_some_and(|s| s.contains("what holds it is not on this node")),
        "{e}"
    );
    ensure!(
        c.kubectl_pod("get", pod, &["-o", "name"]).is_ok(),
        "the pod is gone from the API: {e}"
    );
    c.kubectl_pod(
        "patch",
        pod,
        &[
            "--type=json",
            "-p",
            r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
        ],
    )?;
    c.wait_gone(pod, Duration::from_secs(30))
}

/// explain, again until `pred` holds of its explanation (kubelet's
/// teardown takes a few seconds to reach the step), at most 90 s.
fn wait_explained(c: &Cluster, pod: &TestPod, pred: impl Fn(&Value) -> bool) -> Result<Value> {
    let t0 = Instant::now();
    loop {
        let lines = explain(c, pod)?;
        let e = explanation(&lines)?.clone();
        if pred(&e) {
            return Ok(e);
        }
        if t0.elapsed() > Duration::from_secs(90) {
            bail!(
                "{}/{}: explain never said what was expected: {e}",
                pod.namespace,
                pod.name
            );
        }
        sleep(Duration::from_secs(2));
    }
}

/// Runs `cmd`, its stdout, or an error with its stderr.
fn output(cmd: &mut Command) -> Result<String> {
    let o = cmd
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {cmd:?}"))?;
    ensure!(
        o.status.success(),
        "{cmd:?}: {}: {}",
        o.status,
        String::from_utf8_lossy(&o.stderr).trim()
    );
    Ok(String::from_utf8_lossy(&o.stdout).into_owned())
}
