//! The `crictl` scenario: an SRE's crictl beside a kubelet-like client.
//!
//! crictl (`sigs.k8s.io/cri-tools/cmd/crictl`, built by lab/crictl.sh from
//! its Go module) is what an SRE runs on a node during an incident: it
//! lists and inspects pods and containers and stops and removes pods
//! behind kubelet's back. While the driver runs pod lifecycles of its own,
//! crictl runs `pods`, `inspectp`, `ps`, `stopp` and `rmp -f` on two pods
//! the driver made (`sre-0`, `sre-1`), each invocation one
//! [`Truth::Tool`] record: its pid (every CRI call it made is that pid's),
//! the cgroup it ran in, its exit code and output. So a trace can be
//! checked for naming every crictl call and attributing it to crictl, and
//! the driver's calls to the driver.
//!
//! crictl runs in a cgroup of its own, `nri-trace-lab-crictl.scope` at the
//! root of the cgroup v2 hierarchy (named like the `session-N.scope` a
//! login shell's commands run in under systemd, systemd.scope(5)), so the
//! client's unit is there to be traced; without a cgroup v2 mount it runs
//! where the scenario runs and the truth names no cgroup.

use std::{
    io::Read,
    os::unix::process::CommandExt,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    thread::sleep,
    time::Duration,
};

use anyhow::{bail, ensure, Context, Result};

use crate::{
    scenario::{sandbox_id_of, wait_child, PluginSpec, Run},
    truth::{self, PodRef, Truth, TruthWriter},
};

/// The cgroup crictl runs in, below the cgroup v2 mount.
pub const CRICTL_CGROUP: &str = "nri-trace-lab-crictl.scope";

/// The pods crictl acts on (made by the driver, namespace `nri-trace`).
pub const SRE_PODS: [&str; 2] = ["sre-0", "sre-1"];

/// Most bytes of a tool's standard output kept in the truth.
const MAX_STDOUT: u64 = 4096;

/// lab/crictl.sh install (idempotent: builds crictl the first time, about
/// 3 min; 0.1 s after): crictl's path.
pub fn crictl_path() -> Result<PathBuf> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("crictl.sh");
    let out = Command::new("bash")
        .arg(&script)
        .arg("install")
        .output()
        .with_context(|| format!("running {} install", script.display()))?;
    ensure!(
        out.status.success(),
        "{} install failed ({}): {}",
        script.display(),
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let path = stdout.lines().last().unwrap_or("").trim();
    ensure!(!path.is_empty(), "crictl.sh install printed no path");
    Ok(PathBuf::from(path))
}

/// Where the cgroup v2 hierarchy is mounted (`/sys/fs/cgroup` on a unified
/// node, `/sys/fs/cgroup/unified` on a hybrid one), if it is.
fn cgroup2_mount() -> Option<PathBuf> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").ok()?;
    mounts.lines().find_map(|l| {
        let mut f = l.split_whitespace();
        let (_, dir, fs) = (f.next()?, f.next()?, f.next()?);
        (fs == "cgroup2").then(|| PathBuf::from(dir))
    })
}

/// crictl's cgroup, made for the scenario and removed after it.
struct ToolCgroup {
    dir: PathBuf,
}

impl ToolCgroup {
    fn make() -> Result<Option<Self>> {
        let Some(root) = cgroup2_mount() else {
            return Ok(None);
        };
        let dir = root.join(CRICTL_CGROUP);
        match std::fs::create_dir(&dir) {
            Ok(()) => {}
            // Left by a killed run: empty (crictl exits), so reusable.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e).with_context(|| format!("mkdir {}", dir.display())),
        }
        Ok(Some(Self { dir }))
    }
}

impl Drop for ToolCgroup {
    fn drop(&mut self) {
        // Empty once every crictl has been reaped; rmdir of a cgroup
        // directory removes it (cgroup-v2.rst, "Creating and Removing").
        if let Err(e) = std::fs::remove_dir(&self.dir) {
            eprintln!("lab: rmdir {}: {e}", self.dir.display());
        }
    }
}

/// One crictl invocation against the lab's runtime, as the truth records
/// it: `args` after the endpoint options, `pod` the pod they name.
fn crictl(
    r: &Run,
    bin: &Path,
    cgroup: Option<&ToolCgroup>,
    args: &[&str],
    pod: Option<&PodRef>,
) -> Result<String> {
    let endpoint = format!("unix://{}", r.lab.cri_socket().display());
    let mut cmd = Command::new(bin);
    // 10 s per call (crictl's default is 2 s): a stop under a loaded CI
    // machine is not what this scenario is about.
    cmd.args([
        "--runtime-endpoint",
        &endpoint,
        "--image-endpoint",
        &endpoint,
    ])
    .args(["--timeout", "10s"])
    .args(args)
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    if let Some(cg) = cgroup {
        use std::os::unix::ffi::OsStrExt;
        let procs = std::ffi::CString::new(cg.dir.join("cgroup.procs").as_os_str().as_bytes())?;
        // SAFETY: between fork and exec only async-signal-safe calls (open,
        // write, close) on memory allocated before the fork. Writing "0"
        // moves the writer itself (cgroup_procs_write, kernel/cgroup/cgroup.c):
        // crictl starts inside the cgroup, before any connection.
        unsafe {
            cmd.pre_exec(move || {
                let fd = libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd < 0 || libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                    return Err(std::io::Error::last_os_error());
                }
                libc::close(fd);
                Ok(())
            });
        }
    }
    let start_mono_ns = truth::mono_ns();
    let mut child = cmd
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))?;
    let pid = child.id();
    let mut stdout = Vec::new();
    child
        .stdout
        .take()
        .expect("piped")
        .take(MAX_STDOUT)
        .read_to_end(&mut stdout)?;
    let out = child.wait_with_output()?;
    let end_mono_ns = truth::mono_ns();
    let stdout = String::from_utf8_lossy(&stdout).into_owned();
    TruthWriter::append(&r.truth)?.write(&Truth::Tool {
        tool: "crictl".into(),
        args: args.iter().map(ToString::to_string).collect(),
        pid,
        cgroup: cgroup.map(|_| format!("/{CRICTL_CGROUP}")),
        pod: pod.cloned(),
        start_mono_ns,
        end_mono_ns,
        exit_code: out.status.code(),
        stdout: stdout.clone(),
    })?;
    ensure!(
        out.status.success(),
        "crictl {} failed ({}): {}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(stdout)
}

/// The pod `cri-driver up` made, from its JSON line.
fn pod_of_up(out: &str) -> Result<PodRef> {
    let v: serde_json::Value = out
        .lines()
        .find_map(|l| serde_json::from_str(l).ok())
        .with_context(|| format!("no JSON in cri-driver up's output: {out}"))?;
    let p = &v["pod"];
    let s = |k: &str| {
        p[k].as_str()
            .map(String::from)
            .with_context(|| format!("no pod.{k} in {v}"))
    };
    Ok(PodRef {
        name: s("name")?,
        namespace: s("namespace")?,
        uid: s("uid")?,
        attempt: p["attempt"]
            .as_u64()
            .and_then(|a| u32::try_from(a).ok())
            .unwrap_or(0),
        sandbox_id: Some(sandbox_id_of(out)?),
    })
}

/// The scenario (the lab not up yet; see the module doc).
pub(crate) fn drive(r: &mut Run) -> Result<()> {
    let bin = crictl_path()?;
    r.up("2s")?;
    r.external(&PluginSpec {
        name: "alpha",
        idx: "10",
        args: &[],
    })?;
    let pods = SRE_PODS
        .iter()
        .map(|name| pod_of_up(&r.driver(&["up", "--name", name])?))
        .collect::<Result<Vec<_>>>()?;
    let id = |i: usize| pods[i].sandbox_id.clone().expect("up names its sandbox");
    // The driver's own pods meanwhile, one after the other, each running
    // 1 s: about 4 s of lifecycles that crictl's calls fall among.
    let mut lifecycles = r.driver_spawn(&[
        "lifecycle",
        "--pods",
        "3",
        "--containers",
        "1",
        "--run-secs",
        "1",
        "--prefix",
        "drv",
        "--concurrency",
        "1",
    ])?;
    let cgroup = ToolCgroup::make()?;
    let cg = cgroup.as_ref();
    let steps: [(&[&str], Option<usize>); 6] = [
        (&["pods"], None),
        (&["inspectp", &id(0)], Some(0)),
        (&["ps"], None),
        (&["stopp", &id(0)], Some(0)),
        // sre-0 is stopped: rmp only removes it; sre-1 is ready: -f stops
        // it first (cmd/crictl/sandbox.go, removePodCommand).
        (&["rmp", "-f", &id(0)], Some(0)),
        (&["rmp", "-f", &id(1)], Some(1)),
    ];
    for (args, pod) in steps {
        sleep(Duration::from_millis(300));
        crictl(r, &bin, cg, args, pod.map(|i| &pods[i]))?;
    }
    wait_child(&mut lifecycles, "cri-driver lifecycle")?;
    drop(cgroup);
    Ok(())
}

/// One crictl invocation of a truth file.
struct Ran<'a> {
    args: &'a [String],
    pod: Option<&'a PodRef>,
    stdout: &'a str,
    exit_code: Option<i32>,
}

/// The crictl invocations of a truth file, in order.
fn tools(t: &[Truth]) -> Vec<Ran<'_>> {
    t.iter()
        .filter_map(|x| match x {
            Truth::Tool {
                tool,
                args,
                pod,
                stdout,
                exit_code,
                ..
            } if tool == "crictl" => Some(Ran {
                args,
                pod: pod.as_ref(),
                stdout,
                exit_code: *exit_code,
            }),
            _ => None,
        })
        .collect()
}

/// What the truth must show: every crictl invocation succeeded and said
/// what it did (the pods listed before the stop, each stop and removal by
/// its sandbox id), and the driver's own lifecycles all went well.
pub(crate) fn verify(t: &[Truth]) -> Result<Vec<String>> {
    let runs = tools(t);
    let verbs: Vec<&str> = runs
        .iter()
        .filter_map(|r| r.args.first().map(String::as_str))
        .collect();
    ensure!(
        verbs == ["pods", "inspectp", "ps", "stopp", "rmp", "rmp"],
        "crictl ran {verbs:?}"
    );
    for Ran {
        args,
        pod,
        stdout,
        exit_code,
    } in &runs
    {
        ensure!(
            *exit_code == Some(0),
            "crictl {args:?} exited {exit_code:?}: {stdout}"
        );
        let id = pod.and_then(|p| p.sandbox_id.as_deref()).unwrap_or("");
        match args[0].as_str() {
            // Both pods listed; the one inspected named.
            "pods" | "inspectp" => {
                let shown = if args[0] == "pods" { 2 } else { 1 };
                for name in SRE_PODS.iter().take(shown) {
                    ensure!(
                        stdout.contains(name),
                        "crictl {args:?} did not show {name}: {stdout}"
                    );
                }
            }
            // A header line, then at least the two sre pods' containers.
            "ps" => ensure!(
                stdout.lines().count() >= 3,
                "crictl ps listed fewer than the 2 sre containers: {stdout}"
            ),
            "stopp" => ensure!(
                stdout.contains(&format!("Stopped sandbox {id}")),
                "crictl stopp said {stdout:?}"
            ),
            "rmp" => ensure!(
                stdout.contains(&format!("Removed sandbox {id}")),
                "crictl rmp said {stdout:?}"
            ),
            other => bail!("crictl {other}?"),
        }
    }
    let driver: Vec<_> = t
        .iter()
        .filter_map(|x| match x {
            Truth::Cri {
                method,
                pod,
                outcome,
                ..
            } => Some((method, pod.as_ref().map(|p| p.name.as_str()), outcome)),
            _ => None,
        })
        .collect();
    for (method, pod, outcome) in &driver {
        ensure!(
            matches!(outcome, truth::Outcome::Ok),
            "the driver's {method} of {pod:?} failed: {outcome:?}"
        );
    }
    let lifecycles = driver
        .iter()
        .filter(|(m, p, _)| *m == "RemovePodSandbox" && p.is_some_and(|p| p.starts_with("drv-")))
        .count();
    ensure!(
        lifecycles == 3,
        "{lifecycles} of the driver's 3 pods removed"
    );
    Ok(vec![
        format!("crictl ran {}", verbs.join(", ")),
        format!(
            "{} CRI calls of the driver, all ok; 3 lifecycles of its own",
            driver.len()
        ),
    ])
}
