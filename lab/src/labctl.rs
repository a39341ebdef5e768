//! Control of the lab's private containerd (`lab/lab.sh`) from Rust: up and
//! down with a given request timeout, pre-launched plugin installation, the
//! machine-wide lab lock, and the check that `down` left nothing behind.

use std::{
    fs::File,
    os::fd::AsRawFd,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{bail, Context, Result};

/// The lab is one per machine (fixed bridge and subnet): every user of it
/// (tests, scenarios, the demo) holds this lock.
pub const LOCK_PATH: &str = "/run/nri-trace-lab.lock";

/// An exclusive flock on [`LOCK_PATH`], released on drop.
pub struct LabLock {
    _file: File,
}

/// Wait for the lab (as long as it takes).
pub fn lock() -> Result<LabLock> {
    lock_within(std::time::Duration::MAX)
}

/// Wait at most `within` for the lab; say so once when it is busy. The
/// descriptor is close-on-exec (Rust's default), so a containerd started
/// while the lock is held does not inherit it.
pub fn lock_within(within: std::time::Duration) -> Result<LabLock> {
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(LOCK_PATH)
        .with_context(|| format!("opening {LOCK_PATH}"))?;
    let t0 = std::time::Instant::now();
    let mut said = false;
    loop {
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            return Ok(LabLock { _file: file });
        }
        let err = std::io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EWOULDBLOCK) {
            bail!("flock {LOCK_PATH}: {err}");
        }
        if t0.elapsed() > within {
            bail!("the lab lock {LOCK_PATH} is still held by another user after {within:?}");
        }
        if !said {
            eprintln!("waiting for the lab lock {LOCK_PATH}");
            said = true;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// The container runtime the lab runs: `NRI_TRACE_LAB_RUNTIME` (lab/lab.sh
/// reads the same variable), chosen when the lab comes up. One lab at a
/// time: the containerds use the same sockets and paths under the lab dir;
/// CRI-O (lab/crio.sh) the same NRI socket and plugin dir, its own CRI
/// socket `run/crio.sock` (the name nri-trace finds CRI-O's by).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Runtime {
    /// containerd 1.7.24 from Debian trixie (NRI 0.6.1).
    Containerd17,
    /// containerd 2.1 from Debian sid, unpacked under the lab dir (NRI 0.8).
    Containerd21,
    /// containerd 2.2.9 built from its Go module
    /// (github.com/containerd/containerd/v2, through the Go module proxy)
    /// under the lab dir (`ctrd22/bin`; NRI 0.11): lab/ctrd-module.sh.
    Containerd22,
    /// containerd 2.3.7, built as 2.2 (`ctrd23/bin`; NRI 0.12: an RPC per
    /// event).
    Containerd23,
    /// CRI-O 1.36.3 built from its Go module (github.com/cri-o/cri-o, through
    /// the Go module proxy) under the lab dir (`crio/bin`): lab/crio.sh.
    CriO,
}

impl Runtime {
    /// The environment variable that chooses the runtime.
    pub const ENV: &'static str = "NRI_TRACE_LAB_RUNTIME";

    /// Every runtime, by name.
    pub const ALL: [Self; 5] = [
        Self::Containerd17,
        Self::Containerd21,
        Self::Containerd22,
        Self::Containerd23,
        Self::CriO,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Self::Containerd17 => "containerd-1.7",
            Self::Containerd21 => "containerd-2.1",
            Self::Containerd22 => "containerd-2.2",
            Self::Containerd23 => "containerd-2.3",
            Self::CriO => "crio",
        }
    }

    /// How the version this runtime gives its plugins in NRI Configure
    /// begins (containerd's own version; CRI-O's release). The lab stamps
    /// the module-built containerds as containerd's Makefile does (`git
    /// describe`: v2.3.7); Debian's 2.1 says 2.1.9+unknown.
    pub fn configure_version_prefix(self) -> &'static str {
        match self {
            Self::Containerd17 => "1.7.",
            Self::Containerd21 => "2.1.",
            Self::Containerd22 => "v2.2.",
            Self::Containerd23 => "v2.3.",
            Self::CriO => "1.36.",
        }
    }

    /// The CRI socket's file name in `$LAB/run`.
    pub fn cri_socket_name(self) -> &'static str {
        match self {
            Self::Containerd17 | Self::Containerd21 | Self::Containerd22 | Self::Containerd23 => {
                "containerd.sock"
            }
            Self::CriO => "crio.sock",
        }
    }

    /// The runtime's pid file and config, relative to the lab dir: the pid
    /// is the runtime's only while its command line names that config.
    fn pid_file_and_config(self) -> (&'static str, &'static str) {
        match self {
            Self::Containerd17 | Self::Containerd21 | Self::Containerd22 | Self::Containerd23 => {
                ("containerd.pid", "config.toml")
            }
            Self::CriO => ("crio/crio.pid", "crio/crio.conf"),
        }
    }

    pub fn parse(s: &str) -> Result<Self> {
        Self::ALL
            .into_iter()
            .find(|r| r.name() == s)
            .with_context(|| {
                format!(
                    "unknown lab runtime {s:?}: set {} to containerd-1.7, containerd-2.1, \
                     containerd-2.2, containerd-2.3 or crio",
                    Self::ENV
                )
            })
    }

    /// `$NRI_TRACE_LAB_RUNTIME`, containerd 2.3 (what a new node runs) when
    /// unset.
    pub fn from_env() -> Result<Self> {
        match std::env::var(Self::ENV) {
            Ok(v) if !v.is_empty() => Self::parse(&v),
            _ => Ok(Self::Containerd23),
        }
    }
}

#[derive(Clone, Debug)]
pub struct Lab {
    /// $NRI_TRACE_LAB_DIR.
    pub dir: PathBuf,
    /// The runtime `up` starts ($NRI_TRACE_LAB_RUNTIME).
    pub runtime: Runtime,
    pub(crate) script: PathBuf,
    /// Where containerd 2.x sends its OpenTelemetry spans (OTLP/HTTP, e.g.
    /// http://127.0.0.1:4318), from `up` on; `None`: tracing off, as
    /// containerd ships (lab.sh, NRI_TRACE_LAB_OTLP_ENDPOINT).
    pub otlp_endpoint: Option<String>,
}

impl Default for Lab {
    fn default() -> Self {
        Self::from_env()
    }
}

impl Lab {
    /// The lab at $NRI_TRACE_LAB_DIR (default /var/lib/nri-trace-lab),
    /// driven by this repository's lab/lab.sh, running the runtime of
    /// $NRI_TRACE_LAB_RUNTIME. An unknown name panics: lab.sh never sees
    /// it (the scripts get the parsed runtime's name), and a default in its
    /// place would run every scenario and test on containerd 1.7 while the
    /// caller asked for another runtime (a build from before containerd 2.2
    /// and 2.3 did that with `NRI_TRACE_LAB_RUNTIME=containerd-2.3`).
    pub fn from_env() -> Self {
        let dir = std::env::var_os("NRI_TRACE_LAB_DIR")
            .map_or_else(|| PathBuf::from("/var/lib/nri-trace-lab"), PathBuf::from);
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("lab.sh");
        let runtime = Runtime::from_env().unwrap_or_else(|e| panic!("{e:#}"));
        Self {
            dir,
            runtime,
            script,
            otlp_endpoint: None,
        }
    }

    /// The runtime of a lab that is up (lab.sh records it in
    /// `$LAB/runtime` at `up`), or None when no runtime of the lab runs.
    pub fn running(&self) -> Option<String> {
        let runs = |r: Runtime| {
            let (pid_file, config) = r.pid_file_and_config();
            let Ok(pid) = std::fs::read_to_string(self.dir.join(pid_file)) else {
                return false;
            };
            let Ok(cmdline) = std::fs::read(format!("/proc/{}/cmdline", pid.trim())) else {
                return false;
            };
            let config = self.dir.join(config);
            // As lab.sh's our_pid: the pid is ours only while its command
            // line names our config (a recycled pid is someone else's).
            cmdline
                .split(|b| *b == 0)
                .any(|a| a == config.as_os_str().as_encoded_bytes())
        };
        (runs(Runtime::Containerd17) || runs(Runtime::CriO)).then(|| {
            std::fs::read_to_string(self.dir.join("runtime"))
                .map_or_else(|_| "unknown runtime".into(), |r| r.trim().to_string())
        })
    }

    /// The CRI socket of this lab's runtime.
    pub fn cri_socket(&self) -> PathBuf {
        self.dir.join("run").join(self.runtime.cri_socket_name())
    }
    pub fn nri_socket(&self) -> PathBuf {
        self.dir.join("run/nri.sock")
    }
    pub fn plugin_dir(&self) -> PathBuf {
        self.dir.join("nri/plugins")
    }

    fn script(&self, args: &[&str], request_timeout: Option<&str>) -> Result<()> {
        self.script_with(args, request_timeout, &[])
    }

    fn script_with(
        &self,
        args: &[&str],
        request_timeout: Option<&str>,
        envs: &[(&str, &str)],
    ) -> Result<()> {
        let mut cmd = Command::new("bash");
        cmd.arg(&self.script)
            .args(args)
            .env("NRI_TRACE_LAB_DIR", &self.dir)
            .env(Runtime::ENV, self.runtime.name())
            .env(
                "NRI_TRACE_LAB_OTLP_ENDPOINT",
                self.otlp_endpoint.as_deref().unwrap_or(""),
            )
            .envs(envs.iter().copied());
        if let Some(t) = request_timeout {
            cmd.env("NRI_TRACE_LAB_REQUEST_TIMEOUT", t);
        }
        let st = cmd
            .status()
            .with_context(|| format!("running {}", self.script.display()))?;
        if !st.success() {
            bail!("lab.sh {} failed ({st})", args.join(" "));
        }
        Ok(())
    }

    pub fn install(&self) -> Result<()> {
        self.script(&["install"], None)
    }

    /// Start the private containerd with this NRI request timeout (e.g. "2s").
    /// Pre-launched plugins must be installed before.
    pub fn up(&self, request_timeout: &str) -> Result<()> {
        self.script(&["up"], Some(request_timeout))
    }

    /// [`Self::up`] with NRI's built-in default validator on, rejecting
    /// what `rejects` names (its reject_* settings, comma-separated:
    /// "reject_oci_hook_adjustment"); containerd 2.2 and 2.3 (lab.sh) and
    /// CRI-O (crio.sh) only.
    pub fn up_validating(&self, request_timeout: &str, rejects: &str) -> Result<()> {
        self.script_with(
            &["up"],
            Some(request_timeout),
            &[("NRI_TRACE_LAB_DEFAULT_VALIDATOR", rejects)],
        )
    }

    /// Restart containerd alone (pods, shims and containers stay).
    pub fn restart(&self) -> Result<()> {
        self.script(&["restart"], None)
    }

    pub fn down(&self) -> Result<()> {
        self.script(&["down"], None)
    }

    /// Remove every pre-launched plugin of a previous run. Plugins are
    /// read by containerd only when it starts: one left behind would be
    /// launched by the next `up` of whoever comes next (and a wrapper whose
    /// truth file or binary is gone fails to register, which makes
    /// containerd 1.7 refuse to start).
    pub fn clear_plugins(&self) -> Result<()> {
        let dir = self.plugin_dir();
        if let Ok(rd) = std::fs::read_dir(&dir) {
            for e in rd.flatten() {
                std::fs::remove_file(e.path())
                    .with_context(|| format!("removing {}", e.path().display()))?;
            }
        }
        Ok(())
    }

    /// Install a pre-launched plugin `NN-name`: a wrapper script that execs
    /// `plugin_bin` with `args` (containerd runs it with no arguments and the
    /// socketpair end as fd 3).
    pub fn install_prelaunched(
        &self,
        idx: &str,
        name: &str,
        plugin_bin: &Path,
        args: &[String],
    ) -> Result<PathBuf> {
        let dir = self.plugin_dir();
        std::fs::create_dir_all(&dir)?;
        let path = dir.join(format!("{idx}-{name}"));
        let quoted: Vec<String> = args.iter().map(|a| shell_quote(a)).collect();
        let body = format!(
            "#!/bin/sh\n# Installed by the nri-trace lab (pre-launched test plugin).\nexec {} {}\n",
            shell_quote(&plugin_bin.to_string_lossy()),
            quoted.join(" ")
        );
        std::fs::write(&path, body)?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
        Ok(path)
    }

    /// What `down` must not leave behind: processes started for this lab,
    /// mounts under the lab dir or of the given container/sandbox ids, and
    /// cgroups of those ids. Returns one line per leftover.
    pub fn leftovers(&self, ids: &[String]) -> Vec<String> {
        let mut left = Vec::new();
        let dir = self.dir.to_string_lossy().into_owned();
        if let Ok(rd) = std::fs::read_dir("/proc") {
            for e in rd.flatten() {
                let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                    continue;
                };
                let Ok(cmd) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
                    continue;
                };
                let prog = cmd
                    .split(|b| *b == 0)
                    .next()
                    .map(|a| {
                        String::from_utf8_lossy(a)
                            .rsplit('/')
                            .next()
                            .unwrap_or("")
                            .to_owned()
                    })
                    .unwrap_or_default();
                let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
                // containerd 2.1 runs as $LAB/ctrd21/pkg/usr/bin/containerd,
                // 2.2 and 2.3 as $LAB/ctrd22/bin/containerd and
                // $LAB/ctrd23/bin/containerd, CRI-O as $LAB/crio/bin/crio,
                // with conmons naming $LAB/crio.
                let ours = cmd.contains(&format!("{dir}/"))
                    && (prog == "containerd"
                        || prog.starts_with("containerd-shim")
                        || prog == "crio"
                        || prog == "conmon");
                if ours || ids.iter().any(|id| cmd.contains(id.as_str())) {
                    left.push(format!("process {pid}: {}", cmd.trim()));
                }
            }
        }
        if let Ok(mi) = std::fs::read_to_string("/proc/self/mountinfo") {
            for line in mi.lines() {
                let Some(mnt) = line.split(' ').nth(4) else {
                    continue;
                };
                if mnt.starts_with(&format!("{dir}/"))
                    || ids.iter().any(|id| mnt.contains(id.as_str()))
                {
                    left.push(format!("mount {mnt}"));
                }
            }
        }
        for id in ids {
            if let Ok(rd) = std::fs::read_dir("/sys/fs/cgroup") {
                for hier in rd.flatten() {
                    let p = hier.path().join("k8s.io").join(id);
                    if p.exists() {
                        left.push(format!("cgroup {}", p.display()));
                    }
                }
            }
            let p = Path::new("/sys/fs/cgroup/k8s.io").join(id);
            if p.exists() {
                left.push(format!("cgroup {}", p.display()));
            }
            // CRI-O with cgroupfs and no cgroup parent: /crio/crio-<id>
            // and its conmon's /crio/crio-conmon-<id>, in every hierarchy.
            let root = PathBuf::from("/sys/fs/cgroup");
            let hierarchies = std::fs::read_dir(&root)
                .into_iter()
                .flatten()
                .flatten()
                .map(|h| h.path());
            for hier in std::iter::once(root.clone()).chain(hierarchies) {
                for name in [format!("crio-{id}"), format!("crio-conmon-{id}")] {
                    let p = hier.join("crio").join(name);
                    if p.exists() {
                        left.push(format!("cgroup {}", p.display()));
                    }
                }
            }
        }
        left.sort();
        left.dedup();
        left
    }
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtime_names() {
        for r in Runtime::ALL {
            assert_eq!(Runtime::parse(r.name()).unwrap(), r);
        }
        let err = Runtime::parse("containerd-2.0").unwrap_err().to_string();
        assert!(err.contains("NRI_TRACE_LAB_RUNTIME"), "{err}");
    }

    #[test]
    fn quoting() {
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
    }

    #[test]
    fn prelaunched_wrapper() {
        let dir = std::env::temp_dir().join(format!("labctl-{}", std::process::id()));
        let lab = Lab {
            dir: dir.clone(),
            runtime: Runtime::Containerd17,
            script: PathBuf::from("/nonexistent"),
            otlp_endpoint: None,
        };
        let p = lab
            .install_prelaunched(
                "30",
                "gamma",
                Path::new("/bin/plugin"),
                &["--on".into(), "RUN_POD_SANDBOX=delay:5".into()],
            )
            .unwrap();
        let body = std::fs::read_to_string(&p).unwrap();
        assert!(
            body.contains("exec '/bin/plugin' '--on' 'RUN_POD_SANDBOX=delay:5'"),
            "{body}"
        );
        lab.clear_plugins().unwrap();
        assert!(!p.exists());
        let _ = std::fs::remove_dir_all(dir);
    }
}
