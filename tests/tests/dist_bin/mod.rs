//! The dist binary under test (`cargo xtask dist`), for the test files
//! that run it: tests/tests/dist.rs and tests/tests/cluster_lab.rs.

use nri_trace_tests::workspace_bin;
use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

/// The dist binary to test, or why there is none.
pub(crate) fn dist_bin() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("NRI_TRACE_DIST_BIN") {
        let p = PathBuf::from(p);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(format!("NRI_TRACE_DIST_BIN={} is not a file", p.display()))
        };
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/dist");
    let newest = fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.starts_with("nri-trace-") && name.ends_with("-x86_64-linux")
        })
        .max_by_key(|e| e.metadata().and_then(|m| m.modified()).ok());
    newest.map(|e| e.path()).ok_or_else(|| {
        format!(
            "no dist binary in {}: run `cargo xtask dist` (or `cargo xtask test`)",
            dir.display()
        )
    })
}

/// Ok when the dist binary is built from this checkout's HEAD, or git
/// cannot say (a source tarball); else why not.
pub(crate) fn built_from_head(bin: &Path) -> Result<(), String> {
    let Ok(head) = Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
    else {
        return Ok(());
    };
    let head = String::from_utf8_lossy(&head.stdout).trim().to_owned();
    let commit = commit_in_name(bin);
    if head.is_empty() || commit.trim_end_matches("-dirty") == head {
        Ok(())
    } else {
        Err(format!(
            "{} is built from {commit}, not HEAD {head}: run `cargo xtask dist`",
            bin.display()
        ))
    }
}

/// The commit the dist binary's file name says it was built from:
/// `nri-trace-<version>-<commit>-x86_64-linux`.
pub(crate) fn commit_in_name(bin: &Path) -> String {
    let name = bin.file_name().unwrap().to_string_lossy().into_owned();
    let middle = name
        .strip_prefix("nri-trace-")
        .and_then(|n| n.strip_suffix("-x86_64-linux"))
        .unwrap_or_else(|| panic!("unexpected dist file name {name}"));
    middle
        .split_once('-')
        .unwrap_or_else(|| panic!("no commit in {name}"))
        .1
        .to_owned()
}

pub(crate) fn ci() -> bool {
    matches!(std::env::var("CI").as_deref(), Ok("true" | "1"))
}

/// The dist binary when the test can run; otherwise it says why and
/// returns None, or fails under CI.
pub(crate) fn guard(test: &str, more: &[&str]) -> Option<PathBuf> {
    let mut why = None;
    if unsafe { libc::geteuid() } != 0 {
        why = Some("not running as root".into());
    }
    let bin = match dist_bin() {
        Ok(b) => Some(b),
        Err(e) => {
            why.get_or_insert(e);
            None
        }
    };
    if let Some(Err(stale)) = bin.as_deref().map(built_from_head) {
        why.get_or_insert(stale);
    }
    for b in more {
        if !workspace_bin(b).exists() {
            why.get_or_insert_with(|| {
                format!(
                    "{} not built: run `cargo build --workspace` (or `cargo xtask test`)",
                    workspace_bin(b).display()
                )
            });
        }
    }
    match why {
        None => bin,
        Some(why) => {
            assert!(!ci(), "{test}: {why}");
            eprintln!("skipping {test}: {why}");
            None
        }
    }
}

/// The image `cargo xtask image` makes of the dist binary `bin`
/// (lab/mkimage.py, the same arguments), as reference `reference`, into
/// the OCI layout tar `tar`.
pub(crate) fn pack_image(bin: &Path, reference: &str, tar: &Path) -> Result<(), String> {
    let out = Command::new("python3")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../lab/mkimage.py"))
        .args(["--ref", reference, "--out"])
        .arg(tar)
        .arg("--file")
        .arg(format!("{}:/usr/local/bin/nri-trace:0755", bin.display()))
        .args([
            "--entrypoint",
            "/usr/local/bin/nri-trace",
            "--cmd",
            "doctor",
        ])
        .output()
        .map_err(|e| format!("running lab/mkimage.py: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "mkimage.py: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}
