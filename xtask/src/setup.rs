//! `cargo xtask setup`: install the eBPF build prerequisites idempotently.
//!
//! Facts it follows (TOOLCHAIN-AND-LAB-FACTS.md): Debian's rustc-web ships a
//! prebuilt `core` for bpfel-unknown-none; bpf-linker 0.13.0 must be built
//! against Debian's LLVM 22; aya-ebpf 0.2.1 needs rustc >= 1.87 and the pinned
//! aya crates need rustc <= 1.97.

use std::{path::PathBuf, process::Command};

use anyhow::{bail, Context, Result};

const APT_PACKAGES: &[&str] = &[
    "rustc-web",
    "cargo-web",
    "libstd-rust-web-dev-bpf",
    "llvm-22-dev",
    // Benchmarks: the ad-hoc peer (bpftrace) and C syscall loops.
    "bpftrace",
    "gcc",
    // k8s-cri (the lab's CRI driver) runs protoc in its build script.
    "protobuf-compiler",
    // The BTF parser's offsets checked against the kernel's own dump
    // (capture/btf.rs, kernel_offsets_match_bpftool).
    "bpftool",
];
const BPF_LINKER_VERSION: &str = "0.13.0";

fn bpf_linker() -> PathBuf {
    let home = std::env::var("CARGO_HOME").map_or_else(
        |_| PathBuf::from(std::env::var("HOME").unwrap_or_default()).join(".cargo"),
        PathBuf::from,
    );
    home.join("bin/bpf-linker")
}

fn output(cmd: &str, args: &[&str]) -> Option<String> {
    let o = Command::new(cmd).args(args).output().ok()?;
    o.status
        .success()
        .then(|| String::from_utf8_lossy(&o.stdout).into_owned())
}

fn missing_packages() -> Vec<&'static str> {
    APT_PACKAGES
        .iter()
        .copied()
        .filter(|p| {
            output("dpkg-query", &["-W", "-f=${Status}", p])
                .is_none_or(|s| !s.contains("install ok installed"))
        })
        .collect()
}

fn linker_ok() -> bool {
    output(
        bpf_linker().to_str().unwrap_or("bpf-linker"),
        &["--version"],
    )
    .is_some_and(|v| v.contains(BPF_LINKER_VERSION))
}

/// True when nothing needs installing (cheap: no network).
pub(crate) fn toolchain_ready() -> bool {
    missing_packages().is_empty() && linker_ok() && check_toolchain().is_ok()
}

/// Fails with the fix when Debian's rustc cannot build the eBPF crate.
pub(crate) fn check_toolchain() -> Result<()> {
    let v = output("/usr/bin/rustc", &["--version"]).with_context(|| {
        "/usr/bin/rustc not found: run `cargo xtask setup` (installs Debian's rustc-web)"
    })?;
    // "rustc 1.96.0 (…)"
    let minor: u32 = v
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.split('.').nth(1))
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("cannot parse rustc version from {v:?}"))?;
    if !(87..=97).contains(&minor) {
        bail!(
            "Debian's rustc is {}: the pinned aya crates need 1.87..=1.97 \
             (aya-ebpf 0.2.1 needs >= 1.87; aya 0.15 / aya-build 0.2.1 would be needed past 1.97). \
             Update the pins in Cargo.toml and nri-trace-ebpf/Cargo.toml, see docs/building.md",
            v.trim()
        );
    }
    if !PathBuf::from("/usr/lib/rustlib/bpfel-unknown-none").exists() {
        bail!("no prebuilt core for bpfel-unknown-none: run `cargo xtask setup` (libstd-rust-web-dev-bpf)");
    }
    if !linker_ok() {
        bail!(
            "bpf-linker {BPF_LINKER_VERSION} not found at {}: run `cargo xtask setup`",
            bpf_linker().display()
        );
    }
    Ok(())
}

pub(crate) fn run() -> Result<()> {
    let missing = missing_packages();
    if missing.is_empty() {
        println!("setup: Debian packages present");
    } else {
        println!("setup: installing {}", missing.join(" "));
        crate::run(Command::new("apt-get").args(["update", "-qq"]))
            .context("apt-get update (are you root?)")?;
        crate::run(
            Command::new("apt-get")
                .args(["install", "-y", "-qq", "--no-install-recommends"])
                .args(&missing)
                .env("DEBIAN_FRONTEND", "noninteractive"),
        )
        .context("apt-get install")?;
    }
    if linker_ok() {
        println!("setup: bpf-linker {BPF_LINKER_VERSION} present");
    } else {
        println!(
            "setup: building bpf-linker {BPF_LINKER_VERSION} against LLVM 22 (about a minute)"
        );
        crate::run(
            Command::new("/usr/bin/cargo")
                .args(["install", "--locked", "--force"])
                .arg(format!("bpf-linker@{BPF_LINKER_VERSION}"))
                .args(["--no-default-features", "--features", "llvm-22"])
                .env("LLVM_PREFIX", "/usr/lib/llvm-22")
                .env("RUSTC", "/usr/bin/rustc")
                .env("PATH", "/usr/bin:/bin:/usr/sbin:/sbin")
                .env_remove("RUSTUP_TOOLCHAIN")
                .env_remove("CARGO"),
        )
        .context("installing bpf-linker")?;
    }
    check_toolchain()?;
    println!("setup: toolchain ready");
    Ok(())
}
