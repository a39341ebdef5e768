//! `cargo xtask cluster up|down|status`: a one-node Kubernetes cluster on
//! the lab's runtime (lab/cluster.sh; the binaries from lab/k8s.sh, built
//! from their Go modules). Issue 32.

use anyhow::Result;
use clap::Subcommand;

use crate::lab::lab_script as script;

#[derive(Subcommand)]
pub(crate) enum ClusterCmd {
    /// Build Kubernetes and etcd (once per build recipe), the runtime
    /// (likewise), then start the runtime, etcd, the API server, the
    /// controller manager, the scheduler and kubelet; idempotent. Prints
    /// `export KUBECONFIG=...`.
    Up,
    /// Delete the cluster's pods, stop every process, then the runtime;
    /// nothing is left.
    Down,
    /// What runs, the node, the pods.
    Status,
}

pub(crate) fn run_cluster(cmd: ClusterCmd, runtime: Option<&str>) -> Result<()> {
    match cmd {
        ClusterCmd::Up => {
            // Each is a no-op when built by the same recipe.
            script("lab.sh", "install", runtime.or(Some("containerd-2.3")))?;
            script("k8s.sh", "install", None)?;
            script("cluster.sh", "up", runtime)
        }
        ClusterCmd::Down => script("cluster.sh", "down", runtime),
        ClusterCmd::Status => script("cluster.sh", "status", runtime),
    }
}
