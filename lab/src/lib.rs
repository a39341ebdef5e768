//! The nri-trace lab: tools that make a private containerd do real work, and
//! record what they did as ground truth for nri-trace's tests.
//!
//! - `cri` / `bin/cri-driver`: a kubelet-like CRI client.
//! - `nri_plugin` / `bin/nri-test-plugin`: fault-injecting NRI plugins.
//! - `nri_runtime` / `bin/nri-rate`: the runtime side of NRI, delivering
//!   events to the test plugins at a given rate (the rate benchmark).
//! - `truth`: the ground-truth records both write (NDJSON).
//! - `volume`: the driver's pod volumes (kubelet's emptyDir layout).
//! - `stuck`: pods left Terminating for each cause, the driver retrying.
//! - `crictl`: the `crictl` scenario, crictl (lab/crictl.sh) beside the
//!   driver.
pub mod cri;
pub mod crictl;
pub mod labctl;
pub mod nri_api;
pub mod nri_plugin;
pub mod nri_runtime;
pub mod scenario;
pub mod stuck;
pub mod truth;
pub mod volume;
