//! What the fuzz targets share: how an input becomes a stream cut into
//! pushes with losses in it, and the lab recordings the structure-aware
//! target damages. No decoding here: every target calls nri-trace's own
//! public entry points (docs/fuzzing.md).

use std::{
    path::{Path, PathBuf},
    sync::OnceLock,
};

use nri_trace::{
    capture::CaptureEvent,
    store::raw_capture,
    testing::{cri::hpack, nri::message},
};

/// One piece of a captured stream as a decoder receives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Piece<'a> {
    /// Bytes pushed in one call.
    Bytes(&'a [u8]),
    /// Bytes lost here (the ring overflowed): the decoder's `gap()`.
    Gap,
}

/// Bytes of control at the head of a stream input: [`pieces`].
pub const STREAM_HEADER: usize = 2;

/// A small deterministic PRNG (xorshift64*, Vigna 2016): the cut lengths
/// follow from the input's control byte, so a crash file replays exactly.
pub struct XorShift(u64);

impl XorShift {
    pub fn new(seed: u64) -> Self {
        // xorshift must not start at 0.
        XorShift(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A value in `0..n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// The stream an input describes, as pushes and gaps.
///
/// Input layout: byte 0 picks the cut lengths (its low 2 bits the largest
/// push: 1, 7, 64 or 4096 bytes; the rest seeds the lengths), byte 1 the
/// losses (0: none; `n`: every `n`-th push is lost, i.e. dropped and
/// reported as a gap), then the stream bytes. Seeds start with `[3, 0]`:
/// pushes of up to 4 KiB, no loss.
pub fn pieces(data: &[u8]) -> Vec<Piece<'_>> {
    let (cut, loss, mut rest) = match data {
        [cut, loss, rest @ ..] => (*cut, *loss, rest),
        _ => return vec![Piece::Bytes(data)],
    };
    let max = [1, 7, 64, 4096][usize::from(cut & 3)];
    let mut rng = XorShift::new(u64::from(cut >> 2));
    let mut out = Vec::new();
    let mut n = 0usize;
    while !rest.is_empty() {
        let len = (1 + rng.below(max)).min(rest.len());
        let (head, tail) = rest.split_at(len);
        rest = tail;
        n += 1;
        if loss != 0 && n % usize::from(loss) == 0 {
            out.push(Piece::Gap);
        } else {
            out.push(Piece::Bytes(head));
        }
    }
    out
}

/// Split `data` at the 4-byte marker `SEP` into parts: how the targets
/// whose input is several messages (header blocks, a request and its
/// response) take them.
pub const SEP: &[u8; 4] = b"\xfe\xed\xfa\xce";

pub fn parts(data: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut rest = data;
    while let Some(at) = rest.windows(SEP.len()).position(|w| w == SEP) {
        out.push(&rest[..at]);
        rest = &rest[at + SEP.len()..];
    }
    out.push(rest);
    out
}

/// The lab recordings under tests/fixtures: raw captures (CaptureEvent
/// lines) of real containerd/NRI/CRI traffic.
pub fn fixture_paths() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures");
    let mut out = Vec::new();
    for group in ["cri", "nri", "trace"] {
        let Ok(dirs) = std::fs::read_dir(root.join(group)) else {
            continue;
        };
        for d in dirs.flatten() {
            let p = d.path().join("recording.ndjson.gz");
            if p.is_file() {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// Every lab recording's events, read once per process.
pub fn recordings() -> &'static [(PathBuf, Vec<CaptureEvent>)] {
    static ALL: OnceLock<Vec<(PathBuf, Vec<CaptureEvent>)>> = OnceLock::new();
    ALL.get_or_init(|| {
        let all: Vec<_> = fixture_paths()
            .into_iter()
            .map(|p| {
                let events = raw_capture::read_file(&p)
                    .unwrap_or_else(|e| panic!("reading {}: {e}", p.display()));
                (p, events)
            })
            .collect();
        assert!(
            !all.is_empty(),
            "no lab recordings under tests/fixtures (run from the checkout)"
        );
        all
    })
}

/// Decode the header blocks of `data` (parts split at [`SEP`]) with
/// `dec`, in order; a one-byte part `n` sets the table size bound to
/// `n * 64` instead, and every unknown slot a block names is taught a name
/// and value cut from that block (what the CRI assembler's inference
/// does), so that later blocks take the learned path. Asserts after every
/// block that the table stays within its bounds.
pub fn hpack_blocks(dec: &mut hpack::Decoder, data: &[u8]) {
    for block in parts(data) {
        if let [n] = block {
            dec.set_max_table_size(usize::from(*n) * 64);
            continue;
        }
        let decoded = dec.decode(block);
        // RFC 7541 §4.2-4.4: the entries fit the table's current maximum
        // size, and that is bounded (TABLE_SIZE_CAP), whatever the block
        // said: the table's memory is bounded.
        assert!(dec.table_size() <= dec.capacity());
        assert!(dec.capacity() <= hpack::TABLE_SIZE_CAP);
        let Ok(decoded) = decoded else {
            continue;
        };
        for field in &decoded.fields {
            if let hpack::Field::Unknown { slot, .. } = field {
                let (name, value) = block.split_at(block.len() / 2);
                let _ = dec.learn(*slot, name, value);
            }
        }
        let _ = dec.dynamic_entries();
    }
}

/// Every NRI method (proto/nri/v1alpha1/api.proto, services Runtime and
/// Plugin), through the decoder's own wire-name table.
pub fn nri_methods() -> impl Iterator<Item = message::Method> {
    const RUNTIME: [&str; 2] = ["RegisterPlugin", "UpdateContainers"];
    const PLUGIN: [&str; 18] = [
        "Configure",
        "Synchronize",
        "Shutdown",
        "StateChange",
        "RunPodSandbox",
        "StopPodSandbox",
        "RemovePodSandbox",
        "CreateContainer",
        "PostCreateContainer",
        "StartContainer",
        "PostStartContainer",
        "UpdateContainer",
        "PostUpdateContainer",
        "StopContainer",
        "RemoveContainer",
        "UpdatePodSandbox",
        "PostUpdatePodSandbox",
        "ValidateContainerAdjustment",
    ];
    let runtime = RUNTIME
        .iter()
        .filter_map(|m| message::Method::from_wire(message::RUNTIME_SERVICE, m));
    let plugin = PLUGIN
        .iter()
        .filter_map(|m| message::Method::from_wire(message::PLUGIN_SERVICE, m));
    runtime.chain(plugin)
}

/// The lab's sockets (lab/lab.sh), as the capture targets name them.
pub const CRI_SOCKET: &str = "/var/lib/nri-trace-lab/run/containerd.sock";
pub const NRI_SOCKET: &str = "/var/lib/nri-trace-lab/run/nri.sock";
