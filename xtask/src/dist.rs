//! `cargo xtask dist`: the one file an SRE copies to a node.
//!
//! One static x86_64 binary of nri-trace with the eBPF object embedded
//! (nri-trace/build.rs), stripped, its `--version` naming the commit, and a
//! sha256 beside it, in target/dist/. Static with glibc's `crt-static`
//! (libc6-dev ships libc.a): Rust's x86_64-unknown-linux-gnu target then
//! links a static-pie executable with no interpreter and no shared
//! libraries, so it runs on a node without this toolchain (docs/building.md,
//! "Distributing").

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{bail, Context, Result};

use crate::{build_ebpf, cargo, run, workspace_root};

/// The target is named even though it is the host's: with `--target`,
/// cargo applies the RUSTFLAGS below to the target's crates only, so the
/// build scripts and proc-macros stay ordinary dynamic host programs (a
/// static proc-macro cannot be loaded by rustc).
const TARGET: &str = "x86_64-unknown-linux-gnu";
/// The kubectl plugin's executable (nri-trace/src/bin/kubectl-nri_trace/).
const PLUGIN: &str = "kubectl-nri_trace";

/// Where the dist files go.
pub(crate) fn dist_dir() -> PathBuf {
    workspace_root().join("target/dist")
}

/// Build the dist binary and its checksum; returns the binary's path.
pub(crate) fn run_dist() -> Result<PathBuf> {
    let obj = build_ebpf()?;
    let commit = git_commit();
    let target_dir = crate::build_cache::target_dir("dist", "target");
    crate::build_cache::forget_members_if_kept(
        &target_dir,
        &workspace_root().join("Cargo.toml"),
        &["nri-trace", "nri-trace-common"],
        &["--target", TARGET, "--release"],
    )?;
    let mut cmd = cargo();
    cmd.args([
        "build",
        "-p",
        "nri-trace",
        "--bin",
        "nri-trace",
        "--bin",
        PLUGIN,
        "--release",
    ])
    .args(["--target", TARGET])
    .arg("--target-dir")
    .arg(&target_dir)
    .env("NRI_TRACE_EBPF_OBJ", &obj)
    .env("NRI_TRACE_GIT_COMMIT", &commit)
    .env(
        "CARGO_ENCODED_RUSTFLAGS",
        ["-C", "target-feature=+crt-static"].join("\x1f"),
    )
    // The release profile keeps line tables (debug = 1, for profiling
    // dev builds); a node needs none: no debug info compiled, symbols
    // stripped. Env overrides of [profile.release], this build only
    // (its own directory under the target dir: x86_64-unknown-linux-gnu/;
    // the target dir is kept across CI's clones, build_cache.rs).
    .env("CARGO_PROFILE_RELEASE_DEBUG", "false")
    .env("CARGO_PROFILE_RELEASE_STRIP", "symbols")
    .env_remove("RUSTFLAGS")
    .env_remove("CARGO_BUILD_RUSTFLAGS");
    run(&mut cmd).context("building the static nri-trace")?;
    let built = target_dir.join(TARGET).join("release/nri-trace");
    let plugin = target_dir.join(TARGET).join("release").join(PLUGIN);

    check_static(&built)?;
    check_static(&plugin)?;
    let version = check_version(&built, &commit)?;

    let dir = dist_dir();
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    // One version in target/dist: the earlier builds' files go (12 MB
    // each, and tests/tests/dist.rs takes the newest).
    for old in fs::read_dir(&dir)?.flatten() {
        if old.file_name().to_string_lossy().starts_with("nri-trace-") {
            fs::remove_file(old.path())
                .with_context(|| format!("removing {}", old.path().display()))?;
        }
    }
    let name = format!("nri-trace-{version}-x86_64-linux");
    let out = dir.join(&name);
    fs::copy(&built, &out)
        .with_context(|| format!("copying {} to {}", built.display(), out.display()))?;
    let sum = sha256(&out)?;
    // sha256sum's format (`HASH  NAME`, two spaces: text mode), so
    // `sha256sum -c NAME.sha256` checks it next to the binary.
    let sum_file = dir.join(format!("{name}.sha256"));
    fs::write(&sum_file, format!("{sum}  {name}\n"))
        .with_context(|| format!("writing {}", sum_file.display()))?;

    // The kubectl plugin under the name kubectl looks for on the PATH
    // (`kubectl nri-trace` runs `kubectl-nri_trace`), beside the binary.
    let plugin_out = dir.join(PLUGIN);
    fs::copy(&plugin, &plugin_out)
        .with_context(|| format!("copying {} to {}", plugin.display(), plugin_out.display()))?;
    let plugin_sum = dir.join(format!("{PLUGIN}.sha256"));
    fs::write(&plugin_sum, format!("{}  {PLUGIN}\n", sha256(&plugin_out)?))
        .with_context(|| format!("writing {}", plugin_sum.display()))?;
    println!("{}", plugin_out.display());

    let size = fs::metadata(&out)?.len();
    println!(
        "{}: {size} bytes ({:.1} MiB), static, sha256 {sum}",
        out.display(),
        size as f64 / (1024.0 * 1024.0)
    );
    println!("{}", sum_file.display());
    Ok(out)
}

/// The binary [`run_dist`] left in target/dist/ (by a child xtask, beside
/// the tests: xtask/src/beside.rs): the one `nri-trace-*-x86_64-linux`
/// there, as [`run_dist`] removes the earlier ones.
pub(crate) fn built() -> Result<PathBuf> {
    let dir = dist_dir();
    let mut found: Vec<PathBuf> = fs::read_dir(&dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("nri-trace-") && n.ends_with("-x86_64-linux"))
        })
        .collect();
    match found.len() {
        1 => Ok(found.remove(0)),
        n => bail!(
            "{n} dist binaries in {}, not one: run `cargo xtask dist`",
            dir.display()
        ),
    }
}

/// The commit as nri-trace/build.rs computes it, fixed here at the moment
/// of the build so the `-dirty` mark is exact (build.rs alone re-runs on
/// a new commit, not on an edited file).
pub(crate) fn git_commit() -> String {
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .current_dir(workspace_root())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
    };
    match git(&["rev-parse", "--short", "HEAD"]) {
        Some(hash) => {
            let dirty = git(&["status", "--porcelain", "--untracked-files=no"])
                .is_some_and(|s| !s.is_empty());
            if dirty {
                format!("{hash}-dirty")
            } else {
                hash
            }
        }
        None => "unknown".to_owned(),
    }
}

/// Fail unless both `file` and `ldd` say the binary is static: a binary
/// that still wants ld-linux or a libc.so would fail on a node whose glibc
/// differs, which is what the dist build is for.
fn check_static(bin: &Path) -> Result<()> {
    let file = output(Command::new("file").arg("-b").arg(bin))
        .context("running `file` (Debian package `file`)")?;
    // Rust links x86_64-unknown-linux-gnu with crt-static as static-pie.
    if !(file.contains("statically linked") || file.contains("static-pie linked")) {
        bail!("{} is not static: file says {file}", bin.display());
    }
    // ldd exits 1 with "not a dynamic executable" on a static binary;
    // glibc's ldd says "statically linked" for static-pie.
    let ldd = Command::new("ldd")
        .arg(bin)
        .output()
        .context("running ldd")?;
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&ldd.stdout),
        String::from_utf8_lossy(&ldd.stderr)
    );
    if !(said.contains("not a dynamic executable") || said.contains("statically linked")) {
        bail!("{} is not static: ldd says {}", bin.display(), said.trim());
    }
    println!("static: file: {file}; ldd: {}", said.trim());
    Ok(())
}

/// Run the binary's `--version`, check it names `commit`, and return the
/// version for the file name: `0.1.0-<commit>`.
fn check_version(bin: &Path, commit: &str) -> Result<String> {
    let said = output(Command::new(bin).arg("--version"))?;
    // clap prints "nri-trace 0.1.0 (fe2bf13)".
    let Some(rest) = said.strip_prefix("nri-trace ") else {
        bail!("unexpected `nri-trace --version`: {said}");
    };
    let Some((version, shown)) = rest.split_once(' ') else {
        bail!("unexpected `nri-trace --version`: {said}");
    };
    if shown != format!("({commit})") {
        bail!("`nri-trace --version` says {said}, expected the commit {commit}");
    }
    Ok(format!("{version}-{commit}"))
}

fn sha256(path: &Path) -> Result<String> {
    let out = output(Command::new("sha256sum").arg(path)).context("running sha256sum")?;
    out.split_whitespace()
        .next()
        .map(str::to_owned)
        .with_context(|| format!("sha256sum printed nothing for {}", path.display()))
}

/// A command's trimmed stdout; an error with its stderr if it fails.
pub(crate) fn output(cmd: &mut Command) -> Result<String> {
    let out = cmd
        .output()
        .with_context(|| format!("running {}", cmd.get_program().display()))?;
    if !out.status.success() {
        bail!(
            "{} failed: {}: {}",
            cmd.get_program().display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// `cargo xtask image`: the dist binary in an OCI image layout (a tar that
/// `ctr images import` takes), built offline as the lab builds its images:
/// lab/mkimage.py packs one deterministic layer, no registry, no docker.
/// The image holds the binary at /usr/local/bin/nri-trace (and the kubectl
/// plugin beside it, for a `kubectl debug` shell) and the base
/// directories runc mounts over; it runs `doctor` by default and what
/// deploy/daemonset.yaml says under Kubernetes.
pub(crate) fn run_image() -> Result<PathBuf> {
    let bin = run_dist()?;
    let name = bin
        .file_name()
        .and_then(|n| n.to_str())
        .context("dist binary name")?;
    let version = name
        .strip_prefix("nri-trace-")
        .and_then(|n| n.strip_suffix("-x86_64-linux"))
        .with_context(|| format!("unexpected dist binary name {name}"))?;
    let image_ref = format!("localhost/nri-trace/nri-trace:{version}");
    let out = dist_dir().join(format!("nri-trace-{version}-x86_64-linux.oci.tar"));
    run(Command::new("python3")
        .arg(workspace_root().join("lab/mkimage.py"))
        .args(["--ref", &image_ref, "--out"])
        .arg(&out)
        .arg("--file")
        .arg(format!("{}:/usr/local/bin/nri-trace:0755", bin.display()))
        .arg("--file")
        .arg(format!(
            "{}:/usr/local/bin/{PLUGIN}:0755",
            dist_dir().join(PLUGIN).display()
        ))
        .args([
            "--entrypoint",
            "/usr/local/bin/nri-trace",
            "--cmd",
            "doctor",
        ]))
    .context("packing the OCI image (lab/mkimage.py)")?;
    let sum = sha256(&out)?;
    let out_name = out.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    let sum_file = dist_dir().join(format!("{out_name}.sha256"));
    fs::write(&sum_file, format!("{sum}  {out_name}\n"))
        .with_context(|| format!("writing {}", sum_file.display()))?;
    println!(
        "{}: {} bytes, image {image_ref}; import: ctr -n k8s.io images import {}",
        out.display(),
        fs::metadata(&out)?.len(),
        out.display()
    );
    Ok(out)
}
