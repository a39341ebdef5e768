//! End to end against the lab: `nri-trace watch` traces the lab's real
//! runtime while a scenario drives it, and its records must show
//! every delivery the test plugins recorded (plugin, method, event, pod,
//! container, outcome, and hook time within 1 ms of the plugin's own
//! handler time; for a call begun before the capture followed the plugin's
//! end, the runtime's wait must enclose the handler, see
//! `nri_check::compare`). The raw capture it saved must replay to the same
//! output.
//!
//! The happy, plugin-timeout, slow-plugin, teardown-error and
//! upstream-witness deliveries are checked so on every runtime by
//! trace_lab/ (`check_happy`, `check_upstream_witness` and the others,
//! on the run those tests make); here: the split Synchronize of
//! containerd 2.1 and CRI-O.
//!
//! Needs root, the eBPF object and the lab: under CI=true a missing
//! requirement fails the test; elsewhere the test says why it skips.

mod lab_trace;
mod nri_check;
mod output_check;
mod record_schema;
mod trace_check;
mod truth_file;

use std::path::Path;

use nri_trace::{
    engine::Record,
    model::{NriOutcome, Observation},
};

/// Live output equals the replay of the raw capture, line for line; the
/// records check out against the truth (`nri_check::assert_every_delivery`).
/// Returns the records.
fn check(scenario: &str, out: &Path) -> Vec<Record> {
    let records = lab_trace::live_equals_replay(scenario, out).records;
    let truth = truth_file::read(&out.join("truth.ndjson"));
    nri_check::assert_every_delivery(scenario, &truth, &records, &lab_trace::raw_events(out));
    records
}

/// containerd 2.1 (NRI 0.8) splits Synchronize when its state is over
/// ttrpc's 4 MiB message limit (containerd/nri v0.8.0
/// `pkg/adaptation/plugin.go` `synchronize`, `recalcObjsPerSyncMsg`): the
/// `split-synchronize` scenario makes 12 pods of 480 KiB of annotations,
/// then registers a plugin. nri-trace must show each part as the plugin
/// received it (same pods, in order, the same container count), `more` on
/// all but the last, and every big message's mux frames reassembled (no
/// resynchronization on the plugin's connection). The Go peer writes each
/// ttrpc message through a 4 KiB `bufio.Writer`, so a message near 4 MiB
/// reaches the mux as a 4096-byte frame and one frame of the rest (never
/// over the mux's `maxPayloadSize`, which is what makes v0.8's `mux.write`
/// split a frame): the test reports the frames it saw.
#[test]
fn split_synchronize_reassembled_on_containerd_2_1() {
    split_synchronize_on("nri-lab", nri_trace_lab::labctl::Runtime::Containerd21);
}

/// As [`split_synchronize_reassembled_on_containerd_2_1`] on CRI-O (1.36.3:
/// NRI 0.11.0, the same `synchronize`; its containers are bigger, so
/// it splits into more, smaller parts).
#[test]
fn crio_split_synchronize_reassembled() {
    split_synchronize_on("nri-lab-crio", nri_trace_lab::labctl::Runtime::CriO);
}

/// As [`split_synchronize_reassembled_on_containerd_2_1`] on containerd
/// 2.3.7 (NRI 0.12: the same `synchronize` split).
#[test]
fn split_synchronize_reassembled_on_containerd_2_3() {
    split_synchronize_on(
        "nri-lab-ctrd23",
        nri_trace_lab::labctl::Runtime::Containerd23,
    );
}

fn split_synchronize_on(group: &str, runtime: nri_trace_lab::labctl::Runtime) {
    // ttrpc's whole message limit per syscall (MAX_SNAP, 4 MiB): containerd
    // may write a split part of nearly 4 MiB in one write(2) when the
    // plugin reads fast (1,719,132 bytes once in CI, 2026-11-27), and the
    // default --snap-len of 1 MiB then cuts it (the rest lost, the stream
    // resynchronized, said in docs/nri.md). The test is of the reassembly.
    // And a 64 MiB ring: the parts go through the ring twice (the
    // runtime's end and the plugin's), about 12 MB in a burst on CRI-O,
    // and the 16 MiB default overflowed under a load average of 8 on 2
    // cores (2026-11-28: 146 records, 2.3 MB, counted and placed over a
    // part of 10-late's Synchronize), which proves nothing about reassembly.
    let snap = nri_trace_common::MAX_SNAP.to_string();
    let ring = (64u32 << 20).to_string();
    let Some(out) = lab_trace::run_traced_on(
        group,
        "split-synchronize",
        Some(runtime),
        lab_trace::TraceProc::with_args(&["--snap-len", &snap, "--ring-bytes", &ring]),
    ) else {
        return;
    };
    let records = check("split-synchronize", &out);
    let calls = nri_check::calls(&records);
    let syncs: Vec<_> = calls
        .iter()
        .filter(|c| c.plugin.label() == "10-late" && c.method_name() == Some("Synchronize"))
        .collect();

    let truth = truth_file::read(&out.join("truth.ndjson"));
    let parts: Vec<(Vec<String>, usize)> = truth
        .iter()
        .filter_map(|t| match t {
            nri_trace_lab::truth::Truth::Plugin {
                plugin,
                what:
                    nri_trace_lab::truth::PluginEvent::Synchronized {
                        pods, containers, ..
                    },
                ..
            } if plugin == "late" => {
                Some((pods.iter().map(|p| p.id.clone()).collect(), *containers))
            }
            _ => None,
        })
        .collect();
    assert!(parts.len() >= 2, "the runtime did not split: {parts:?}");
    assert_eq!(
        syncs.len(),
        parts.len(),
        "nri-trace's Synchronize calls of 10-late vs the messages the plugin got"
    );
    for (i, (call, (pods, containers))) in syncs.iter().zip(&parts).enumerate() {
        let last = i + 1 == parts.len();
        assert_eq!(call.outcome, NriOutcome::Ok, "part {i}: {call:?}");
        assert_eq!(&call.synchronized_pods, pods, "part {i}: pods");
        let want = format!(
            "{} pods, {containers} containers{}",
            pods.len(),
            if last { "" } else { ", more to come" }
        );
        assert!(
            call.summary.starts_with(&want),
            "part {i}: summary {:?}, expected it to start {want:?}",
            call.summary
        );
    }

    // The runtime -> plugin bytes of the plugin's connection, through the
    // multiplexer alone: every frame, no resynchronization.
    let events = lab_trace::raw_events(&out);
    let conn = syncs[0].conn;
    let mut mux = nri_trace::testing::nri::mux::MuxDecoder::new();
    let (mut frames, mut largest, mut truncated, mut largest_write) =
        (0usize, 0usize, 0usize, 0u64);
    for e in &events {
        let nri_trace::capture::CaptureEvent::Chunk(c) = e else {
            continue;
        };
        if c.conn != conn || c.direction != nri_trace::capture::Direction::Out {
            continue;
        }
        truncated += usize::from(c.truncated || c.gap_before);
        largest_write = largest_write.max(c.syscall_len);
        mux.push(&c.bytes);
        while let Some((ev, _)) = mux.next_with_end() {
            match ev {
                nri_trace::testing::nri::mux::MuxEvent::Frame { payload, .. } => {
                    frames += 1;
                    largest = largest.max(payload.len());
                }
                other @ nri_trace::testing::nri::mux::MuxEvent::Resync { .. } => {
                    panic!("runtime -> 10-late: {other:?}")
                }
            }
        }
    }
    eprintln!(
        "split-synchronize: {} parts (pods, containers) {:?}; runtime -> plugin: {frames} mux frames, \
         largest payload {largest} bytes, largest write(2) {largest_write} bytes",
        parts.len(),
        parts.iter().map(|p| (p.0.len(), p.1)).collect::<Vec<_>>()
    );
    assert_eq!(truncated, 0, "capture holes on the plugin's connection");
    assert!(
        largest > 3 << 20,
        "largest mux frame {largest} bytes: the split messages should be near 4 MiB"
    );

    // The conformance table's Synchronize clause takes the parts together:
    // every pod the driver made is listed in one of them, as the plugin's
    // own records say (trace_check::sync_clause_expected).
    let want = trace_check::sync_clause_expected(&truth);
    let listed: usize = parts.iter().map(|p| p.0.len()).sum();
    assert_eq!(want, (listed as u64, 0), "the truth");
    let clause: Vec<serde_json::Value> = lab_trace::json_lines(&out, "conformance")
        .into_iter()
        .filter(|c| c["clause"] == "synchronize-tells-existing-pods")
        .collect();
    assert_eq!(clause.len(), 1, "{clause:?}");
    assert_eq!(
        (clause[0]["held"].as_u64(), clause[0]["broken"].as_u64()),
        (Some(want.0), Some(want.1)),
        "{clause:?}"
    );

    // Plugin 20-stale answers the split as a pre-v0.7 stub does (`more`
    // false); the scenario's verify saw the runtime close it after the
    // first part. nri-trace: its part with the answer, the
    // split-synchronize-reply finding (certain) for it alone, and the
    // close; its failed registration decides nothing in the clause above.
    let stale: Vec<_> = calls
        .iter()
        .filter(|c| c.plugin.label() == "20-stale" && c.method_name() == Some("Synchronize"))
        .collect();
    assert_eq!(stale.len(), 1, "{stale:?}");
    assert_eq!(
        stale[0].split_part,
        Some(nri_trace::model::SplitPart {
            reply_more: Some(false),
            reply_updates: 0
        }),
        "{:?}",
        stale[0]
    );
    assert!(syncs[..syncs.len() - 1].iter().all(|c| c
        .split_part
        .is_some_and(|p| p.follows_protocol() == Some(true))));
    let split_findings: Vec<_> = trace_check::findings(&records)
        .into_iter()
        .filter(|(rule, _, _)| *rule == nri_trace::engine::contract::SPLIT_SYNCHRONIZE_REPLY.id)
        .collect();
    assert_eq!(
        split_findings,
        vec![(
            nri_trace::engine::contract::SPLIT_SYNCHRONIZE_REPLY.id,
            Some("20-stale".to_string()),
            true
        )]
    );
    assert!(records.iter().any(|r| matches!(
        r,
        Record::Observed(Observation::NriPluginGone { plugin, .. }) if plugin.label() == "20-stale"
    )));
}
