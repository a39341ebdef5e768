//! `cargo xtask kernels`: the static binary's `doctor` and capture self-test
//! on the kernels nodes run, each booted here in qemu from Debian's own
//! kernel package (docs/kernels.md).
//!
//! Everything fetched goes to a cache dir (`/var/cache/nri-trace/kernels`,
//! or `$NRI_TRACE_KERNELS_CACHE`) through a private apt configuration per
//! suite (its own sources.list, state and cache dirs; the system's apt
//! config is neither read nor written, as lab/lab.sh does for containerd
//! 2.1). A kernel is the uncompressed vmlinux extracted from the package's
//! bzImage (booting it with `-kernel` saves ~3 s of decompression under
//! tcg). The initrd is two cpio archives concatenated, which the kernel
//! unpacks in turn (Documentation/driver-api/early-userspace/
//! buffer-format.rst): a cached base (static busybox from Debian's
//! busybox-static and an /init that mounts proc, sysfs, devtmpfs, tracefs
//! and bpffs) and a per-run layer with the binary and the test script.
//! The results come back on the VM's second serial port, the console on
//! the first.

use std::{
    fs,
    io::Write,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};
use serde::Serialize;

use crate::run;

/// A kernel series and the Debian suite that carries it.
pub(crate) struct Kernel {
    /// The series, as `--kernel` names it.
    pub(crate) name: &'static str,
    /// The apt source line's URI and suite.
    uri: &'static str,
    suite: &'static str,
}

pub(crate) const KERNELS: &[Kernel] = &[
    Kernel {
        name: "5.10",
        uri: "http://deb.debian.org/debian-security",
        suite: "bullseye-security",
    },
    Kernel {
        name: "6.1",
        uri: "http://deb.debian.org/debian-security",
        suite: "bookworm-security",
    },
    Kernel {
        name: "6.12",
        uri: "http://deb.debian.org/debian",
        suite: "trixie",
    },
];

/// The suite busybox-static comes from (the base initrd's shell).
const BUSYBOX_SUITE: (&str, &str) = ("http://deb.debian.org/debian", "bookworm");

/// A VM that has not powered off after this long is stuck (a boot is
/// ~4 s under tcg, loading the programs some more).
const BOOT_TIMEOUT: Duration = Duration::from_mins(5);

/// The doctor checks that must pass in every VM besides its exit status
/// (which a missing check would not fail).
const SELF_TESTS: &[&str] = &[
    "eBPF programs",
    "capture self-test",
    "sandbox probes self-test",
];

/// Lines the test script writes on the second serial port start a section
/// with this marker.
const MARK: &str = "@@nri-trace-kernels@@";

pub(crate) fn cache_dir() -> PathBuf {
    std::env::var_os("NRI_TRACE_KERNELS_CACHE").map_or_else(
        || PathBuf::from("/var/cache/nri-trace/kernels"),
        PathBuf::from,
    )
}

#[derive(clap::Args)]
pub(crate) struct KernelsArgs {
    /// Which kernel: 5.10, 6.1, 6.12, or all.
    #[arg(long, default_value = "all", value_parser = ["5.10", "6.1", "6.12", "all"])]
    kernel: String,
    /// The static binary to test [default: build it with `cargo xtask dist`].
    #[arg(long, value_name = "FILE")]
    bin: Option<PathBuf>,
    /// Run doctor with RUST_LOG=debug in the VMs (whole verifier logs).
    #[arg(long)]
    verbose: bool,
    /// Also write the results as JSON to FILE (tests/tests/kernels.rs).
    #[arg(long, value_name = "FILE")]
    report: Option<PathBuf>,
    /// Rounds of `nri-trace write-cost` in each VM after doctor (no
    /// probes, the tracepoint backend, the fentry backend, in turn);
    /// `cargo xtask bench --only kernels` reports them.
    #[arg(long, default_value_t = 0)]
    write_cost_rounds: u32,
}

/// One kernel's run, as measured.
#[derive(Serialize)]
pub(crate) struct KernelRun {
    pub(crate) kernel: String,
    /// The Debian package and version booted.
    pub(crate) package: String,
    pub(crate) version: String,
    /// `uname -r` inside the VM.
    pub(crate) uname: String,
    pub(crate) doctor_rc: Option<i32>,
    /// `nri-trace doctor -o json`'s lines (`--backend auto`: fentry where
    /// the kernel allows it).
    pub(crate) doctor: Vec<serde_json::Value>,
    /// The same on the tracepoint backend (`--backend tracepoint`).
    pub(crate) tracepoint_doctor_rc: Option<i32>,
    pub(crate) tracepoint_doctor: Vec<serde_json::Value>,
    /// `nri-trace write-cost`'s JSON lines, every round and backend.
    pub(crate) write_cost: Vec<serde_json::Value>,
    /// What the binaries wrote to stderr.
    pub(crate) stderr: String,
    /// From qemu's start to its exit.
    pub(crate) boot_ms: u128,
    /// The console's last lines when something failed.
    pub(crate) console_tail: String,
}

impl KernelRun {
    pub(crate) fn passed(&self) -> bool {
        let ok = |checks: &[serde_json::Value]| {
            SELF_TESTS
                .iter()
                .all(|name| check_field(checks, name, "status") == Some("ok"))
        };
        self.doctor_rc == Some(0)
            && self.tracepoint_doctor_rc == Some(0)
            && ok(&self.doctor)
            && ok(&self.tracepoint_doctor)
    }

    /// The status doctor gave check `name`.
    pub(crate) fn check_status(&self, name: &str) -> Option<&str> {
        check_field(&self.doctor, name, "status")
    }

    /// The backend the auto run captured on (the first word of its
    /// `capture backend` check).
    fn backend(&self) -> &str {
        check_field(&self.doctor, "capture backend", "detail")
            .and_then(|d| d.split(':').next())
            .unwrap_or("none")
    }
}

pub(crate) fn run_kernels(a: &KernelsArgs) -> Result<()> {
    let bin = match &a.bin {
        Some(b) => b.clone(),
        None => crate::dist::run_dist()?,
    };
    let runs = boot_all(&a.kernel, &bin, a.verbose, a.write_cost_rounds)?;
    if let Some(path) = &a.report {
        fs::write(path, serde_json::to_vec_pretty(&runs)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    println!(
        "\nkernel  package                                   backend     doctor  capture  sandbox  \
         boot"
    );
    for r in &runs {
        println!(
            "{:<7} {:<41} {:<11} {:<7} {:<8} {:<8} {:.1} s",
            r.kernel,
            format!("{} {}", r.package, r.version),
            r.backend(),
            rc_text(r.doctor_rc),
            r.check_status("capture self-test").unwrap_or("none"),
            r.check_status("sandbox probes self-test").unwrap_or("none"),
            r.boot_ms as f64 / 1000.0
        );
    }
    let failed: Vec<&str> = runs
        .iter()
        .filter(|r| !r.passed())
        .map(|r| r.kernel.as_str())
        .collect();
    if !failed.is_empty() {
        bail!("failed on {}: see the output above", failed.join(", "));
    }
    Ok(())
}

/// Field `field` of doctor check `name` in `checks`.
fn check_field<'a>(checks: &'a [serde_json::Value], name: &str, field: &str) -> Option<&'a str> {
    checks
        .iter()
        .find(|c| c["name"] == name)
        .and_then(|c| c[field].as_str())
}

fn rc_text(rc: Option<i32>) -> String {
    match rc {
        Some(0) => "ok".into(),
        Some(n) => format!("FAIL {n}"),
        None => "none".into(),
    }
}

/// Prepare and boot `which` ("all" or one series) with `bin`, with
/// `write_cost_rounds` rounds of `write-cost` after doctor.
pub(crate) fn boot_all(
    which: &str,
    bin: &Path,
    verbose: bool,
    write_cost_rounds: u32,
) -> Result<Vec<KernelRun>> {
    ensure_qemu()?;
    let cache = cache_dir();
    fs::create_dir_all(&cache).with_context(|| format!("creating {}", cache.display()))?;
    let base = base_initrd(&cache)?;
    let mut runs = Vec::new();
    for k in KERNELS.iter().filter(|k| which == "all" || which == k.name) {
        let (vmlinux, package, version) = kernel_image(&cache, k)?;
        println!("== {} ({package} {version})", k.name);
        let script = test_script(verbose, write_cost_rounds);
        let r = boot(k, &vmlinux, &base, bin, &package, &version, &script)?;
        print_run(&r);
        runs.push(r);
    }
    Ok(runs)
}

fn print_run(r: &KernelRun) {
    println!("uname -r: {}", r.uname);
    for line in &r.doctor {
        println!("  {line}");
    }
    println!("  --backend tracepoint:");
    for line in &r.tracepoint_doctor {
        println!("  {line}");
    }
    if !r.stderr.trim().is_empty() {
        println!("stderr:\n{}", r.stderr.trim_end());
    }
    if !r.passed() {
        println!("console (last lines):\n{}", r.console_tail);
    }
}

/// qemu-system-x86, installed once (--no-install-recommends: no firmware
/// or display packages; `-kernel` needs no BIOS image beyond its own).
fn ensure_qemu() -> Result<()> {
    if Command::new("qemu-system-x86_64")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
    {
        return Ok(());
    }
    let install = || {
        run(Command::new("apt-get")
            .args([
                "install",
                "-y",
                "-q",
                "--no-install-recommends",
                "qemu-system-x86",
            ])
            .env("DEBIAN_FRONTEND", "noninteractive"))
    };
    // A fresh machine's package lists may be missing or stale: update
    // them once and try again.
    install()
        .or_else(|_| {
            run(Command::new("apt-get").args(["update", "-q"]))?;
            install()
        })
        .context("installing qemu-system-x86 (are you root?)")
}

/// A private apt configuration with one source, under `cache/apt/<suite>`;
/// returns its apt.conf for APT_CONFIG.
fn private_apt(cache: &Path, uri: &str, suite: &str) -> Result<PathBuf> {
    let dir = cache.join("apt").join(suite);
    let conf = dir.join("apt.conf");
    let lists = dir.join("state/lists");
    for d in [
        dir.join("etc/apt.conf.d"),
        dir.join("etc/sources.list.d"),
        dir.join("etc/preferences.d"),
        lists.join("partial"),
        dir.join("cache/archives/partial"),
    ] {
        fs::create_dir_all(&d).with_context(|| format!("creating {}", d.display()))?;
    }
    let d = dir.display();
    fs::write(dir.join("status"), "")?;
    fs::write(dir.join("etc/apt.conf"), "")?;
    fs::write(
        dir.join("etc/sources.list"),
        format!(
            "# nri-trace kernels harness (private apt config)\n\
             deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] {uri} {suite} main\n"
        ),
    )?;
    let arch = crate::dist::output(Command::new("dpkg").arg("--print-architecture"))?;
    fs::write(
        &conf,
        format!(
            "Dir::Etc::main \"{d}/etc/apt.conf\";\n\
             Dir::Etc::parts \"{d}/etc/apt.conf.d\";\n\
             Dir::Etc::sourcelist \"{d}/etc/sources.list\";\n\
             Dir::Etc::sourceparts \"{d}/etc/sources.list.d\";\n\
             Dir::Etc::preferences \"{d}/etc/preferences\";\n\
             Dir::Etc::preferencesparts \"{d}/etc/preferences.d\";\n\
             Dir::State \"{d}/state\";\n\
             Dir::State::status \"{d}/status\";\n\
             Dir::Cache \"{d}/cache\";\n\
             APT::Architecture \"{arch}\";\n\
             Acquire::Languages \"none\";\n\
             APT::Sandbox::User \"root\";\n\
             // This machine kind's clock runs ahead of the archive's\n\
             // Release dates (as in lab/lab.sh).\n\
             Acquire::Check-Valid-Until \"false\";\n\
             Acquire::Check-Date \"false\";\n"
        ),
    )?;
    let fresh = fs::read_dir(&lists)?
        .flatten()
        .any(|e| e.file_name().to_string_lossy().ends_with("_Packages"));
    if !fresh {
        run(Command::new("apt-get")
            .args(["update", "-q"])
            .env("APT_CONFIG", &conf)
            .stdout(Stdio::null()))
        .with_context(|| format!("apt-get update of {suite} (private apt config {d}/apt.conf)"))?;
    }
    Ok(conf)
}

fn apt_output(conf: &Path, args: &[&str]) -> Result<String> {
    crate::dist::output(Command::new("apt-cache").args(args).env("APT_CONFIG", conf))
}

/// Download package `name` (its candidate) into `dir` and unpack it under
/// `dir/root`; returns its version.
fn fetch_unpack(conf: &Path, name: &str, dir: &Path) -> Result<String> {
    let version = candidate(conf, name)?;
    let debs = dir.join("debs");
    let _ = fs::remove_dir_all(dir);
    fs::create_dir_all(&debs)?;
    run(Command::new("apt-get")
        .args(["download", "-q", &format!("{name}={version}")])
        .current_dir(&debs)
        .env("APT_CONFIG", conf)
        .stdout(Stdio::null()))
    .with_context(|| format!("apt-get download {name}={version}"))?;
    let deb = fs::read_dir(&debs)?
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "deb"))
        .with_context(|| format!("apt-get download {name} left no .deb"))?;
    run(Command::new("dpkg-deb")
        .arg("-x")
        .arg(&deb)
        .arg(dir.join("root")))
    .with_context(|| format!("dpkg-deb -x {}", deb.display()))?;
    fs::remove_file(&deb)?;
    Ok(version)
}

fn candidate(conf: &Path, name: &str) -> Result<String> {
    let policy = apt_output(conf, &["policy", name])?;
    policy
        .lines()
        .find_map(|l| l.trim().strip_prefix("Candidate:"))
        .map(|v| v.trim().to_owned())
        .filter(|v| v != "(none)")
        .with_context(|| format!("no candidate for {name}: {policy}"))
}

/// The newest `linux-image-<series>.*-amd64-unsigned` of the kernel's
/// suite, its vmlinux extracted; cached (delete the dir to refetch).
fn kernel_image(cache: &Path, k: &Kernel) -> Result<(PathBuf, String, String)> {
    let dir = cache.join(k.name);
    let vmlinux = dir.join("vmlinux");
    let meta = dir.join("package");
    if vmlinux.exists() {
        if let Ok(m) = fs::read_to_string(&meta) {
            if let Some((p, v)) = m.trim().split_once(' ') {
                return Ok((vmlinux, p.to_owned(), v.to_owned()));
            }
        }
    }
    let conf = private_apt(cache, k.uri, k.suite)?;
    let prefix = format!("linux-image-{}.", k.name);
    let names = apt_output(&conf, &["pkgnames", &prefix])?;
    // The -unsigned package holds the same image as the signed one and
    // exists for every ABI (bullseye through trixie).
    let mut best: Option<(String, String)> = None;
    for name in names
        .lines()
        .filter(|n| n.ends_with("-amd64-unsigned") && !n.contains("-rt-") && !n.contains("-dbg"))
    {
        let v = candidate(&conf, name)?;
        let newer = match &best {
            None => true,
            Some((_, bv)) => Command::new("dpkg")
                .args(["--compare-versions", &v, "gt", bv])
                .status()?
                .success(),
        };
        if newer {
            best = Some((name.to_owned(), v));
        }
    }
    let (package, _) = best.with_context(|| {
        format!(
            "{}: no {prefix}*-amd64-unsigned package in {}",
            k.name, k.suite
        )
    })?;
    println!("fetching {package} from {}", k.suite);
    let work = cache.join(format!("{}.tmp", k.name));
    let version = fetch_unpack(&conf, &package, &work)?;
    let boot = work.join("root/boot");
    let bz = fs::read_dir(&boot)
        .with_context(|| format!("{package} has no /boot"))?
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("vmlinuz-"))
        })
        .with_context(|| format!("{package} has no /boot/vmlinuz-*"))?;
    let elf = extract_vmlinux(&fs::read(&bz)?)
        .with_context(|| format!("extracting vmlinux from {}", bz.display()))?;
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir)?;
    fs::write(&vmlinux, elf)?;
    fs::write(&meta, format!("{package} {version}\n"))?;
    fs::remove_dir_all(&work)?;
    Ok((vmlinux, package, version))
}

/// The uncompressed kernel ELF inside a bzImage: find a compressed
/// stream's magic and inflate from there, as the kernel's
/// scripts/extract-vmlinux does (Debian compresses with xz on 5.10 and
/// 6.1, zstd on later ones; gzip is tried too).
fn extract_vmlinux(bz: &[u8]) -> Result<Vec<u8>> {
    const FORMATS: &[(&[u8], &str)] = &[
        (&[0xfd, b'7', b'z', b'X', b'Z', 0x00], "xz"),
        (&[0x28, 0xb5, 0x2f, 0xfd], "zstd"),
        (&[0x1f, 0x8b, 0x08], "gzip"),
    ];
    for (magic, tool) in FORMATS {
        let mut from = 0;
        while let Some(pos) = find(&bz[from..], magic).map(|p| p + from) {
            from = pos + 1;
            let mut child = Command::new(tool)
                .args(["-dc"])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .with_context(|| format!("running {tool}"))?;
            let mut stdin = child.stdin.take().context("stdin")?;
            let data = bz[pos..].to_vec();
            // Fed from a thread: the decompressor's output fills its pipe
            // long before all input is written.
            let feeder = std::thread::spawn(move || {
                let _ = stdin.write_all(&data);
            });
            // Trailing bytes after the stream make the tools complain and
            // exit non-zero; the ELF they wrote first is what counts.
            let out = child.wait_with_output()?;
            let _ = feeder.join();
            if out.stdout.starts_with(b"\x7fELF") {
                return Ok(out.stdout);
            }
        }
    }
    bail!("no xz, zstd or gzip stream holding an ELF")
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// The /init of the base initrd: mount what nri-trace needs, run the
/// per-run layer's /test.sh, power off.
const INIT: &str = r"#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mkdir -p /proc /sys /dev /tmp /run
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tracefs tracefs /sys/kernel/tracing
mount -t bpf bpf /sys/fs/bpf
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /run
/bin/sh /test.sh
sync
poweroff -f
";

/// The per-run test: doctor on the backend `--backend auto` picks, then
/// on the tracepoint backend, then `write_cost_rounds` rounds of
/// `write-cost` (no probes, tracepoint, fentry); each section starts with
/// MARK on the second serial port (the console is the first).
fn test_script(verbose: bool, write_cost_rounds: u32) -> String {
    let log = if verbose { "RUST_LOG=debug " } else { "" };
    format!(
        r#"out=/dev/ttyS1
{{
# doctor's untraced-writes check writes to a TCP socket on 127.0.0.1.
ifconfig lo 127.0.0.1 up
echo "{MARK} uname"
uname -r
echo "{MARK} doctor"
{log}/nri-trace doctor -o json 2>/tmp/doctor.err
echo "{MARK} doctor-rc $?"
echo "{MARK} doctor-tracepoint"
{log}/nri-trace doctor --backend tracepoint -o json 2>>/tmp/doctor.err
echo "{MARK} doctor-tracepoint-rc $?"
echo "{MARK} write-cost"
for r in $(seq 1 {write_cost_rounds}); do
  for p in none tracepoint fentry; do
    /nri-trace write-cost --probes $p 2>>/tmp/doctor.err
  done
done
echo "{MARK} stderr"
cat /tmp/doctor.err
echo "{MARK} end"
}} >$out 2>&1
"#
    )
}

/// The cached base initrd (busybox and /init), rebuilt when /init changes.
fn base_initrd(cache: &Path) -> Result<PathBuf> {
    let out = cache.join("base.cpio");
    let stamp = cache.join("base.init");
    if out.exists() && fs::read_to_string(&stamp).is_ok_and(|s| s == INIT) {
        return Ok(out);
    }
    let (uri, suite) = BUSYBOX_SUITE;
    let conf = private_apt(cache, uri, suite)?;
    let work = cache.join("busybox.tmp");
    fetch_unpack(&conf, "busybox-static", &work)?;
    let busybox =
        fs::read(work.join("root/bin/busybox")).context("busybox-static has no /bin/busybox")?;
    let mut c = Cpio::default();
    for d in ["bin", "dev", "proc", "sys", "tmp", "run"] {
        c.dir(d);
    }
    c.file("bin/busybox", 0o755, &busybox);
    c.file("init", 0o755, INIT.as_bytes());
    fs::write(&out, c.finish())?;
    fs::write(&stamp, INIT)?;
    fs::remove_dir_all(&work)?;
    Ok(out)
}

/// Boot `vmlinux` with the base initrd plus a layer holding `bin`.
fn boot(
    k: &Kernel,
    vmlinux: &Path,
    base: &Path,
    bin: &Path,
    package: &str,
    version: &str,
    script: &str,
) -> Result<KernelRun> {
    let dir = crate::workspace_root().join("target/kernels").join(k.name);
    fs::create_dir_all(&dir)?;
    let mut layer = Cpio::default();
    layer.file(
        "nri-trace",
        0o755,
        &fs::read(bin).with_context(|| format!("reading {}", bin.display()))?,
    );
    layer.file("test.sh", 0o755, script.as_bytes());
    let initrd = dir.join("initrd");
    let mut all = fs::read(base)?;
    all.extend_from_slice(&layer.finish());
    fs::write(&initrd, all)?;
    let console = dir.join("console.log");
    let results = dir.join("results.log");
    let _ = fs::remove_file(&results);
    let start = Instant::now();
    let mut child = Command::new("qemu-system-x86_64")
        // /dev/kvm here lacks vmx/svm (TOOLCHAIN-AND-LAB-FACTS.md): tcg.
        .args(["-accel", "tcg", "-m", "1024", "-smp", "1"])
        .args(["-nodefaults", "-no-reboot", "-display", "none"])
        .arg("-kernel")
        .arg(vmlinux)
        .arg("-initrd")
        .arg(&initrd)
        .args(["-append", "console=ttyS0 panic=-1 quiet"])
        .arg("-serial")
        .arg(format!("file:{}", console.display()))
        .arg("-serial")
        .arg(format!("file:{}", results.display()))
        .stdin(Stdio::null())
        .spawn()
        .context("starting qemu-system-x86_64")?;
    let status = loop {
        if let Some(s) = child.try_wait()? {
            break Some(s);
        }
        if start.elapsed() > BOOT_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let boot_ms = start.elapsed().as_millis();
    let text = fs::read_to_string(&results).unwrap_or_default();
    let mut r = parse_results(&text);
    k.name.clone_into(&mut r.kernel);
    package.clone_into(&mut r.package);
    version.clone_into(&mut r.version);
    r.boot_ms = boot_ms;
    if status.is_none() {
        r.stderr
            .push_str(&format!("qemu did not power off within {BOOT_TIMEOUT:?}\n"));
    }
    if !r.passed() {
        let con = fs::read_to_string(&console).unwrap_or_default();
        let lines: Vec<&str> = con.lines().collect();
        r.console_tail = lines[lines.len().saturating_sub(30)..].join("\n");
    }
    Ok(r)
}

fn parse_results(text: &str) -> KernelRun {
    let mut r = KernelRun {
        kernel: String::new(),
        package: String::new(),
        version: String::new(),
        uname: String::new(),
        doctor_rc: None,
        doctor: Vec::new(),
        tracepoint_doctor_rc: None,
        tracepoint_doctor: Vec::new(),
        write_cost: Vec::new(),
        stderr: String::new(),
        boot_ms: 0,
        console_tail: String::new(),
    };
    let mut section = "";
    for line in text.lines() {
        let line = line.trim_end_matches('\r');
        if let Some(rest) = line.strip_prefix(MARK) {
            let mut it = rest.split_whitespace();
            let word = it.next().unwrap_or_default();
            let rc = it.next().and_then(|n| n.parse().ok());
            section = match word {
                "doctor-rc" => {
                    r.doctor_rc = rc;
                    ""
                }
                "doctor-tracepoint-rc" => {
                    r.tracepoint_doctor_rc = rc;
                    ""
                }
                "uname" => "uname",
                "doctor" => "doctor",
                "doctor-tracepoint" => "doctor-tracepoint",
                "write-cost" => "write-cost",
                "stderr" => "stderr",
                _ => "",
            };
            continue;
        }
        match section {
            "uname" => line.clone_into(&mut r.uname),
            "doctor" => r.doctor.push(json_line(line)),
            "doctor-tracepoint" => r.tracepoint_doctor.push(json_line(line)),
            "write-cost" => r.write_cost.push(json_line(line)),
            "stderr" => {
                r.stderr.push_str(line);
                r.stderr.push('\n');
            }
            _ => {}
        }
    }
    r
}

/// A JSON line, or the line as a string where it is not JSON.
fn json_line(line: &str) -> serde_json::Value {
    serde_json::from_str(line).unwrap_or_else(|_| serde_json::Value::String(line.to_owned()))
}

/// A cpio archive in the "newc" format the kernel's initramfs unpacker
/// reads (Documentation/driver-api/early-userspace/buffer-format.rst).
#[derive(Default)]
struct Cpio {
    out: Vec<u8>,
    ino: u32,
}

impl Cpio {
    fn entry(&mut self, name: &str, mode: u32, data: &[u8]) {
        self.ino += 1;
        let namesize = name.len() + 1;
        let header = format!(
            "070701{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}",
            self.ino,
            mode,
            0,
            0,
            1,
            0,
            data.len(),
            0,
            0,
            0,
            0,
            namesize,
            0
        );
        self.out.extend_from_slice(header.as_bytes());
        self.out.extend_from_slice(name.as_bytes());
        self.out.push(0);
        self.pad();
        self.out.extend_from_slice(data);
        self.pad();
    }

    fn pad(&mut self) {
        while !self.out.len().is_multiple_of(4) {
            self.out.push(0);
        }
    }

    fn dir(&mut self, name: &str) {
        self.entry(name, 0o040_755, &[]);
    }

    fn file(&mut self, name: &str, perm: u32, data: &[u8]) {
        self.entry(name, 0o100_000 | perm, data);
    }

    fn finish(mut self) -> Vec<u8> {
        self.ino = 0;
        self.entry("TRAILER!!!", 0, &[]);
        self.out
    }
}
