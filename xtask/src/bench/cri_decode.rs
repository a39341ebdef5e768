//! The cri-decode part: the same as nri-decode for recorded CRI streams
//! (HTTP/2, HPACK, gRPC), with the cost of method inference beside it
//! (`nri-trace/benches/cri_decode.rs`; no probes, no root needed either).

use anyhow::{Context, Result};

use super::criterion::{input_field, input_number, run_decode_bench};

// ------------------------------------------------- part f: CRI decoding

/// The benchmarks of `nri-trace/benches/cri_decode.rs`: (name, what it
/// runs); criterion id `cri_decode/<name>/<input>`.
const CRI_DECODE: [(&str, &str); 4] = [
    (
        "full",
        "the pipeline's decoder stage (`TraceDecoder`): HTTP/2 framing, HPACK, gRPC reassembly, \
         streams, method inference, protobuf, identity, observations",
    ),
    (
        "framing",
        "HTTP/2 framing + HPACK + gRPC message reassembly only, every event drained",
    ),
    (
        "prost_only",
        "protobuf decoding only of the messages the pipeline decodes, typed by the call's \
         (seen or inferred) method",
    ),
    (
        "shape_inference",
        "`message::candidates` over the messages of the calls whose :path was hidden",
    ),
];

/// The inputs of `cri_decode.rs` (criterion parameters), headline first.
const CRI_INPUTS: [&str; 2] = ["grpc-go", "tonic"];

pub(super) struct CriDecode {
    inputs: Vec<CriInput>,
    /// The CPU the bench ran on, if pinned.
    cpu: Option<&'static str>,
}

struct CriInput {
    name: &'static str,
    /// The bench's `cri_decode input:` line for it, as printed.
    input: String,
    bytes: f64,
    calls: f64,
    /// criterion medians (ns per run over the whole recording), in the
    /// order of [`CRI_DECODE`]; `None`: not run (no hidden call).
    ns: [Option<f64>; 4],
}

/// Build and run the cri_decode criterion bench, then read its medians.
pub(super) fn cri_decode(quick: bool) -> Result<CriDecode> {
    let id = |name: &str, input: &str| format!("cri_decode/{name}/{input}");
    let ids: Vec<String> = CRI_INPUTS
        .iter()
        .flat_map(|i| CRI_DECODE.iter().map(move |(n, _)| id(n, i)))
        .collect();
    let run = run_decode_bench("cri_decode", &ids, quick)?;
    let mut inputs = Vec::new();
    for name in CRI_INPUTS {
        let input = run
            .inputs
            .iter()
            .find(|l| input_field(l, "fixture").is_ok_and(|f| f == name))
            .with_context(|| format!("the cri_decode bench printed no input line for {name}"))?
            .clone();
        let hidden = input_number(&input, "hidden")?;
        let mut ns = [None; 4];
        for (slot, (bench, _)) in ns.iter_mut().zip(CRI_DECODE) {
            // The bench skips shape_inference when no :path was hidden.
            if bench != "shape_inference" || hidden > 0.0 {
                *slot = Some(run.median_ns(&id(bench, name))?);
            }
        }
        inputs.push(CriInput {
            name,
            bytes: input_number(&input, "bytes")?,
            calls: input_number(&input, "calls")?,
            input,
            ns,
        });
    }
    Ok(CriDecode {
        inputs,
        cpu: run.cpu,
    })
}

// ---------------------------------------------------------------- report

pub(super) fn cri_decode_section(d: &CriDecode) -> String {
    let mut s = format!(
        "## CRI decode throughput\n\n\
         One run = the whole recording, on one core ({}); criterion medians. \
         MB/s = captured payload bytes (10^6) per second. Headline: `{}`.\n\n",
        d.cpu.map_or_else(
            || "not pinned".to_string(),
            |c| format!("pinned to CPU {c}")
        ),
        CRI_INPUTS[0]
    );
    for i in &d.inputs {
        s += &format!("Input `{}`: `{}`\n\n", i.name, i.input);
    }
    s += "| input | benchmark | what it runs | time per run (us) | MB/s | calls/s |\n\
          | --- | --- | --- | ---: | ---: | ---: |\n";
    for i in &d.inputs {
        for ((label, what), ns) in CRI_DECODE.iter().zip(i.ns) {
            let Some(ns) = ns else { continue };
            s += &format!(
                "| {} | {label} | {what} | {:.1} | {:.1} | {:.0} |\n",
                i.name,
                ns / 1e3,
                i.bytes * 1e3 / ns,
                i.calls * 1e9 / ns
            );
        }
    }
    for i in &d.inputs {
        let [Some(full), Some(framing), Some(prost), shapes] = i.ns else {
            continue;
        };
        let rest = full - prost;
        s += &format!(
            "\n`{}`: full = {:.2} x prost_only; framing + bookkeeping (full - prost_only): \
             {:.1} us = {:.2} x prost_only; bookkeeping alone (full - prost_only - framing): \
             {:.1} us = {:.2} x prost_only",
            i.name,
            full / prost,
            rest / 1e3,
            rest / prost,
            (rest - framing) / 1e3,
            (rest - framing) / prost
        );
        if let Some(shapes) = shapes {
            s += &format!(
                "; shape_inference: {:.1} us = {:.2} x prost_only",
                shapes / 1e3,
                shapes / prost
            );
        }
        s += ".\n";
    }
    s
}
