//! The model stage: typed calls and events (the assemblers of `assemble`
//! build them from decoded messages).
//!
//! - [`nri_call`]: [`nri_call::NriCall`]s — every NRI request matched with
//!   its response, the plugin it went to, and how it ended (matched by
//!   `assemble::nri`).
//! - [`plugin_identity`]: a plugin's `IDX-NAME` inferred from its process
//!   when its RegisterPlugin went before the capture.
//! - [`cri_call`]: [`cri_call::CriCall`]s — every CRI gRPC call on the
//!   runtime's CRI socket with its pod/container, deadline and outcome,
//!   and how its method is known (seen, inferred with evidence, unknown;
//!   `assemble::cri` makes them).
//! - [`cri_client`]: who made a CRI call ([`cri_client::CriClient`]: the
//!   pid, comm, cgroup and systemd unit of its connection's client).
//! - [`observation`]: what the engine is fed ([`observation::Observation`]:
//!   calls, plugin and connection events, loss, the capture clock), the
//!   records `nri-trace watch --save` writes.
//! - [`record_file`]: the observations as `nri-trace watch --save` writes them
//!   (versioned NDJSON, docs/schema.md), and their redaction.
//! - [`recorder`]: the flight recorder (`nri-trace record`): record-file
//!   segments in a directory, rotated and bounded in size and age.
//!
//! This stage knows nothing of the engine or the sinks after it.

pub mod cri_call;
pub mod cri_client;
pub mod nri_call;
pub mod observation;
pub mod plugin_identity;
pub mod record_file;
pub mod recorder;
