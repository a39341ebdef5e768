//! The nri-decode part: decode throughput of a recorded NRI stream, the
//! whole pipeline against its framing layers and its protobuf decoding
//! alone (`nri-trace/benches/nri_decode.rs`; no probes, no root needed:
//! run alone, it skips the eBPF build and the tool checks).

use anyhow::Result;

use super::criterion::{input_number, run_decode_bench};

// ------------------------------------------------- part e: NRI decoding

/// The benchmarks of `nri-trace/benches/nri_decode.rs`: (criterion id,
/// label, what it runs).
const NRI_DECODE: [(&str, &str, &str); 4] = [
    (
        "nri_decode/full",
        "full",
        "the pipeline's decoder stage (`TraceDecoder`): routing, framing, protobuf, matching, \
         plugin identity, observations",
    ),
    (
        "nri_decode/assembler",
        "assembler",
        "the call assembler alone: framing, protobuf, matching (no hook timing)",
    ),
    (
        "nri_decode/framing",
        "framing",
        "mux + ttrpc framing only, every message drained",
    ),
    (
        "nri_decode/prost_only",
        "prost_only",
        "protobuf decoding only (envelope + typed body) of the messages the pipeline decodes",
    ),
];

pub(super) struct NriDecode {
    /// The bench's `nri_decode input:` line, as printed.
    input: String,
    bytes: f64,
    messages: f64,
    /// criterion medians (ns per run over the whole recording), in the
    /// order of [`NRI_DECODE`].
    ns: [f64; 4],
    /// The CPU the bench ran on, if pinned.
    cpu: Option<&'static str>,
}

impl NriDecode {
    fn full(&self) -> f64 {
        self.ns[0]
    }

    fn assembler(&self) -> f64 {
        self.ns[1]
    }

    fn framing(&self) -> f64 {
        self.ns[2]
    }

    pub(super) fn prost(&self) -> f64 {
        self.ns[3]
    }

    /// Framing and bookkeeping: the pipeline minus its protobuf decoding.
    pub(super) fn rest(&self) -> f64 {
        self.full() - self.prost()
    }
}

/// Build and run the nri_decode criterion bench, then read its medians.
pub(super) fn nri_decode(quick: bool) -> Result<NriDecode> {
    let ids = NRI_DECODE.map(|(id, _, _)| id.to_string());
    let run = run_decode_bench("nri_decode", &ids, quick)?;
    let input = run.inputs[0].clone();
    let mut ns = [0.0; 4];
    for (slot, id) in ns.iter_mut().zip(&ids) {
        *slot = run.median_ns(id)?;
    }
    Ok(NriDecode {
        bytes: input_number(&input, "bytes")?,
        messages: input_number(&input, "messages")?,
        input,
        ns,
        cpu: run.cpu,
    })
}

// ---------------------------------------------------------------- report

pub(super) fn nri_decode_section(d: &NriDecode) -> String {
    let mut s = format!(
        "## NRI decode throughput\n\n\
         One run = the whole recording, on one core ({}); criterion medians. \
         MB/s = captured payload bytes (10^6) per second.\n\n\
         Input: `{}`\n\n\
         | benchmark | what it runs | time per run (us) | MB/s | messages/s |\n\
         | --- | --- | ---: | ---: | ---: |\n",
        d.cpu.map_or_else(
            || "not pinned".to_string(),
            |c| format!("pinned to CPU {c}")
        ),
        d.input
    );
    for ((_, label, what), ns) in NRI_DECODE.iter().zip(d.ns) {
        s += &format!(
            "| {label} | {what} | {:.1} | {:.1} | {:.0} |\n",
            ns / 1e3,
            d.bytes * 1e3 / ns,
            d.messages * 1e9 / ns
        );
    }
    let bookkeeping = d.rest() - d.framing();
    s += &format!(
        "\nframing + bookkeeping (full - prost_only): {:.1} us = {:.2} x prost_only; \
         bookkeeping alone (full - prost_only - framing): {:.1} us = {:.2} x prost_only, \
         of which routing and observations (full - assembler): {:.1} us.\n",
        d.rest() / 1e3,
        d.rest() / d.prost(),
        bookkeeping / 1e3,
        bookkeeping / d.prost(),
        (d.full() - d.assembler()) / 1e3
    );
    s
}
