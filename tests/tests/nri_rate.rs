//! nri-trace under a paced stream of NRI calls from a real ttrpc peer
//! (issue 23 item 4): `nri-rate` (lab/src/bin/nri-rate.rs, the runtime side
//! of NRI v0.6.1 on the `ttrpc` crate) delivers pod lifecycles to three of
//! the lab's `nri-test-plugin`s at a modest rate, `nri-trace debug nri -o
//! json` traces its socket, and every call the peer made must come out
//! decoded with its plugin, method, event, pod and container, answered ok,
//! with no capture loss. The rate's cost is a benchmark (`cargo xtask bench
//! --only nri-rate`), not asserted here.

// Only the guard of the shared helpers is used here.
#[allow(unused_imports)]
mod common;

use std::{
    collections::BTreeMap,
    io::Write as _,
    path::PathBuf,
    process::{Command, Stdio},
    time::Duration,
};

use nri_trace_tests::{stop_child, wait_for_lines, workspace_bin};
use serde_json::Value;

/// (plugin `NN-name`, method, event or "-", pod id, container id)
type CallKey = (String, String, String, String, String);

fn key(plugin: &str, method: &str, event: &str, pod: &str, container: &str) -> CallKey {
    (
        plugin.into(),
        method.into(),
        event.into(),
        pod.into(),
        container.into(),
    )
}

fn s<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    let mut v = v;
    for p in path {
        v = &v[*p];
    }
    v.as_str().unwrap_or("")
}

/// Whether the lab's binaries this test runs are built; outside CI a
/// missing one skips the test with the reason, in CI it fails.
fn lab_bins(test: &str) -> Option<(PathBuf, PathBuf)> {
    let (peer, plugin) = (workspace_bin("nri-rate"), workspace_bin("nri-test-plugin"));
    for b in [&peer, &plugin] {
        if !b.exists() {
            let why = format!(
                "{} not built: run `cargo build --workspace` (or `cargo xtask test`)",
                b.display()
            );
            assert!(
                !matches!(std::env::var("CI").as_deref(), Ok("true" | "1")),
                "{test}: {why}"
            );
            eprintln!("skipping {test}: {why}");
            return None;
        }
    }
    Some((peer, plugin))
}

#[test]
fn every_paced_nri_call_is_decoded() {
    const TEST: &str = "every_paced_nri_call_is_decoded";
    if !common::guard_cli(TEST) {
        return;
    }
    let Some((peer_bin, plugin_bin)) = lab_bins(TEST) else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("nri-trace-it-rate-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (sock, calls) = (dir.join("nri.sock"), dir.join("calls.ndjson"));
    let file = |n: &str| std::fs::File::create(dir.join(n)).unwrap();

    // The runtime side serves its socket first, as on a node.
    let mut peer = Command::new(&peer_bin)
        .arg("--socket")
        .arg(&sock)
        .arg("--plugin-bin")
        .arg(&plugin_bin)
        .args(["--plugins", "3", "--rate", "300", "--duration", "3"])
        .args(["--in-flight", "4", "--sync-pods", "3", "--wait-stdin"])
        .arg("--calls")
        .arg(&calls)
        .arg("--truth-dir")
        .arg(&dir)
        .stdin(Stdio::piped())
        .stdout(file("peer.stdout"))
        .stderr(file("peer.stderr"))
        .spawn()
        .expect("starting nri-rate");
    wait_for_lines(
        &mut peer,
        &dir.join("peer.stderr"),
        &["nri-rate: listening"],
        Duration::from_secs(30),
        "nri-rate",
    )
    .unwrap();
    let mut trace = Command::new(workspace_bin("nri-trace"))
        .args(["debug", "nri", "--socket"])
        .arg(&sock)
        .args(["-o", "json"])
        .stdin(Stdio::null())
        .stdout(file("trace.stdout"))
        .stderr(file("trace.stderr"))
        .spawn()
        .expect("starting nri-trace");
    wait_for_lines(
        &mut trace,
        &dir.join("trace.stderr"),
        &["nri-trace: ready"],
        Duration::from_mins(1),
        "nri-trace debug nri",
    )
    .unwrap();

    peer.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let st = peer.wait().unwrap();
    let peer_err = std::fs::read_to_string(dir.join("peer.stderr")).unwrap();
    assert!(st.success(), "nri-rate failed ({st}):\n{peer_err}");
    let summary: Value = serde_json::from_str(
        std::fs::read_to_string(dir.join("peer.stdout"))
            .unwrap()
            .lines()
            .find(|l| l.contains("nri_rate_summary"))
            .expect("the peer's summary"),
    )
    .unwrap();
    assert_eq!(summary["calls_failed"], 0, "{summary}");
    assert!(summary["calls_sent"].as_u64().unwrap() > 0, "{summary}");

    // What the peer sent: every call, Synchronize included.
    let mut sent: BTreeMap<CallKey, u64> = BTreeMap::new();
    for l in std::fs::read_to_string(&calls).unwrap().lines() {
        let c: Value = serde_json::from_str(l).unwrap();
        assert_eq!(c["ok"], true, "{l}");
        *sent
            .entry(key(
                s(&c, &["plugin"]),
                s(&c, &["method"]),
                c["event"].as_str().unwrap_or("-"),
                s(&c, &["pod_id"]),
                s(&c, &["container_id"]),
            ))
            .or_default() += 1;
    }
    let total: u64 = sent.values().sum();
    assert_eq!(
        total,
        summary["calls_sent"].as_u64().unwrap() + 3,
        "the calls log holds the paced calls and 3 Synchronize"
    );

    // What nri-trace decoded, once it has printed them all (a bound on the
    // wait, not a timed assertion): the runtime's calls, answered ok.
    let decoded = |text: &str| -> (BTreeMap<CallKey, u64>, Vec<String>) {
        let mut m = BTreeMap::new();
        let mut loss = vec![];
        for l in text.lines() {
            let v: Value = serde_json::from_str(l).unwrap_or(Value::Null);
            match v["type"].as_str() {
                Some("nri_call") if v["caller"] == "runtime" => {
                    if v["method"] == "Configure" {
                        continue;
                    }
                    assert_eq!(v["outcome"]["kind"], "ok", "{l}");
                    let plugin = format!(
                        "{}-{}",
                        s(&v, &["plugin", "index"]),
                        s(&v, &["plugin", "name"])
                    );
                    *m.entry(key(
                        &plugin,
                        s(&v, &["method"]),
                        v["event"].as_str().unwrap_or("-"),
                        s(&v, &["pod", "id"]),
                        s(&v, &["container", "id"]),
                    ))
                    .or_default() += 1;
                }
                Some("capture_loss") => loss.push(l.to_string()),
                _ => {}
            }
        }
        (m, loss)
    };
    let out = dir.join("trace.stdout");
    let t0 = std::time::Instant::now();
    while decoded(&std::fs::read_to_string(&out).unwrap_or_default())
        .0
        .values()
        .sum::<u64>()
        < total
        && t0.elapsed() < Duration::from_mins(1)
    {
        std::thread::sleep(Duration::from_millis(100));
    }
    stop_child(
        &mut trace,
        libc::SIGTERM,
        Duration::from_secs(30),
        "nri-trace",
    )
    .unwrap();
    let text = std::fs::read_to_string(&out).unwrap();
    let (got, loss) = decoded(&text);
    assert!(loss.is_empty(), "capture loss: {loss:?}");
    let missing: Vec<_> = sent
        .iter()
        .filter(|(k, n)| got.get(*k) != Some(*n))
        .map(|(k, n)| format!("{k:?}: sent {n}, decoded {:?}", got.get(k)))
        .collect();
    let extra: Vec<_> = got.keys().filter(|k| !sent.contains_key(*k)).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "{} of {} kinds of call not decoded as sent:\n{}\ndecoded but not sent: {extra:?}\n\
         nri-trace stderr:\n{}",
        missing.len(),
        sent.len(),
        missing.join("\n"),
        std::fs::read_to_string(dir.join("trace.stderr")).unwrap_or_default()
    );
    eprintln!(
        "{TEST}: {total} calls sent ({} distinct), every one decoded as sent, no capture loss",
        sent.len()
    );
    // Every event of a pod lifecycle went to every plugin.
    for plugin in ["10-rate-1", "20-rate-2", "30-rate-3"] {
        for event in ["RUN_POD_SANDBOX", "CREATE_CONTAINER", "REMOVE_POD_SANDBOX"] {
            assert!(
                got.keys().any(|k| k.0 == plugin && k.2 == event),
                "no {event} decoded for {plugin}"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
