//! Builds that run beside the lab tier, at the lowest CPU priority.
//!
//! Why: a lab test mostly waits on its scenario's own timing (a plugin
//! held 3 s, a CRI deadline, a container ignoring SIGTERM). Measured with
//! `vmstat 2` over 12 trace_lab tests (319 s): 69 % of the 2 cores idle.
//! CI ran the static dist binary (4.6 min), clippy's check build (3 min)
//! and the fuzz targets' build (7.7 min with cargo-fuzz's install) one
//! after the other before and after the tests: a quarter of the suite's
//! 57.7 min (docs/benchmarks.md, "The suite"). Here each is its own
//! `xtask` child under `nice -n 19`, so the tests keep the CPU they ask
//! for, its output in a log under target/xtask/, and the suite waits for
//! it only where its product is needed: the dist binary before the tests
//! that run it, clippy and the fuzz build at the end.
//!
//! Off unless NRI_TRACE_BESIDE=1 ([`wanted`]): the first CI-like run with
//! the builds beside (stop 39: 2672 s to the end of the lab tier, against
//! 2924 s in line) failed three lab tests a busy machine breaks, the
//! faults_lab recovery check (fixed since: it no longer waits a fixed
//! second), a delivery timed from the runtime's side only, and CRI-O's
//! sandbox clause decided on one pod of two (docs/benchmarks.md, "The
//! suite"). It becomes the default once the lab tier passes beside them.
//! The fuzz targets' build is the first that did: it goes beside the unit
//! and lab tiers whenever the lab tier runs (stop 51), as Kubernetes'
//! build has since stop 49.
//!
//! Each child has its own process group: if the suite stops early, the
//! drop of [`Beside`] kills the group (cargo and its rustc), so no build
//! outlives the run; except the lab's peers ([`Beside::start_peers`]),
//! which it waits for: their scripts run apt-get and dpkg, and a dpkg
//! killed half-way leaves the machine's packages for a person to repair.
//!
//! The lab's peers are not opt-in: they run beside the Rust builds and the
//! unit tier, before any lab test, so they cannot slow one down; the lab
//! tier waits for them. They run at the tests' own priority, not under
//! `nice`: the lab tier waits for them, so they are on the suite's
//! critical path. Under `nice -n 19` (ci21) the Go builds got almost no
//! CPU while cargo built: containerd 2.3 took 993 s (about 5 min alone,
//! of which 3 min CPU), and the lab tier started at 1883 s instead of
//! when the unit tier ended, at 1161 s (docs/benchmarks.md, "The suite").

use std::{
    fs,
    io::{BufRead, BufReader},
    os::unix::process::CommandExt,
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::Instant,
};

use anyhow::{bail, Context, Result};

use crate::workspace_root;

/// Whether the builds go beside the lab tier: NRI_TRACE_BESIDE=1.
pub(crate) fn wanted() -> bool {
    std::env::var("NRI_TRACE_BESIDE").is_ok_and(|v| v == "1")
}

/// A build running beside the tests.
pub(crate) struct Beside {
    /// What it is, as said in the suite's output.
    what: String,
    log: PathBuf,
    child: Option<Child>,
    started: Instant,
    /// Also what its drop does: kill it, or wait for it.
    priority: Priority,
}

/// How a background build shares the CPU with the suite.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Priority {
    /// `nice -n 19`: only what the tests leave idle; killed if the suite
    /// stops early.
    Lowest,
    /// The suite's own priority, for what the next tier waits on; waited
    /// for, never killed, if the suite stops early.
    CriticalPath,
}

/// Lines of a finished build's log printed with its result: all of a
/// failed one's last ones (the error is at the end), a few of a passed
/// one's (the fuzz smoke's table of targets is).
const TAIL_FAILED: usize = 120;
const TAIL_PASSED: usize = 3;

impl Beside {
    /// Start `xtask ARGS` (this very executable) under `nice -n 19`, its
    /// output to target/xtask/NAME.log.
    pub(crate) fn start(name: &str, what: &str, args: &[&str]) -> Result<Self> {
        Self::spawn(name, what, args, Priority::Lowest)
    }

    /// Start `xtask lab peers` at the suite's own priority, its output to
    /// target/xtask/lab-peers.log; the suite never kills it.
    pub(crate) fn start_peers() -> Result<Self> {
        Self::spawn(
            "lab-peers",
            "the lab's peers (runtimes, plugins, CRI clients)",
            &["lab", "peers"],
            Priority::CriticalPath,
        )
    }

    /// Start `xtask lab peers --late` at the lowest priority (the suite
    /// runs meanwhile), its output to target/xtask/lab-peers-late.log.
    pub(crate) fn start_late_peers() -> Result<Self> {
        Self::start(
            "lab-peers-late",
            "the lab's late peers (Kubernetes and etcd)",
            &["lab", "peers", "--late"],
        )
    }

    fn spawn(name: &str, what: &str, args: &[&str], priority: Priority) -> Result<Self> {
        let dir = workspace_root().join("target/xtask");
        fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let log = dir.join(format!("{name}.log"));
        let out = fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let err = out.try_clone()?;
        let me = std::env::current_exe().context("finding the xtask executable")?;
        let mut cmd = match priority {
            Priority::Lowest => {
                let mut c = Command::new("nice");
                c.args(["-n", "19"]).arg(me);
                c
            }
            Priority::CriticalPath => Command::new(me),
        };
        let child = cmd
            .args(args)
            .current_dir(workspace_root())
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0)
            .spawn()
            .with_context(|| format!("starting {what} (xtask {})", args.join(" ")))?;
        println!(
            "in the background: {what} (xtask {}), log {}",
            args.join(" "),
            log.display()
        );
        Ok(Self {
            what: what.to_owned(),
            log,
            child: Some(child),
            started: Instant::now(),
            priority,
        })
    }

    /// Wait for it to end; its error (with its log's last lines printed)
    /// if it failed.
    pub(crate) fn wait(mut self) -> Result<()> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        let waited = Instant::now();
        let status = child
            .wait()
            .with_context(|| format!("waiting for {}", self.what))?;
        let tail = if status.success() {
            TAIL_PASSED
        } else {
            TAIL_FAILED
        };
        println!(
            "in the background: {} {}; waited {:.0} s for it, {:.0} s after it started; log {}; its last lines:",
            self.what,
            if status.success() { "passed" } else { "FAILED" },
            waited.elapsed().as_secs_f64(),
            self.started.elapsed().as_secs_f64(),
            self.log.display()
        );
        for line in last_lines(&self.log, tail) {
            println!("  | {line}");
        }
        if !status.success() {
            bail!(
                "{} failed ({status}): see {}",
                self.what,
                self.log.display()
            );
        }
        Ok(())
    }
}

impl Drop for Beside {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            if self.priority == Priority::CriticalPath {
                println!(
                    "waiting for {} to end before stopping (log {})",
                    self.what,
                    self.log.display()
                );
                let _ = child.wait();
                return;
            }
            // Its group: `nice` became xtask, which runs cargo, which runs
            // rustc; killing the first alone would leave the rest.
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", child.id())])
                .stderr(Stdio::null())
                .status();
            let _ = child.wait();
        }
    }
}

/// The last `n` lines of a log (none if it cannot be read).
fn last_lines(log: &PathBuf, n: usize) -> Vec<String> {
    let Ok(f) = fs::File::open(log) else {
        return Vec::new();
    };
    let mut lines: Vec<String> = BufReader::new(f).lines().map_while(Result::ok).collect();
    let from = lines.len().saturating_sub(n);
    lines.drain(..from);
    lines
}
