//! `kubectl nri-trace`: nri-trace from an SRE's seat, by the kubectl plugin
//! convention (an executable named `kubectl-nri_trace` on the PATH; kubectl
//! runs it for `kubectl nri-trace ...`). It finds the node a pod runs on
//! and the nri-trace pod of the DaemonSet (deploy/daemonset.yaml) on that
//! node, and runs nri-trace there with `kubectl exec`: `explain` a pod,
//! `watch` a node live, `report` a node's flight recorder. Inspektor
//! Gadget's `kubectl gadget` is the model (a node's gadget pod does the
//! work, the plugin finds it and talks to it).
//!
//! It drives the user's own `kubectl` ($KUBECTL, else `kubectl` on the
//! PATH), as a kubectl plugin runs under it: the user's kubeconfig,
//! context, credentials and exec rights are used as they are, with
//! nothing of their own to configure (kubectl.rs says why not a client
//! library).

mod kubectl;

use std::process::ExitCode;

use anyhow::Result;
use clap::{Args, Parser, Subcommand};

use kubectl::{Kubectl, NriTracePods};

#[derive(Parser)]
#[command(
    name = "kubectl nri-trace",
    bin_name = "kubectl nri-trace",
    version = concat!(env!("CARGO_PKG_VERSION"), " (", env!("NRI_TRACE_GIT_COMMIT"), ")"),
    about = "Run nri-trace on a pod's node through its nri-trace DaemonSet pod",
    after_help = "Arguments after `--` go to nri-trace as they are, e.g.\n  \
                  kubectl nri-trace watch --node node-1 -- --client kubelet"
)]
struct Cli {
    #[command(flatten)]
    cluster: ClusterArgs,
    #[command(subcommand)]
    cmd: Cmd,
}

/// How to reach the cluster and the DaemonSet's pods.
#[derive(Args)]
struct ClusterArgs {
    /// kubectl's --kubeconfig.
    #[arg(long, global = true, value_name = "FILE")]
    kubeconfig: Option<String>,
    /// kubectl's --context.
    #[arg(long, global = true, value_name = "NAME")]
    context: Option<String>,
    /// The namespace of the nri-trace DaemonSet.
    #[arg(long, global = true, default_value = "kube-system", value_name = "NS")]
    nri_trace_namespace: String,
    /// The label selector of its pods.
    #[arg(
        long,
        global = true,
        default_value = "app.kubernetes.io/name=nri-trace",
        value_name = "SELECTOR"
    )]
    selector: String,
}

#[derive(Subcommand)]
enum Cmd {
    /// Why is this pod (stuck in Terminating) not gone? Runs `nri-trace
    /// explain NS/POD` on the pod's node.
    Explain {
        /// The pod, as `kubectl get pods` names it.
        pod: String,
        /// The pod's namespace [default: the context's, else "default"].
        #[arg(short = 'n', long, value_name = "NS")]
        namespace: Option<String>,
        /// The node it ran on, for a pod already gone from the API (the
        /// node's flight recorder still has it) [default: the pod's].
        #[arg(long, value_name = "NODE")]
        node: Option<String>,
        /// nri-trace's arguments: after `--`, e.g. `-- --wait 30 -o json`.
        #[arg(last = true)]
        rest: Vec<String>,
    },
    /// Trace a node's runtime live (`nri-trace watch`): the TUI on a
    /// terminal, else text.
    Watch {
        /// Output format: tui, text or json [default: tui on a terminal,
        /// else text].
        #[arg(short, long, value_name = "FORMAT")]
        output: Option<String>,
        #[command(flatten)]
        on: OnNode,
    },
    /// Summarize a node's flight recorder (`nri-trace report`).
    Report {
        #[command(flatten)]
        on: OnNode,
    },
}

/// The node a command runs on, what nri-trace keeps of it, and more of
/// nri-trace's own arguments.
#[derive(Args)]
struct OnNode {
    /// The node.
    #[arg(long, value_name = "NODE")]
    node: String,
    #[command(flatten)]
    filter: kubectl::Filter,
    /// More nri-trace arguments, after `--`.
    #[arg(last = true)]
    rest: Vec<String>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        // `run` only returns when it could not hand over to kubectl exec.
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kubectl nri-trace: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<()> {
    let k = Kubectl::new(cli.cluster.kubeconfig, cli.cluster.context);
    let pods = NriTracePods {
        namespace: cli.cluster.nri_trace_namespace,
        selector: cli.cluster.selector,
    };
    // The node as the user named it (checked: a typo is not a missing
    // DaemonSet pod), or as the API has the pod on it.
    let (node, named, args) = match cli.cmd {
        Cmd::Explain {
            pod,
            namespace,
            node,
            rest,
        } => {
            let ns = match namespace {
                Some(ns) => ns,
                None => k.current_namespace()?,
            };
            let (node, named) = match node {
                Some(n) => (n, true),
                None => (k.node_of_pod(&ns, &pod)?, false),
            };
            (node, named, kubectl::explain_args(&ns, &pod, &rest))
        }
        Cmd::Watch { output, on } => (
            on.node,
            true,
            kubectl::watch_args(output.as_deref(), &on.filter, &on.rest),
        ),
        Cmd::Report { on } => (on.node, true, kubectl::report_args(&on.filter, &on.rest)),
    };
    if named {
        k.check_node(&node)?;
    }
    let on_node = k.nri_trace_pod_on(&pods, &node)?;
    Err(k.exec(&pods.namespace, &on_node, &args))
}
