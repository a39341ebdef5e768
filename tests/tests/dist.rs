//! The dist binary (`cargo xtask dist`) on a machine with none of the
//! build toolchain: run from an empty root that holds only the binary and
//! the kernel's own filesystems, as a node or a scratch container would.
//!
//! - `doctor -o json` in the empty root passes every check the same binary
//!   passes on the host, and `--version` names the commit under test;
//! - `watch` in the empty root traces the lab's containerd through a
//!   scenario (its CRI calls and NRI hooks on stdout).
//!
//! The binary comes from `NRI_TRACE_DIST_BIN` (`cargo xtask test` builds
//! it first and sets it), else the newest one in target/dist. Needs root
//! (a mount namespace, chroot, eBPF) and, for `watch`, the lab; mandatory
//! under CI=true.

use std::{
    collections::BTreeMap,
    ffi::CString,
    fs,
    os::unix::{ffi::OsStrExt, process::CommandExt},
    path::{Path, PathBuf},
    process::{Child, Command, Output, Stdio},
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};
use nri_trace_lab::{
    labctl::{self, Lab},
    scenario::{self, Bins, Observer},
};
use nri_trace_tests::workspace_bin;

mod dist_bin;
use dist_bin::{commit_in_name, guard};
use serde_json::Value;

/// A directory with nothing but the dist binary (as /nri-trace) and the
/// mount points the empty root binds.
struct EmptyRoot {
    dir: PathBuf,
    /// Host directories bind-mounted (recursively) at the same path inside.
    binds: Vec<PathBuf>,
}

impl EmptyRoot {
    fn new(name: &str, bin: &Path, binds: &[&Path]) -> Self {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join("dist-root")
            .join(name);
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        fs::copy(bin, dir.join("nri-trace")).unwrap();
        for b in binds {
            fs::create_dir_all(dir.join(b.strip_prefix("/").unwrap())).unwrap();
        }
        // What the binary could find in the root besides its mounts:
        // nothing (no /lib, no /usr, no /etc).
        let mut names: Vec<String> = fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        for top in &names {
            assert!(
                top == "nri-trace" || binds.iter().any(|b| b.starts_with(format!("/{top}"))),
                "unexpected {top} in the empty root"
            );
        }
        EmptyRoot {
            dir,
            binds: binds.iter().map(|b| b.to_path_buf()).collect(),
        }
    }

    /// `/nri-trace ARGS` chrooted into the root, in a private mount
    /// namespace holding the binds (gone with the process: nothing to
    /// unmount).
    fn command(&self, args: &[&str]) -> Command {
        let root = CString::new(self.dir.as_os_str().as_bytes()).unwrap();
        let binds: Vec<(CString, CString)> = self
            .binds
            .iter()
            .map(|b| {
                (
                    CString::new(b.as_os_str().as_bytes()).unwrap(),
                    CString::new(
                        self.dir
                            .join(b.strip_prefix("/").unwrap())
                            .as_os_str()
                            .as_bytes(),
                    )
                    .unwrap(),
                )
            })
            .collect();
        let mut cmd = Command::new("/nri-trace");
        cmd.args(args).env_clear().env("PATH", "/");
        // Between fork and exec: only syscalls, on memory prepared above.
        unsafe {
            cmd.pre_exec(move || {
                let err = std::io::Error::last_os_error;
                if libc::unshare(libc::CLONE_NEWNS) != 0 {
                    return Err(err());
                }
                // Our mounts must not reach the host's namespace.
                if libc::mount(
                    std::ptr::null(),
                    c"/".as_ptr(),
                    std::ptr::null(),
                    libc::MS_REC | libc::MS_PRIVATE,
                    std::ptr::null(),
                ) != 0
                {
                    return Err(err());
                }
                for (src, dst) in &binds {
                    if libc::mount(
                        src.as_ptr(),
                        dst.as_ptr(),
                        std::ptr::null(),
                        libc::MS_BIND | libc::MS_REC,
                        std::ptr::null(),
                    ) != 0
                    {
                        return Err(err());
                    }
                }
                if libc::chroot(root.as_ptr()) != 0 || libc::chdir(c"/".as_ptr()) != 0 {
                    return Err(err());
                }
                Ok(())
            });
        }
        cmd
    }
}

/// `doctor -o json`'s checks: name -> (status, detail).
fn doctor_checks(out: &Output) -> BTreeMap<String, (String, String)> {
    let text = String::from_utf8_lossy(&out.stdout);
    let mut checks = BTreeMap::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let v: Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("doctor line {line:?}: {e}"));
        if v["type"] != "doctor_check" {
            continue;
        }
        checks.insert(
            v["name"].as_str().unwrap().to_owned(),
            (
                v["status"].as_str().unwrap().to_owned(),
                v["detail"].as_str().unwrap_or_default().to_owned(),
            ),
        );
    }
    assert!(
        !checks.is_empty(),
        "doctor printed no checks ({}):\n{text}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    checks
}

/// The host's /sys and /proc are all the binary needs from the machine
/// (tracefs, debugfs and bpffs come along under /sys with the recursive
/// bind); /run holds the runtime sockets doctor looks for, as the
/// DaemonSet mounts them.
const DOCTOR_BINDS: &[&str] = &["/proc", "/sys", "/run"];

#[test]
fn dist_doctor_in_empty_root_passes_what_the_host_passes() {
    let Some(bin) = guard("dist_doctor_in_empty_root", &[]) else {
        return;
    };
    // The dist binary checked against its sha256 file (sha256sum format).
    let sum = fs::read_to_string(format!("{}.sha256", bin.display())).unwrap();
    let check = Command::new("sha256sum")
        .arg("-c")
        .arg("--strict")
        .arg(format!(
            "{}.sha256",
            bin.file_name().unwrap().to_string_lossy()
        ))
        .current_dir(bin.parent().unwrap())
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "sha256sum -c: {sum}{}",
        String::from_utf8_lossy(&check.stderr)
    );

    let binds: Vec<&Path> = DOCTOR_BINDS.iter().map(Path::new).collect();
    let root = EmptyRoot::new("doctor", &bin, &binds);

    // --version names the commit of the file name (which guard() checked
    // is this checkout's HEAD).
    let commit = commit_in_name(&bin);
    let out = root.command(&["--version"]).output().unwrap();
    let version = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert!(out.status.success(), "--version: {out:?}");
    assert!(
        version.starts_with("nri-trace ") && version.ends_with(&format!(" ({commit})")),
        "--version in the empty root says {version:?}, the file name says {commit}"
    );
    eprintln!("empty root: {version}");

    // The lab's containerd starting or stopping between the two runs would
    // change the socket and runtime checks: hold the lab still.
    let _lock = labctl::lock().expect("lab lock");
    let host = doctor_checks(
        &Command::new(&bin)
            .args(["doctor", "-o", "json"])
            .output()
            .unwrap(),
    );
    let empty = doctor_checks(&root.command(&["doctor", "-o", "json"]).output().unwrap());
    for (name, (status, detail)) in &empty {
        eprintln!("empty root: {name}: {status}: {detail}");
    }
    assert_eq!(
        host.keys().collect::<Vec<_>>(),
        empty.keys().collect::<Vec<_>>(),
        "the same checks"
    );
    for (name, (status, detail)) in &host {
        if status == "ok" {
            let (got, got_detail) = &empty[name];
            assert_eq!(
                got, "ok",
                "{name}: ok on the host ({detail}), {got} in the empty root: {got_detail}"
            );
        }
    }
    // Whatever the host lacks, the binary itself must work from the empty
    // root: its programs load, pass the verifier and attach.
    assert_eq!(
        empty["eBPF programs"].0, "ok",
        "{:?}",
        empty["eBPF programs"]
    );
}

/// `nri-trace watch -o json` on the lab's sockets, from the empty root.
struct EmptyRootWatch {
    root: Option<EmptyRoot>,
    bin: PathBuf,
    child: Option<Child>,
    stdout: PathBuf,
    stderr: PathBuf,
}

impl Observer for EmptyRootWatch {
    fn attach(&mut self, lab: &Lab, out: &Path) -> Result<()> {
        let run_dir = lab.cri_socket().parent().unwrap().to_path_buf();
        let binds = [Path::new("/proc"), Path::new("/sys"), &run_dir];
        let root = EmptyRoot::new("watch", &self.bin, &binds);
        self.stdout = out.join("empty-root-watch.ndjson");
        self.stderr = out.join("empty-root-watch.stderr");
        let cri = lab.cri_socket();
        let nri = lab.nri_socket();
        let child = root
            .command(&[
                "watch",
                "-o",
                "json",
                "--cri-socket",
                cri.to_str().unwrap(),
                "--nri-socket",
                nri.to_str().unwrap(),
            ])
            .stdin(Stdio::null())
            .stdout(fs::File::create(&self.stdout)?)
            .stderr(fs::File::create(&self.stderr)?)
            .spawn()
            .context("starting nri-trace in the empty root")?;
        self.child = Some(child);
        self.root = Some(root);
        nri_trace_tests::wait_for_lines(
            self.child.as_mut().unwrap(),
            &self.stderr,
            &["nri-trace: ready"],
            Duration::from_mins(1),
            "nri-trace",
        )?;
        Ok(())
    }

    fn detach(&mut self) -> Result<()> {
        let Some(mut c) = self.child.take() else {
            return Ok(());
        };
        // Let the last calls drain (the drain timer is 2 ms).
        std::thread::sleep(Duration::from_millis(300));
        let st = nri_trace_tests::stop_child(
            &mut c,
            libc::SIGTERM,
            Duration::from_secs(20),
            "nri-trace",
        )?;
        if !st.success() {
            bail!(
                "nri-trace exited with {st}:\n{}",
                fs::read_to_string(&self.stderr).unwrap_or_default()
            );
        }
        Ok(())
    }
}

#[test]
fn dist_watch_in_empty_root_traces_the_lab() {
    let Some(bin) = guard(
        "dist_watch_in_empty_root",
        &["cri-driver", "nri-test-plugin"],
    ) else {
        return;
    };
    let _lock = labctl::lock().expect("lab lock");
    let lab = Lab::from_env();
    lab.install().expect("lab install");
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("dist/happy");
    let watch = EmptyRootWatch {
        root: None,
        bin,
        child: None,
        stdout: PathBuf::new(),
        stderr: PathBuf::new(),
    };
    let bins = Bins {
        driver: workspace_bin("cri-driver"),
        plugin: workspace_bin("nri-test-plugin"),
    };
    scenario::run_observed("happy", lab, bins, &out, Some(Box::new(watch)))
        .unwrap_or_else(|e| panic!("scenario happy: {e:#}"));

    let text = fs::read_to_string(out.join("empty-root-watch.ndjson")).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
        .collect();
    let mut by_type: BTreeMap<String, usize> = BTreeMap::new();
    for v in &lines {
        *by_type
            .entry(v["type"].as_str().unwrap_or("?").to_owned())
            .or_default() += 1;
    }
    eprintln!("empty-root watch on happy: {by_type:?}");
    assert_eq!(
        lines.first().map(|v| v["type"].clone()),
        Some("session".into())
    );
    // happy runs 3 pods, 2 containers each, through their whole
    // lifecycle, with NRI plugins subscribed to the pod events: -o json
    // prints each CRI call as a `cri_span` with the NRI hooks it caused.
    let run_pod: Vec<&Value> = lines
        .iter()
        .filter(|v| v["type"] == "cri_span" && v["method"] == "RunPodSandbox")
        .collect();
    assert_eq!(
        run_pod.len(),
        3,
        "RunPodSandbox calls traced from the empty root"
    );
    for span in &run_pod {
        let hooks = span["hooks"].as_array().map_or(0, Vec::len);
        assert!(hooks > 0, "RunPodSandbox without its NRI hooks: {span}");
    }
    let create = lines
        .iter()
        .filter(|v| v["type"] == "cri_span" && v["method"] == "CreateContainer")
        .count();
    assert_eq!(
        create, 6,
        "CreateContainer calls traced from the empty root"
    );
}

/// The image of `cargo xtask image` (lab/mkimage.py, the same arguments)
/// as a privileged pod of the lab's own containerd, started through CRI
/// as kubelet would start deploy/daemonset.yaml's: host PID and network
/// namespaces, tracefs and the runtime's socket directory mounted,
/// `watch -o json --metrics-addr`. It finds the runtime from inside the
/// pod, as on a node.
struct ImagePod {
    image: PathBuf,
    out: PathBuf,
    pod: Option<(nri_trace_lab::cri::PodSpec, String)>,
    container: Option<nri_trace_lab::truth::ContainerRef>,
    rt: Option<tokio::runtime::Runtime>,
    driver: Option<nri_trace_lab::cri::Driver>,
    metrics: String,
}

const IMAGE_REF: &str = "localhost/nri-trace/nri-trace:test";

impl ImagePod {
    fn log(&self) -> PathBuf {
        let (pod, _) = self.pod.as_ref().expect("the pod");
        pod.log_directory
            .as_ref()
            .expect("a log directory")
            .join("nri-trace/0.log")
    }
}

/// The stream's lines of a CRI container log (`TIME STREAM P|F TEXT`,
/// partial lines joined).
fn cri_log_lines(text: &str, stream: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut partial = String::new();
    for l in text.lines() {
        let mut f = l.splitn(4, ' ');
        let (_, s, tag, rest) = (f.next(), f.next(), f.next(), f.next().unwrap_or(""));
        if s != Some(stream) {
            continue;
        }
        partial.push_str(rest);
        if tag == Some("F") {
            lines.push(std::mem::take(&mut partial));
        }
    }
    lines
}

impl Observer for ImagePod {
    fn attach(&mut self, lab: &Lab, out: &Path) -> Result<()> {
        use nri_trace_lab::cri::{ContainerSpec, Driver, MountSpec, PodSpec, RetryPolicy};
        self.out = out.to_path_buf();
        let import = Command::new("ctr")
            .arg("--address")
            .arg(lab.cri_socket())
            .args(["-n", "k8s.io", "images", "import"])
            .arg(&self.image)
            .output()
            .context("ctr images import")?;
        anyhow::ensure!(
            import.status.success(),
            "ctr images import: {}",
            String::from_utf8_lossy(&import.stderr)
        );
        let free = std::net::TcpListener::bind("127.0.0.1:0")?;
        self.metrics = free.local_addr()?.to_string();
        drop(free);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let truth = nri_trace_lab::truth::TruthWriter::append(&out.join("image-pod.truth.ndjson"))?;
        let driver = rt.block_on(Driver::connect(
            &lab.cri_socket(),
            truth,
            Duration::from_secs(30),
        ))?;
        let mut pod = PodSpec::new("nri-trace-node", "kube-system", true)
            .with_log_root(Some(&out.join("pod-logs")));
        pod.host_pid = true;
        pod.privileged = true;
        let run_dir = lab
            .cri_socket()
            .parent()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let mut c = ContainerSpec::new("nri-trace");
        c.image = IMAGE_REF.into();
        c.command = vec![];
        c.args = ["watch", "-o", "json", "--metrics-addr", &self.metrics]
            .map(String::from)
            .to_vec();
        c.privileged = true;
        c.mounts = [&*run_dir, "/sys/kernel/tracing"]
            .iter()
            .map(|p| MountSpec {
                host_path: (*p).to_string(),
                container_path: (*p).to_string(),
            })
            .collect();
        let policy = RetryPolicy::none();
        let sandbox = rt.block_on(driver.run_pod_sandbox(&pod, &policy))?;
        let cref = rt.block_on(driver.create_container(&pod, &sandbox, &c, &policy))?;
        rt.block_on(driver.start_container(Some(&pod.pod_ref(Some(&sandbox))), &cref))?;
        self.pod = Some((pod, sandbox));
        self.container = Some(cref);
        self.driver = Some(driver);
        self.rt = Some(rt);
        // A bound on the wait, not a timed assertion.
        let t0 = Instant::now();
        loop {
            let log = fs::read_to_string(self.log()).unwrap_or_default();
            if cri_log_lines(&log, "stderr")
                .iter()
                .any(|l| l.contains("nri-trace: ready"))
            {
                return Ok(());
            }
            if t0.elapsed() > Duration::from_mins(1) {
                bail!("nri-trace in the pod not ready after 60 s:\n{log}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn detach(&mut self) -> Result<()> {
        let (Some(rt), Some(driver), Some((pod, sandbox)), Some(c)) = (
            self.rt.as_ref(),
            self.driver.as_ref(),
            self.pod.as_ref(),
            self.container.as_ref(),
        ) else {
            return Ok(());
        };
        // The last calls drain and the exposition is re-rendered (500 ms).
        std::thread::sleep(Duration::from_millis(1500));
        let metrics = nri_trace_tests::http_get(&self.metrics, "/metrics");
        fs::write(self.out.join("image-pod-metrics.txt"), metrics?)?;
        let pod_ref = pod.pod_ref(Some(sandbox));
        // SIGTERM: nri-trace prints its summary and exits 0. The sandbox
        // is left to the lab's `down`: a StopPodSandbox through CRI would
        // reach the scenario's plugins, whose deliveries its check counts.
        rt.block_on(driver.stop_container(Some(&pod_ref), c, 20))?;
        let status = rt.block_on(driver.container_status(Some(&pod_ref), c))?;
        fs::write(self.out.join("image-pod-status.txt"), format!("{status:?}"))?;
        Ok(())
    }
}

#[test]
fn image_as_a_privileged_pod_traces_its_own_runtime() {
    let Some(bin) = guard(
        "image_as_a_privileged_pod",
        &["cri-driver", "nri-test-plugin"],
    ) else {
        return;
    };
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("dist/image-pod");
    let _ = fs::remove_dir_all(&out);
    fs::create_dir_all(&out).unwrap();
    let image = out.join("nri-trace.oci.tar");
    dist_bin::pack_image(&bin, IMAGE_REF, &image).expect("packing the image");
    let _lock = labctl::lock().expect("lab lock");
    let lab = Lab::from_env();
    lab.install().expect("lab install");
    let pod = ImagePod {
        image,
        out: PathBuf::new(),
        pod: None,
        container: None,
        rt: None,
        driver: None,
        metrics: String::new(),
    };
    let bins = Bins {
        driver: workspace_bin("cri-driver"),
        plugin: workspace_bin("nri-test-plugin"),
    };
    // slow-plugin: its plugins connect after the pod is up (a pre-launched
    // one would also be told of the pod's own CreateContainer).
    let scenario_out = out.join("slow-plugin");
    scenario::run_observed("slow-plugin", lab, bins, &scenario_out, Some(Box::new(pod)))
        .unwrap_or_else(|e| panic!("scenario slow-plugin: {e:#}"));

    let logs: Vec<PathBuf> = fs::read_dir(scenario_out.join("pod-logs"))
        .unwrap()
        .map(|e| e.unwrap().path().join("nri-trace/0.log"))
        .collect();
    assert_eq!(logs.len(), 1, "{logs:?}");
    let log = fs::read_to_string(&logs[0]).unwrap();
    let stderr = cri_log_lines(&log, "stderr").join("\n");
    eprintln!("nri-trace in the pod, stderr:\n{stderr}");
    let lines: Vec<Value> = cri_log_lines(&log, "stdout")
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
        .collect();
    assert_eq!(
        lines.first().map(|v| v["type"].clone()),
        Some("session".into()),
        "{stderr}"
    );
    // It found the lab's containerd from inside the pod (host PID
    // namespace) and traced the scenario's pods with their hooks.
    let run_pod: Vec<&Value> = lines
        .iter()
        .filter(|v| v["type"] == "cri_span" && v["method"] == "RunPodSandbox")
        .collect();
    assert_eq!(run_pod.len(), 2, "RunPodSandbox calls traced from the pod");
    for span in &run_pod {
        assert!(
            span["pod"]["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("slow-")),
            "{span}"
        );
        let hooks = span["hooks"].as_array().map_or(0, Vec::len);
        assert!(hooks > 0, "RunPodSandbox without its NRI hooks: {span}");
    }
    // It ended on SIGTERM with its summary, exit code 0.
    assert!(
        lines.iter().any(|v| v["type"] == "session_end"),
        "no session_end: {stderr}"
    );
    let status = fs::read_to_string(scenario_out.join("image-pod-status.txt")).unwrap();
    assert!(status.contains("exit_code: 0"), "{status}");
    // Metrics served from the pod, on the node's network.
    let metrics = fs::read_to_string(scenario_out.join("image-pod-metrics.txt")).unwrap();
    assert!(
        metrics
            .contains("nri_trace_cri_call_duration_seconds_count{grpc_method=\"RunPodSandbox\"} 2"),
        "{metrics}"
    );
    assert!(
        metrics.contains("nri_trace_hook_duration_seconds_count{plugin=\"10-slow\",operation=\"RunPodSandbox\"} 2"),
        "{metrics}"
    );
}
