//! Embeds the eBPF object built by `cargo xtask build` (Debian's rustc-web,
//! bpfel-unknown-none) into the nri-trace binary.
//!
//! The object comes from `NRI_TRACE_EBPF_OBJ`, else from the default xtask
//! output path. When neither exists (e.g. `cargo check` or unit tests on a
//! machine without the eBPF toolchain) an empty object is embedded and
//! loading fails at run time with a message that names the fix.
//!
//! It also compiles the protobuf schemas the NRI decoder needs into Rust
//! types in OUT_DIR (protox parses the .proto files, so no `protoc`):
//! `../proto/nri/v1alpha1/api.proto` -> `nri.pkg.api.v1alpha1.rs` and
//! `../proto/ttrpc/ttrpc.proto` -> `ttrpc.rs`.
//!
//! And it sets `NRI_TRACE_GIT_COMMIT` for `nri-trace --version`: the short
//! commit, `-dirty` when the work tree has changes, `unknown` without git.
use std::{env, fs, path::PathBuf, process::Command};

fn main() {
    embed_ebpf();
    git_commit();
    let protos = ["nri/v1alpha1/api.proto", "ttrpc/ttrpc.proto"];
    for p in protos {
        println!("cargo:rerun-if-changed=../proto/{p}");
    }
    let fds = protox::compile(protos, ["../proto"]).expect("protox: compiling the .proto files");
    prost_build::Config::new()
        .compile_fds(fds)
        .expect("prost-build: generating Rust code");
}

fn embed_ebpf() {
    println!("cargo:rerun-if-env-changed=NRI_TRACE_EBPF_OBJ");
    let out = PathBuf::from(env::var("OUT_DIR").unwrap()).join("nri-trace-ebpf.o");
    let default = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap())
        .join("../target/bpf/bpfel-unknown-none/release/nri-trace-ebpf");
    let src = env::var_os("NRI_TRACE_EBPF_OBJ").map_or(default, PathBuf::from);
    println!("cargo:rerun-if-changed={}", src.display());
    if let Ok(bytes) = fs::read(&src) {
        fs::write(&out, bytes).unwrap()
    } else {
        println!(
            "cargo:warning=eBPF object {} not found: embedding none (run `cargo xtask build`)",
            src.display()
        );
        fs::write(&out, []).unwrap();
    }
}

/// The commit the binary is built from, for `--version`.
///
/// `NRI_TRACE_GIT_COMMIT` in the environment wins: `cargo xtask dist` sets
/// it, computed at the moment of the build, so a release binary's `-dirty`
/// is exact. Otherwise git is asked here; the script re-runs when HEAD or
/// the branch it points at moves (a commit, a checkout), not when a file
/// is edited, so a dev build's `-dirty` can lag until the next commit:
/// tracking the index too would rebuild nri-trace on every `git add`.
fn git_commit() {
    println!("cargo:rerun-if-env-changed=NRI_TRACE_GIT_COMMIT");
    let commit = env::var("NRI_TRACE_GIT_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| {
            for path in ["HEAD", "packed-refs"] {
                track_git_path(path);
            }
            if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
                track_git_path(&branch);
            }
            match git(&["rev-parse", "--short", "HEAD"]) {
                Some(hash) => {
                    // `git status --porcelain` prints nothing for a clean tree.
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
        });
    println!("cargo:rustc-env=NRI_TRACE_GIT_COMMIT={commit}");
}

/// Re-run this script when this git file changes (worktrees keep HEAD in
/// their own git dir and the branches in the common one: `--git-path`
/// resolves both).
fn track_git_path(name: &str) {
    if let Some(path) = git(&["rev-parse", "--git-path", name]) {
        let path = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap()).join(path);
        if path.exists() {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
}

/// `git ARGS` in the crate's directory: its trimmed stdout, or None when
/// git is missing or fails (a source tarball has no .git).
fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(env::var("CARGO_MANIFEST_DIR").unwrap())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}
