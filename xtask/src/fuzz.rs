//! `cargo xtask fuzz`: coverage-guided fuzzing of the decoders and file
//! readers with cargo-fuzz / libFuzzer (fuzz/, docs/fuzzing.md).
//!
//! cargo-fuzz passes nightly flags (-Zsanitizer=address, -Cpasses=sancov-
//! module, ...); the toolchain here is stable rustc, so the build runs with
//! RUSTC_BOOTSTRAP=1, which lets a stable rustc take -Z flags. The
//! sanitizer runtimes ship in the stable rust-std of
//! x86_64-unknown-linux-gnu, so AddressSanitizer works
//! (`cargo fuzz build -s address`; docs/fuzzing.md).
//!
//! Each target runs the built binary directly (not `cargo fuzz run`, which
//! would re-run cargo per target) on a scratch corpus under target/fuzz/,
//! with the committed seeds (fuzz/corpus/<target>/) as a second, read-only
//! corpus: a run never rewrites the repository.

use std::{
    env, fs,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Instant,
};

use anyhow::{bail, Context, Result};
use clap::Args;

use crate::{cargo, run, workspace_root};

/// libFuzzer's bounds on every run: an input that takes longer than
/// `TIMEOUT_S` is a hang, a process above `RSS_LIMIT_MB` (or one malloc
/// above it) is unbounded memory; both fail the run with a crash file.
const TIMEOUT_S: u32 = 10;
const RSS_LIMIT_MB: u32 = 1024;
/// The sanitizer the targets are built with (cargo fuzz build -s).
const SANITIZER: &str = "address";
/// What cargo fuzz builds for (its default, the host).
const TRIPLE: &str = "x86_64-unknown-linux-gnu";
/// The fuzz build's own target dir: the dist binary's build (xtask/src/
/// dist.rs) is for the same triple with other flags, so in a shared dir
/// each rebuilt the other's crates, and beside the tests (beside.rs) one
/// waited on the other's lock. Kept across CI's clones (build_cache.rs).
fn target_dir() -> PathBuf {
    crate::build_cache::target_dir("fuzz", "target/fuzz/build")
}

#[derive(Args, Debug)]
pub(crate) struct FuzzArgs {
    /// Seconds of fuzzing per target.
    #[arg(long, default_value_t = 20)]
    pub(crate) seconds: u32,
    /// Rewrite the seed corpora (fuzz/corpus/) from the lab recordings,
    /// minimized, before fuzzing.
    #[arg(long)]
    pub(crate) seed: bool,
    /// Build the targets (installing cargo-fuzz if missing), run none.
    #[arg(long)]
    pub(crate) no_run: bool,
    /// Run the targets as built (by a `--no-run` of this checkout), without
    /// building: the build would first remove the workspace's crates from
    /// the kept directory (build_cache.rs `forget_members`) and compile
    /// them again, 102 s of ci43's smoke after the same build had passed
    /// beside the lab tier.
    #[arg(long, conflicts_with = "no_run")]
    pub(crate) no_build: bool,
    /// Codegen units of the targets' build: cargo-fuzz's default, 1, for
    /// the fastest fuzzing; the smoke's, 16, for the fastest build.
    #[arg(long, default_value_t = 1)]
    pub(crate) codegen_units: u32,
    /// Only this target (default: every one; `cargo fuzz list --fuzz-dir
    /// fuzz` lists them).
    pub(crate) target: Option<String>,
}

/// What one target's run gave (libFuzzer's final stats).
struct RunStats {
    target: String,
    execs: Option<u64>,
    execs_per_s: Option<u64>,
    cov: Option<u64>,
    ft: Option<u64>,
    corpus: Option<String>,
}

pub(crate) fn run_fuzz(a: &FuzzArgs) -> Result<()> {
    ensure_cargo_fuzz()?;
    let targets = targets(a.target.as_deref())?;
    if !a.no_build {
        build(a.codegen_units)?;
    }
    if a.no_run {
        return Ok(());
    }
    if a.seed {
        seed(&targets)?;
    }
    let mut all = Vec::new();
    for t in &targets {
        all.push(fuzz_one(t, a.seconds)?);
    }
    println!("\nfuzz: {} targets, {} s each", all.len(), a.seconds);
    println!("| target | execs | execs/s | cov | ft | corpus |");
    println!("|---|---|---|---|---|---|");
    let show = |v: Option<u64>| v.map_or_else(|| "?".into(), |v| v.to_string());
    for s in &all {
        println!(
            "| {} | {} | {} | {} | {} | {} |",
            s.target,
            show(s.execs),
            show(s.execs_per_s),
            show(s.cov),
            show(s.ft),
            s.corpus.as_deref().unwrap_or("?"),
        );
    }
    Ok(())
}

/// Seconds per target of the smoke `cargo xtask test` runs: 14 targets x
/// 3 s plus the instrumented build keep it near 6 minutes of CI on two
/// cores (docs/fuzzing.md has the measured times). Enough for every seed
/// to run and a few thousand mutations; the search itself is `cargo
/// xtask fuzz`.
pub(crate) const SMOKE_SECONDS: u32 = 3;

/// Codegen units of the smoke's build. cargo-fuzz builds each crate in
/// one (its project.rs: with more, the coverage passes keep ThinLTO from
/// inlining across units, and fuzzing runs slower); nri-trace in one unit
/// was most of the smoke's build, on one of the two cores (ci25: 207 s,
/// user time equal to wall time). A smoke runs each target 3 s: it needs
/// every seed run, not the fastest executions.
pub(crate) const SMOKE_CODEGEN_UNITS: u32 = 16;

/// The CI smoke of `cargo xtask test`: every target for
/// [`SMOKE_SECONDS`], built first unless `prebuilt` (the `--no-run` build
/// beside the lab tier passed in this run). Under CI cargo-fuzz must
/// install; elsewhere a failed install skips the smoke with the reason.
pub(crate) fn smoke(ci: bool, prebuilt: bool) -> Result<()> {
    if let Err(e) = ensure_cargo_fuzz() {
        if ci {
            return Err(e.context("CI=true: the fuzz smoke must run"));
        }
        println!("SKIP fuzz smoke: {e:#}");
        return Ok(());
    }
    run_fuzz(&FuzzArgs {
        seconds: SMOKE_SECONDS,
        seed: false,
        no_run: false,
        no_build: prebuilt,
        codegen_units: SMOKE_CODEGEN_UNITS,
        target: None,
    })
}

/// `cargo install cargo-fuzz --locked` unless `cargo fuzz` runs already.
fn ensure_cargo_fuzz() -> Result<()> {
    let present = cargo()
        .args(["fuzz", "--version"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if present {
        return Ok(());
    }
    println!("cargo-fuzz missing: cargo install cargo-fuzz --locked");
    run(cargo().args(["install", "cargo-fuzz", "--locked"]))
        .context("installing cargo-fuzz (crates.io): `cargo install cargo-fuzz --locked`")
}

/// The fuzz targets, or `only` if it is one.
fn targets(only: Option<&str>) -> Result<Vec<String>> {
    let out = cargo()
        .args(["fuzz", "list", "--fuzz-dir", "fuzz"])
        .output()
        .context("running cargo fuzz list")?;
    if !out.status.success() {
        bail!(
            "cargo fuzz list failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let all: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::trim)
        // Not a fuzz target: writes the seed corpora.
        .filter(|l| !l.is_empty() && *l != "seed_corpus")
        .map(String::from)
        .collect();
    match only {
        None => Ok(all),
        Some(t) if all.iter().any(|a| a == t) => Ok(vec![t.to_owned()]),
        Some(t) => bail!("no fuzz target {t}; the targets are: {}", all.join(", ")),
    }
}

/// Build every target (one cargo run) into [`target_dir`], in
/// `codegen_units` units each crate.
fn build(codegen_units: u32) -> Result<()> {
    let started = Instant::now();
    crate::build_cache::forget_members_if_kept(
        &target_dir(),
        &workspace_root().join("fuzz/Cargo.toml"),
        &["nri-trace", "nri-trace-common", "nri-trace-fuzz"],
        &["--target", TRIPLE, "--release"],
    )?;
    run(fuzz_cargo()?
        .args(["fuzz", "build", "--fuzz-dir", "fuzz", "--target-dir"])
        .arg(target_dir())
        .args(["-s", SANITIZER])
        .arg("--codegen-units")
        .arg(codegen_units.to_string()))
    .context("cargo fuzz build (RUSTC_BOOTSTRAP=1)")?;
    println!(
        "fuzz: built in {:.0} s",
        started.elapsed().as_secs_f64().ceil()
    );
    Ok(())
}

/// cargo with the nightly flags cargo fuzz passes unlocked on stable.
///
/// The targets never load eBPF: nri-trace's build script is given an
/// empty object that exists. Without one (no `cargo xtask build` yet) its
/// `rerun-if-changed` names a missing file, which cargo counts as changed
/// on every build: nri-trace would be rebuilt, instrumented, each time.
fn fuzz_cargo() -> Result<Command> {
    let obj = workspace_root().join("target/fuzz/no-ebpf.o");
    if !obj.exists() {
        fs::create_dir_all(obj.parent().expect("a file in a directory"))?;
        fs::write(&obj, []).with_context(|| format!("creating {}", obj.display()))?;
    }
    let mut c = cargo();
    c.env("RUSTC_BOOTSTRAP", "1").env("NRI_TRACE_EBPF_OBJ", obj);
    Ok(c)
}

fn bin(name: &str) -> PathBuf {
    target_dir().join(TRIPLE).join("release").join(name)
}

/// Rewrite fuzz/corpus/<target>/ for `targets` from the lab recordings:
/// the seed_corpus bin writes every seed it can cut under target/fuzz/
/// seeds/, and libFuzzer's merge keeps those that add coverage (the
/// committed corpora stay small).
fn seed(targets: &[String]) -> Result<()> {
    let root = workspace_root();
    let raw = root.join("target/fuzz/seeds");
    if raw.exists() {
        fs::remove_dir_all(&raw).with_context(|| format!("removing {}", raw.display()))?;
    }
    run(Command::new(bin("seed_corpus"))
        .arg(&raw)
        .current_dir(&root))
    .context("writing the seed corpora")?;
    for t in targets {
        let dir = root.join("fuzz/corpus").join(t);
        if dir.exists() {
            fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
        }
        fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let log = root.join("target/fuzz").join(format!("{t}.merge.log"));
        run(Command::new(bin(t))
            .current_dir(&root)
            .arg("-merge=1")
            .arg(format!("-rss_limit_mb={RSS_LIMIT_MB}"))
            .arg(&dir)
            .arg(raw.join(t))
            .stdout(Stdio::null())
            .stderr(
                fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?,
            ))
        .with_context(|| format!("minimizing the seeds of {t} (log: {})", log.display()))?;
        println!(
            "fuzz: {t}: {} seeds kept of {}",
            fs::read_dir(&dir).map_or(0, Iterator::count),
            fs::read_dir(raw.join(t)).map_or(0, Iterator::count)
        );
    }
    Ok(())
}

fn fuzz_one(target: &str, seconds: u32) -> Result<RunStats> {
    let root = workspace_root();
    let scratch = root.join("target/fuzz/corpus").join(target);
    let artifacts = root.join("target/fuzz/artifacts").join(target);
    let seeds = root.join("fuzz/corpus").join(target);
    for d in [&scratch, &artifacts] {
        fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
    }
    let log = root.join("target/fuzz").join(format!("{target}.log"));
    println!("fuzz: {target} for {seconds} s (log: {})", log.display());
    let mut prefix = artifacts.into_os_string();
    prefix.push("/");
    let mut cmd = Command::new(bin(target));
    cmd.current_dir(&root)
        .arg(&scratch)
        .arg(&seeds)
        .arg(format!("-max_total_time={seconds}"))
        .arg(format!("-timeout={TIMEOUT_S}"))
        .arg(format!("-rss_limit_mb={RSS_LIMIT_MB}"))
        .arg("-print_final_stats=1")
        .arg({
            let mut a = std::ffi::OsString::from("-artifact_prefix=");
            a.push(&prefix);
            a
        })
        .stdout(Stdio::null())
        .stderr(fs::File::create(&log).with_context(|| format!("creating {}", log.display()))?);
    let status = cmd
        .status()
        .with_context(|| format!("running {}", bin(target).display()))?;
    let text = fs::read_to_string(&log).unwrap_or_default();
    if !status.success() {
        let tail: Vec<&str> = text.lines().rev().take(40).collect();
        for l in tail.iter().rev() {
            eprintln!("{l}");
        }
        let crash = text
            .lines()
            .find_map(|l| l.split("Test unit written to ").nth(1))
            .map(str::trim);
        match crash {
            Some(c) => bail!(
                "fuzz target {target} failed ({status}): crash file {c}; reproduce with \
                 `{} {c}`",
                bin(target).display()
            ),
            None => bail!(
                "fuzz target {target} failed ({status}); see {}",
                log.display()
            ),
        }
    }
    Ok(stats(target, &text, &scratch, &seeds))
}

/// libFuzzer's figures from its log: the last status line's cov/ft/corp
/// and the final stats' execs.
fn stats(target: &str, log: &str, scratch: &Path, seeds: &Path) -> RunStats {
    let field = |line: &str, key: &str| -> Option<u64> {
        let mut it = line.split_whitespace();
        it.position(|w| w == key)?;
        it.next()?.split('/').next()?.parse().ok()
    };
    let last_status = log
        .lines()
        .rev()
        .find(|l| l.starts_with('#') && l.contains(" cov: "));
    let final_stat = |key: &str| -> Option<u64> {
        log.lines()
            .find_map(|l| l.strip_prefix(&format!("stat::{key}:")))
            .and_then(|v| v.trim().parse().ok())
    };
    let files = |d: &Path| fs::read_dir(d).map_or(0, Iterator::count);
    let bytes = |d: &Path| -> u64 {
        fs::read_dir(d).map_or(0, |r| {
            r.flatten()
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
    };
    RunStats {
        target: target.to_owned(),
        execs: final_stat("number_of_executed_units"),
        execs_per_s: final_stat("average_exec_per_sec"),
        cov: last_status.and_then(|l| field(l, "cov:")),
        ft: last_status.and_then(|l| field(l, "ft:")),
        corpus: Some(format!(
            "{} new + {} seeds ({} KiB)",
            files(scratch),
            files(seeds),
            (bytes(scratch) + bytes(seeds)).div_ceil(1024)
        )),
    }
}

/// Whether `cargo xtask test` runs the fuzz smoke: always under CI; else
/// unless NRI_TRACE_SKIP_FUZZ=1.
pub(crate) fn smoke_wanted(ci: bool) -> bool {
    ci || env::var("NRI_TRACE_SKIP_FUZZ").map_or(true, |v| v != "1")
}
