//! The model stage: typed calls and events, built from decoded messages.
//!
//! - [`nri_call`]: [`nri_call::NriCall`]s — every NRI request matched with
//!   its response, the plugin it went to, and how it ended.
//!
//! This stage knows nothing of the engine or the sinks after it.

pub mod nri_call;
