//! The integration tests that need no root, eBPF or lab (the unit tier,
//! xtask/src/tiers.rs): the committed recordings replayed, the commands
//! as a user runs them, the wire versions no lab runtime speaks, the
//! record files, the flight recorder, the TUI in a pseudo-terminal and the
//! code's own shape.
//!
//! One test binary, as ripgrep keeps its integration tests (tests/tests.rs
//! there): each binary links nri-trace and its dependencies anew, and nine
//! of them cost the suite's test build nine links. The modules are the
//! former binaries, so `cargo test --test offline cri_replay::` runs what
//! `--test cri_replay` ran.

#[path = "../cri_check/mod.rs"]
mod cri_check;
#[path = "../lab_trace/mod.rs"]
mod lab_trace;
#[path = "../nri_check/mod.rs"]
mod nri_check;
#[path = "../output_check/mod.rs"]
mod output_check;
#[path = "../record_schema/mod.rs"]
mod record_schema;
#[path = "../replay_util/mod.rs"]
mod replay_util;
#[path = "../trace_check/mod.rs"]
mod trace_check;
#[path = "../truth_file/mod.rs"]
mod truth_file;

mod architecture;
mod cli;
mod cri_replay;
mod nri_replay;
mod nri_wire_versions;
mod record_file;
mod recorder;
mod trace_replay;
mod tui_pty;
