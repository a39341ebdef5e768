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
//!   lines of the record file `nri-trace watch --save` writes
//!   (`store::record_file`).
//!
//! This stage knows nothing of the engine or the sinks after it.

pub(crate) mod cri_call;
pub(crate) mod cri_client;
pub(crate) mod nri_call;
pub(crate) mod observation;
pub(crate) mod plugin_identity;

// The model's types, one namespace for every stage after it (issue 35).
pub use cri_call::TraceContext;
pub use cri_call::{
    CallMethod, ContainerMeta, CriCall, CriMethod, CriObservation, CriOutcome, CriService,
    CriStats, Effect, Identified, ObjectKind, PodMeta,
};
pub use cri_client::CriClient;
pub use nri_call::{
    Adjustment, Caller, ConfiguredRuntime, ContainerRef, Event, IdentitySource, NriCall, NriMethod,
    NriObservation, NriOutcome, NriVersions, PluginId, PodRef, SplitPart,
};
pub use observation::Observation;
pub use plugin_identity::{Clue, Confidence, InferredIdentity};
