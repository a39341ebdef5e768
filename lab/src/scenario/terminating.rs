//! Terminating scenarios: a pod whose teardown a host-side cause holds
//! up, a mount kept busy (`busy-mount`) or a container process stuck in
//! state D in a FUSE read that is never answered (`unkillable`, with
//! [`FuseHang`]). Each records what the runtime answered and then
//! releases the cause, so that the pod goes for real.

use std::{
    path::{Path, PathBuf},
    process::{Child, Command},
    thread::sleep,
    time::Duration,
};

use anyhow::{bail, ensure, Context, Result};

use super::{
    container_id_of, hold_stuck, outcome, sandbox_id_of,
    truth_checks::{cri_calls, ms, notes},
    KillOnDrop, Run, Scenario,
};
use crate::{
    labctl::{Lab, Runtime},
    truth::{Outcome, Truth},
};

pub(super) const BUSY_MOUNT: Scenario = Scenario {
    name: "busy-mount",
    about: "a host process holds the container's rootfs mount busy during teardown",
    drive: busy_mount,
    check: check_busy_mount,
};

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

fn check_busy_mount(t: &[Truth], facts: &mut Vec<String>) -> Result<()> {
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
    for c in cri_calls(t).iter().filter(|c| !matches!(c.3, Outcome::Ok)) {
        facts.push(format!("CRI {} failed: {:?}", c.0, c.3));
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

pub(super) const UNKILLABLE: Scenario = Scenario {
    name: "unkillable",
    about: "a container process blocked in a FUSE read that is never answered survives StopContainer's SIGKILL in state D",
    drive: unkillable,
    check: check_unkillable,
};

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

fn check_unkillable(t: &[Truth], facts: &mut Vec<String>) -> Result<()> {
    let notes = notes(t);
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
    let calls = cri_calls(t);
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
    Ok(())
}

/// A running `fuse-hang MOUNTPOINT` (src/bin/fuse-hang.rs). Dropping it
/// (also when a scenario fails half-way, or panics) stops the server, which
/// aborts its FUSE connection so that a reader stuck in state D can die of
/// its pending SIGKILL, and detaches the mount: neither a D-state process
/// nor a mount under the lab dir outlives the scenario.
pub struct FuseHang {
    child: Option<Child>,
    pub pid: u32,
    mnt: PathBuf,
    /// Its stdout: one JSON object per line.
    events: PathBuf,
}

impl FuseHang {
    /// Start it and wait until it has mounted.
    pub fn start(bin: &Path, mnt: &Path, out: &Path) -> Result<Self> {
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
    pub fn held_reader(&self, max: Duration) -> Result<u32> {
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
    pub fn stop(&mut self) -> Result<std::process::ExitStatus> {
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
