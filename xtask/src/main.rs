//! Developer tasks for nri-trace: `cargo xtask <setup|build|dist|image|kernels|test|bench|fuzz|lab|cluster>`.
//!
//! The eBPF crate cannot be built by the rustup toolchain on these machines
//! (no rust-src, so no `-Z build-std`): it is built by Debian's rustc-web,
//! which ships a prebuilt `core` for bpfel-unknown-none, and linked by
//! bpf-linker against Debian's LLVM 22. See docs/building.md.

mod bench;
mod beside;
mod build_cache;
mod cluster;
mod cluster_cost;
mod cluster_steady;
mod dist;
mod exec_cost;
mod fuzz;
mod kernels;
mod lab;
mod nri_rate;
mod setup;
mod test_failures;
mod tiers;

use std::{
    env,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand, ValueEnum};

#[derive(Parser)]
#[command(name = "xtask", about = "nri-trace developer tasks")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Install the build prerequisites (Debian packages, bpf-linker); idempotent.
    Setup,
    /// Build the eBPF object and the nri-trace binary that embeds it.
    Build {
        /// Build the userspace binary in debug mode.
        #[arg(long)]
        debug: bool,
    },
    /// The static, stripped x86_64 binary with the eBPF object embedded,
    /// and its sha256, in target/dist/ (docs/building.md, "Distributing").
    Dist,
    /// `dist`, then the binary in an OCI image layout tar for `ctr images
    /// import`, built offline (deploy/README.md).
    Image,
    /// The static binary's `doctor` and capture self-test on Debian's
    /// kernels 5.10, 6.1 and 6.12, each booted in qemu (docs/kernels.md).
    Kernels(kernels::KernelsArgs),
    /// Check formatting and the workspace lints (clippy, warnings denied).
    Lint {
        /// Clippy alone, no formatting check.
        #[arg(long)]
        clippy_only: bool,
        /// Clippy's target directory (default: the workspace's).
        #[arg(long)]
        target_dir: Option<PathBuf>,
    },
    /// Run every test: setup, the lints, build, unit tests, the
    /// root/eBPF/lab tests, the kernels, and a 3 s smoke of every fuzz
    /// target (NRI_TRACE_SKIP_FUZZ=1 skips it outside CI).
    Test {
        /// Only these parts (repeatable; default: every tier, as CI runs).
        #[arg(long, value_enum)]
        tier: Vec<tiers::Tier>,
        /// Extra arguments passed to `cargo test` (after `--`).
        #[arg(last = true)]
        args: Vec<String>,
    },
    /// Run the benchmarks and print the tables for docs/benchmarks.md.
    Bench(bench::BenchArgs),
    /// Coverage-guided fuzzing (cargo-fuzz): build every target and run
    /// each for a while; fails on a crash, a hang or unbounded memory
    /// (docs/fuzzing.md).
    Fuzz(fuzz::FuzzArgs),
    /// The self-contained demo: the lab (private containerd, NRI plugins,
    /// kubelet-like driver) traced live by nri-trace.
    Demo {
        /// Extra arguments for `nri-trace watch` (e.g. -o json).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// The lab: a private containerd or CRI-O with NRI, and its scenarios.
    Lab {
        /// The runtime: containerd-1.7, containerd-2.1, containerd-2.2,
        /// containerd-2.3 (default) or crio (sets NRI_TRACE_LAB_RUNTIME
        /// for lab.sh and the scenario runner).
        #[arg(
            long,
            value_parser = ["containerd-1.7", "containerd-2.1", "containerd-2.2", "containerd-2.3", "crio"]
        )]
        runtime: Option<String>,
        #[command(subcommand)]
        cmd: lab::LabCmd,
    },
    /// A one-node Kubernetes cluster (etcd, the API server, the
    /// controller manager, the scheduler, kubelet) on the lab's runtime
    /// (docs/cluster.md).
    Cluster {
        /// The node's runtime: containerd-2.3 (default), containerd-2.2 or
        /// crio.
        #[arg(long, value_parser = ["containerd-2.2", "containerd-2.3", "crio"])]
        runtime: Option<String>,
        #[command(subcommand)]
        cmd: cluster::ClusterCmd,
    },
    /// Run `nri-trace` (built by `cargo xtask build`) with these arguments.
    Run {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Setup => setup::run(),
        Cmd::Build { debug } => build(!debug).map(|_| ()),
        Cmd::Dist => dist::run_dist().map(|_| ()),
        Cmd::Image => dist::run_image().map(|_| ()),
        Cmd::Kernels(a) => kernels::run_kernels(&a),
        Cmd::Lint {
            clippy_only,
            target_dir,
        } => lint(clippy_only, target_dir.as_deref()),
        Cmd::Test { tier, args } => test(&tier, &args),
        Cmd::Bench(a) => bench::run(a),
        Cmd::Fuzz(a) => fuzz::run_fuzz(&a),
        Cmd::Lab { runtime, cmd } => lab::run_lab(cmd, runtime.as_deref()),
        Cmd::Demo { args } => lab::demo(&args),
        Cmd::Cluster { runtime, cmd } => cluster::run_cluster(cmd, runtime.as_deref()),
        Cmd::Run { args } => {
            let bin = build(true)?;
            let status = Command::new(bin).args(args).status()?;
            std::process::exit(status.code().unwrap_or(1));
        }
    }
}

pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_path_buf()
}

/// Where `build_ebpf` builds: target/bpf, or under CI the kept
/// directory (build_cache.rs: its 35 crates, 42 s of ci25's build).
fn ebpf_target_dir() -> PathBuf {
    build_cache::target_dir("bpf", "target/bpf")
}

/// Where `build_ebpf` leaves the object.
pub fn ebpf_object() -> PathBuf {
    ebpf_target_dir().join("bpfel-unknown-none/release/nri-trace-ebpf")
}

/// Build the eBPF programs with Debian's toolchain.
pub fn build_ebpf() -> Result<PathBuf> {
    setup::check_toolchain()?;
    let root = workspace_root();
    let cargo_home = env::var("CARGO_HOME").map_or_else(
        |_| PathBuf::from(env::var("HOME").unwrap_or_default()).join(".cargo"),
        PathBuf::from,
    );
    // /usr/bin first so that Debian's cargo/rustc win over rustup's proxies;
    // bpf-linker lives in CARGO_HOME/bin.
    let path = format!(
        "/usr/bin:/bin:/usr/sbin:/sbin:{}",
        cargo_home.join("bin").display()
    );
    let target_dir = ebpf_target_dir();
    build_cache::forget_members_if_kept(
        &target_dir,
        &root.join("nri-trace-ebpf/Cargo.toml"),
        &["nri-trace-ebpf", "nri-trace-common"],
        &["--target", "bpfel-unknown-none", "--release"],
    )?;
    let mut cmd = Command::new("/usr/bin/cargo");
    cmd.current_dir(root.join("nri-trace-ebpf"))
        .args(["build", "--release", "--target", "bpfel-unknown-none"])
        .arg("--target-dir")
        .arg(&target_dir)
        .env("PATH", path)
        .env("RUSTC", "/usr/bin/rustc")
        // aya-ebpf needs #![feature(asm_experimental_arch)]: unlock exactly
        // that crate on the stable rustc-web.
        .env("RUSTC_BOOTSTRAP", "aya_ebpf")
        .env(
            "CARGO_ENCODED_RUSTFLAGS",
            ["-C", "debuginfo=2", "-C", "link-arg=--btf"].join("\x1f"),
        );
    for var in [
        "RUSTUP_TOOLCHAIN",
        "RUSTC_WRAPPER",
        "RUSTFLAGS",
        "CARGO_BUILD_TARGET",
        "CARGO_TARGET_DIR",
        "CARGO",
        "RUSTDOC",
    ] {
        cmd.env_remove(var);
    }
    run(&mut cmd).context("building the eBPF programs (nri-trace-ebpf)")?;
    let obj = ebpf_object();
    if !obj.exists() {
        bail!("the eBPF build succeeded but {} is missing", obj.display());
    }
    Ok(obj)
}

/// Build the eBPF object, then the userspace binary embedding it.
pub fn build(release: bool) -> Result<PathBuf> {
    let obj = build_ebpf()?;
    let mut cmd = cargo();
    cmd.args(["build", "-p", "nri-trace", "--bins"]);
    if release {
        cmd.arg("--release");
    }
    cmd.env("NRI_TRACE_EBPF_OBJ", &obj);
    run(&mut cmd).context("building nri-trace")?;
    let profile = if release { "release" } else { "debug" };
    Ok(workspace_root()
        .join("target")
        .join(profile)
        .join("nri-trace"))
}

/// Release builds of the lab's binaries `bins` (a benchmark's peers);
/// the directory they are in.
pub fn release_lab_bins(bins: &[&str]) -> Result<PathBuf> {
    let mut cmd = cargo();
    cmd.args(["build", "--release", "-p", "nri-trace-lab"]);
    for b in bins {
        cmd.args(["--bin", b]);
    }
    run(&mut cmd)
        .with_context(|| format!("building the lab's {} (lab/src/bin/)", bins.join(", ")))?;
    Ok(workspace_root().join("target/release"))
}

fn test(tiers: &[tiers::Tier], extra: &[String]) -> Result<()> {
    use tiers::Tier;
    let ci = under_ci();
    let mut tiers = if tiers.is_empty() {
        Tier::value_variants().to_vec()
    } else {
        tiers.to_vec()
    };
    tiers.sort();
    tiers.dedup();
    if ci || !setup::toolchain_ready() {
        setup::run()?;
    }
    // With the lab tier and NRI_TRACE_BESIDE=1, the long builds go beside
    // it (beside.rs): the tests leave most of the CPU idle. Not by default:
    // the first CI-like run with them (stop 39) failed three lab tests
    // that a busy machine breaks (docs/benchmarks.md, "The suite").
    let beside = tiers.contains(&Tier::Lab) && beside::wanted();
    let fuzz_smoke = tiers.contains(&Tier::Fuzz) && fuzz::smoke_wanted(ci);
    if tiers.contains(&Tier::Lint) {
        fmt_check()?;
    }
    // The lab's Go peers build from their modules while the Rust side
    // builds: on a machine that never built them they took 18 of the
    // lab tier's 50 minutes in the cold runs ci18/ci19 (beside.rs). After
    // the format check, the quickest way to fail: a suite that fails once
    // they started waits for them (their scripts run dpkg).
    let mut peers = if tiers.contains(&Tier::Lab) {
        Some(beside::Beside::start_peers()?)
    } else {
        None
    };
    // Kubernetes for the cluster test, the lab tier's last: at the lowest
    // priority from the start, on what the builds and the tests leave idle
    // (a no-op once built).
    let mut late_peers = if tiers.contains(&Tier::Lab) {
        Some(beside::Beside::start_late_peers()?)
    } else {
        None
    };
    if tiers.contains(&Tier::Lint) && !beside {
        clippy(Some(&build_cache::target_dir("clippy", "target")))?;
    }
    // The tiers that run test executables (not lint or fuzz).
    let runs_tests = tiers
        .iter()
        .any(|t| matches!(t, Tier::Unit | Tier::Lab | Tier::Kernels));
    let obj = if runs_tests {
        build_ebpf()?;
        Some(ebpf_object())
    } else {
        None
    };
    // tests/tests/kernels.rs runs this very executable's `kernels`.
    let me = env::current_exe().context("finding the xtask executable")?;
    let mut envs: Vec<(&str, &Path)> = vec![("NRI_TRACE_XTASK_BIN", &me)];
    if let Some(o) = &obj {
        envs.push(("NRI_TRACE_EBPF_OBJ", o));
    }
    let bins = if runs_tests {
        tiers::build_tests(&envs)?
    } else {
        Vec::new()
    };
    // The dist binary, for tests/tests/dist.rs (it runs it from an empty
    // root) and tests/tests/kernels.rs (it boots it in qemu on Debian's
    // kernels through this xtask's `kernels`, docs/kernels.md): a release
    // build of its own, 4.6 min in the ci8 run.
    let mut dist = Dist::None;
    let mut lints = None;
    let mut fuzz_build = None;
    if beside {
        if tiers.contains(&Tier::Lint) {
            let dir = build_cache::target_dir("clippy", "target/clippy");
            lints = Some(beside::Beside::start(
                "clippy",
                "clippy (warnings denied)",
                &[
                    "lint",
                    "--clippy-only",
                    "--target-dir",
                    &dir.to_string_lossy(),
                ],
            )?);
        }
        dist = Dist::Beside(beside::Beside::start("dist", "the dist binary", &["dist"])?);
    } else if tiers::need_dist(&tiers) {
        dist = Dist::Built(dist::run_dist()?);
    }
    // The fuzz targets' build beside the unit and lab tiers, at the lowest
    // priority, whenever the lab tier runs: the lab tier leaves most of
    // the CPU idle, and Kubernetes' build (the late peers) has run beside
    // it the same way in every run since stop 49 without a test minding.
    // In line after the lab tier it took 473 s from nothing in the cold
    // run ci29 and 137 s warm (docs/benchmarks.md, "The suite").
    if fuzz_smoke && (beside || tiers.contains(&Tier::Lab)) {
        fuzz_build = Some(beside::Beside::start(
            "fuzz-build",
            "the fuzz targets' build",
            &[
                "fuzz",
                "--no-run",
                "--codegen-units",
                &fuzz::SMOKE_CODEGEN_UNITS.to_string(),
            ],
        )?);
    }
    for &tier in &tiers {
        if tier == Tier::Lab {
            if let Some(p) = peers.take() {
                // Not fatal: a test that needs a peer that failed builds
                // it again and fails in its own words.
                if let Err(e) = p.wait() {
                    println!("{e:#}; the lab tier's tests build what they need themselves");
                }
            }
        }
        let mut failed = tiers::run_bins(tier, &bins, false, &envs, extra)?;
        if bins.iter().any(|b| b.tier() == tier && b.runs_dist()) {
            if tier == Tier::Lab {
                if let Some(p) = late_peers.take() {
                    // As the peers: the cluster test builds it again and
                    // fails in its own words.
                    if let Err(e) = p.wait() {
                        println!("{e:#}; the cluster test builds it itself");
                    }
                }
            }
            let bin = dist.wait()?;
            let mut with_dist = envs.clone();
            with_dist.push(("NRI_TRACE_DIST_BIN", &bin));
            failed.extend(tiers::run_bins(tier, &bins, true, &with_dist, extra)?);
        }
        tiers::fail_tier(tier, &failed)?;
    }
    if let Some(l) = lints {
        l.wait()?;
    }
    if tiers.contains(&Tier::Fuzz) {
        if fuzz_smoke {
            let prebuilt = match fuzz_build {
                Some(b) => {
                    b.wait()?;
                    true
                }
                None => false,
            };
            fuzz::smoke(ci, prebuilt).with_context(|| {
                format!(
                    "the fuzz smoke (cargo xtask fuzz --seconds {})",
                    fuzz::SMOKE_SECONDS
                )
            })?;
        } else {
            println!("SKIP fuzz smoke: NRI_TRACE_SKIP_FUZZ=1");
        }
    }
    Ok(())
}

/// The dist binary of a test run: not wanted, built in line, or building
/// beside the tests.
enum Dist {
    None,
    Built(PathBuf),
    Beside(beside::Beside),
}

impl Dist {
    /// Its path, waiting for it if it is still building.
    fn wait(&mut self) -> Result<PathBuf> {
        match std::mem::replace(self, Dist::None) {
            Dist::None => bail!("the tests want the dist binary, and it was not built"),
            Dist::Built(p) => {
                *self = Dist::Built(p.clone());
                Ok(p)
            }
            Dist::Beside(b) => {
                b.wait()?;
                let p = dist::built()?;
                *self = Dist::Built(p.clone());
                Ok(p)
            }
        }
    }
}

/// `cargo fmt --check` and clippy with the workspace lints (Cargo.toml,
/// `[workspace.lints]`) as errors: a lint that passes locally and fails
/// here fails CI, not a later reader.
fn lint(clippy_only: bool, target_dir: Option<&Path>) -> Result<()> {
    if !clippy_only {
        fmt_check()?;
    }
    clippy(target_dir)
}

fn fmt_check() -> Result<()> {
    run(cargo().args(["fmt", "--all", "--check"]))
        .context("cargo fmt --check: run `cargo fmt --all` (rustup component rustfmt)")?;
    // fuzz/ is its own workspace (docs/fuzzing.md): `--all` does not reach
    // it. Formatting needs no build; its clippy would need the instrumented
    // one, which `cargo xtask fuzz` makes.
    run(cargo().args(["fmt", "--manifest-path", "fuzz/Cargo.toml", "--check"]))
        .context("cargo fmt --check of fuzz/: run `cargo fmt --manifest-path fuzz/Cargo.toml`")
}

/// Clippy over the workspace, in `target_dir` if given (beside the tests:
/// its own, so it never waits on the test build's lock).
fn clippy(target_dir: Option<&Path>) -> Result<()> {
    let mut cmd = cargo();
    cmd.args(["clippy", "--workspace", "--all-targets"]);
    if let Some(d) = target_dir {
        build_cache::forget_members_if_kept(
            d,
            &workspace_root().join("Cargo.toml"),
            build_cache::WORKSPACE_MEMBERS,
            &[],
        )?;
        cmd.arg("--target-dir").arg(d);
    }
    cmd.args(["--", "-D", "warnings"]);
    run(&mut cmd).context("cargo clippy: fix the warnings above (rustup component clippy)")
}

/// CI=true (or 1): as CI runs, where what a test needs must be there.
pub(crate) fn under_ci() -> bool {
    env::var("CI").is_ok_and(|v| v == "true" || v == "1")
}

/// The user's cargo (rustup), for host crates.
pub fn cargo() -> Command {
    let mut c = Command::new(env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    c.current_dir(workspace_root());
    c
}

pub fn run(cmd: &mut Command) -> Result<()> {
    let status = cmd
        .status()
        .with_context(|| format!("running {}", cmd.get_program().display()))?;
    if !status.success() {
        bail!("{} failed: {status}", cmd.get_program().display());
    }
    Ok(())
}
