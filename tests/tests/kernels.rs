//! The kernels nodes run (docs/kernels.md): the dist binary's `doctor`,
//! with its capture and sandbox self-tests, on Debian's kernels 5.10, 6.1
//! and 6.12, each booted in qemu by `cargo xtask kernels`, and on this
//! machine's own kernel (the host run).
//!
//! Each VM must pass every doctor check it runs, load and attach every
//! program, capture the self-test's socketpair exchange byte for byte
//! (`capture self-test`) and see the sandbox probes' events. Runs under
//! CI=true (where it must), or with NRI_TRACE_KERNELS_TEST=1; otherwise
//! it skips: it downloads three kernel packages on first use and boots
//! three VMs. The binary comes from `NRI_TRACE_DIST_BIN` (`cargo xtask
//! test` builds it once and sets it).

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use nri_trace_tests::workspace_bin;
use serde_json::Value;

fn ci() -> bool {
    matches!(std::env::var("CI").as_deref(), Ok("true" | "1"))
}

/// The dist binary, or why the test cannot run.
fn setup() -> Result<PathBuf, String> {
    let wanted = ci() || std::env::var("NRI_TRACE_KERNELS_TEST").is_ok_and(|v| v == "1");
    if !wanted {
        return Err(
            "boots three kernels in qemu (downloads them on first use): runs under CI=true \
             or NRI_TRACE_KERNELS_TEST=1"
                .into(),
        );
    }
    if unsafe { libc::geteuid() } != 0 {
        return Err("not root: qemu's install, the kernels' cache and the host's eBPF".into());
    }
    let bin = std::env::var_os("NRI_TRACE_DIST_BIN")
        .map(PathBuf::from)
        .ok_or(
            "NRI_TRACE_DIST_BIN is not set: run `cargo xtask test` (it builds the dist binary), \
         or `cargo xtask kernels`",
        )?;
    if !bin.is_file() {
        return Err(format!(
            "NRI_TRACE_DIST_BIN={} is not a file",
            bin.display()
        ));
    }
    Ok(bin)
}

/// The status of doctor check `name` in `checks`.
fn status<'a>(checks: &'a [Value], name: &str) -> Option<&'a str> {
    field(checks, name, "status")
}

/// Field `field` of doctor check `name` in `checks`.
fn field<'a>(checks: &'a [Value], name: &str, field: &str) -> Option<&'a str> {
    checks
        .iter()
        .find(|c| c["name"] == name)
        .and_then(|c| c[field].as_str())
}

/// The backend doctor captured on (`capture backend`: "fentry: ...").
fn backend(checks: &[Value]) -> Option<&str> {
    field(checks, "capture backend", "detail").and_then(|d| d.split(':').next())
}

/// How many times the data programs ran during doctor's untraced writes
/// ("... ran the data programs N times ...").
fn untraced_runs(checks: &[Value]) -> Option<u64> {
    let detail = field(checks, "untraced writes", "detail")?;
    let rest = detail.split("ran the data programs ").nth(1)?;
    rest.split(' ').next()?.parse().ok()
}

/// One-byte writes to each of a file, a pipe and a TCP socket in doctor's
/// untraced-writes check (nri-trace doctor.rs `UNTRACED_WRITES`).
const UNTRACED_WRITES: u64 = 100_000;

/// Every check ran and none failed; the self-tests passed.
fn assert_doctor(kernel: &str, checks: &[Value]) {
    let text: Vec<String> = checks.iter().map(Value::to_string).collect();
    let text = text.join("\n");
    for name in [
        "eBPF programs",
        "capture self-test",
        "sandbox probes self-test",
    ] {
        assert_eq!(
            status(checks, name),
            Some("ok"),
            "{kernel}: doctor check {name:?} did not pass:\n{text}"
        );
    }
    let failed: Vec<&Value> = checks.iter().filter(|c| c["status"] == "fail").collect();
    assert!(failed.is_empty(), "{kernel}: failed checks: {failed:?}");
    let capture = checks
        .iter()
        .find(|c| c["name"] == "capture self-test")
        .and_then(|c| c["detail"].as_str())
        .unwrap_or_default();
    assert!(
        capture.contains("byte for byte"),
        "{kernel}: capture self-test detail {capture:?}"
    );
}

fn doctor_lines(out: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(out)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["type"] == "doctor_check")
        .collect()
}

#[test]
fn kernels_doctor_and_capture_pass_on_every_kernel() {
    let bin = match setup() {
        Ok(b) => b,
        Err(why) => {
            assert!(!ci(), "kernels: {why}");
            eprintln!("skipping kernels: {why}");
            return;
        }
    };

    // The host's own kernel first (6.18 on this machine kind).
    let host = Command::new(&bin)
        .args(["doctor", "-o", "json"])
        .output()
        .expect("running the dist binary's doctor");
    let host_checks = doctor_lines(&host.stdout);
    assert!(
        !host_checks.is_empty(),
        "host doctor printed nothing: {}",
        String::from_utf8_lossy(&host.stderr)
    );
    for name in [
        "eBPF programs",
        "capture self-test",
        "sandbox probes self-test",
    ] {
        assert_eq!(
            status(&host_checks, name),
            Some("ok"),
            "host: {name}: {host_checks:?}\n{}",
            String::from_utf8_lossy(&host.stderr)
        );
    }

    let report = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("kernels-report.json");
    let _ = std::fs::remove_file(&report);
    // The xtask binary itself, not `cargo xtask`: a cargo inside `cargo
    // test` would wait for the build directory's lock the outer one holds.
    // `cargo xtask test` names itself (under CI its tests are built in a
    // directory of their own, build_cache.rs); a plain `cargo test` finds
    // the one `cargo xtask` built beside it.
    let xtask = std::env::var_os("NRI_TRACE_XTASK_BIN")
        .map_or_else(|| workspace_bin("xtask"), PathBuf::from);
    assert!(
        xtask.is_file(),
        "{} not built: run `cargo xtask test --tier kernels`, or `cargo build -p xtask` first",
        xtask.display()
    );
    let status_xtask = Command::new(&xtask)
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join(".."))
        .args(["kernels", "--kernel", "all", "--bin"])
        .arg(&bin)
        .arg("--report")
        .arg(&report)
        .status()
        .expect("running cargo xtask kernels");
    let runs: Vec<Value> =
        serde_json::from_slice(&std::fs::read(&report).unwrap_or_else(|e| {
            panic!("cargo xtask kernels ({status_xtask}) wrote no report: {e}")
        }))
        .expect("the report is JSON");
    let kernels: Vec<&str> = runs.iter().filter_map(|r| r["kernel"].as_str()).collect();
    assert_eq!(kernels, ["5.10", "6.1", "6.12"], "kernels booted");
    for r in &runs {
        let kernel = format!(
            "{} ({} {}, uname {})",
            r["kernel"], r["package"], r["version"], r["uname"]
        );
        assert!(
            r["uname"]
                .as_str()
                .is_some_and(|u| u.starts_with(&format!("{}.", r["kernel"].as_str().unwrap()))),
            "{kernel}: the VM did not report its kernel:\n{}",
            r["console_tail"]
        );
        let checks = r["doctor"].as_array().cloned().unwrap_or_default();
        assert_doctor(&kernel, &checks);
        // 5.10 lacks bpf_loop and bpf_task_pt_regs: the fallback programs
        // ran (doctor warns and says what they lose); the 6.x kernels
        // have every helper.
        let fallback = r["kernel"] == "5.10";
        assert_eq!(
            status(&checks, "kernel helpers"),
            Some(if fallback { "warn" } else { "ok" }),
            "{kernel}: which programs were loaded"
        );
        assert_eq!(r["doctor_rc"], 0, "{kernel}: doctor's exit status");

        // Issue 34: the 6.x kernels capture on the fentry backend (doctor's
        // self-tests above ran on it), and 300,000 writes to a file, a
        // pipe and TCP ran none of its programs (nothing else runs in the
        // VM); 5.10 falls back to the tracepoints and says why.
        assert_eq!(
            backend(&checks),
            Some(if fallback { "tracepoint" } else { "fentry" }),
            "{kernel}: the backend --backend auto chose: {:?}",
            field(&checks, "capture backend", "detail")
        );
        let runs = untraced_runs(&checks);
        if fallback {
            assert!(
                runs.is_some_and(|n| n >= 3 * UNTRACED_WRITES),
                "{kernel}: the tracepoints ran for every write: {:?}",
                field(&checks, "untraced writes", "detail")
            );
        } else {
            assert_eq!(
                runs,
                Some(0),
                "{kernel}: fentry: no program runs for writes that are not on a unix socket: \
                 {:?}",
                field(&checks, "untraced writes", "detail")
            );
        }
        // The same kernel on the tracepoint backend: the self-tests pass
        // there too, and every one of those writes ran a program.
        let tp = r["tracepoint_doctor"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let tp_kernel = format!("{kernel} --backend tracepoint");
        assert_doctor(&tp_kernel, &tp);
        assert_eq!(
            r["tracepoint_doctor_rc"], 0,
            "{tp_kernel}: doctor's exit status"
        );
        assert_eq!(backend(&tp), Some("tracepoint"), "{tp_kernel}");
        assert!(
            untraced_runs(&tp).is_some_and(|n| n >= 3 * UNTRACED_WRITES),
            "{tp_kernel}: the tracepoints ran for every write: {:?}",
            field(&tp, "untraced writes", "detail")
        );
    }
    assert!(
        status_xtask.success(),
        "cargo xtask kernels: {status_xtask}"
    );
}
