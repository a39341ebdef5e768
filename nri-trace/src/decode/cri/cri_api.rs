//! The CRI `runtime.v1` message types: the `k8s-cri` crate's (CRI v1 of
//! about Kubernetes 1.32), and those it lacks, declared here from
//! cri-api's api.proto (k8s.io/cri-api v0.36.3, the version containerd
//! 2.3.7 and CRI-O 1.36 build with, `pkg/apis/runtime/v1/api.proto`).
//!
//! Why by hand: k8s-cri 0.11 is the newest release and predates
//! UpdatePodSandboxResources (Kubernetes 1.33, KEP-1287's pod-level
//! resize), which containerd 2.3 answers and relays to the NRI plugins as
//! UpdatePodSandbox and PostUpdatePodSandbox
//! (internal/cri/server/sandbox_update_resources.go). Two messages do not
//! justify a second proto build.

pub(crate) use k8s_cri::v1::*;

/// api.proto `UpdatePodSandboxResourcesRequest`.
#[derive(Clone, PartialEq, prost_cri::Message, serde::Serialize, serde::Deserialize)]
#[prost(prost_path = "::prost_cri")]
pub(crate) struct UpdatePodSandboxResourcesRequest {
    /// ID of the PodSandbox to update.
    #[prost(string, tag = "1")]
    pub pod_sandbox_id: ::prost_cri::alloc::string::String,
    /// The overheads associated with this sandbox.
    #[prost(message, optional, tag = "2")]
    pub overhead: ::core::option::Option<LinuxContainerResources>,
    /// The sum of the container resources of this sandbox.
    #[prost(message, optional, tag = "3")]
    pub resources: ::core::option::Option<LinuxContainerResources>,
}

/// api.proto `UpdatePodSandboxResourcesResponse`: empty.
#[allow(
    clippy::empty_structs_with_brackets,
    reason = "a braced struct, as prost-build writes an empty message"
)]
#[derive(Clone, Copy, PartialEq, Eq, prost_cri::Message, serde::Serialize, serde::Deserialize)]
#[prost(prost_path = "::prost_cri")]
pub(crate) struct UpdatePodSandboxResourcesResponse {}
