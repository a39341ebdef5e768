//! The user's kubectl, run for three answers (the context's namespace, a
//! pod's node, the nri-trace pod on a node) and then replaced by `kubectl
//! exec` of nri-trace in that pod.
//!
//! Why kubectl and not a Kubernetes client library: a kubectl plugin runs
//! under kubectl, so it is there, and it already knows the user's
//! kubeconfig, contexts, exec credential plugins and proxies; `exec` is a
//! streamed, upgraded connection (SPDY or WebSocket) with terminal resizes
//! that kubectl does right. A library would bring a second implementation
//! of each, for three GETs.

use std::{
    ffi::OsString,
    io::IsTerminal,
    os::unix::process::CommandExt,
    process::{Command, Stdio},
};

use anyhow::{anyhow, bail, Context, Result};

/// The nri-trace DaemonSet's pods: where to look for them.
pub(crate) struct NriTracePods {
    pub namespace: String,
    pub selector: String,
}

/// nri-trace's record filter (`--pod`, `-n`).
#[derive(clap::Args)]
pub(crate) struct Filter {
    /// Only records about this pod.
    #[arg(long, value_name = "NAME")]
    pub pod: Option<String>,
    /// Only records about pods of this namespace.
    #[arg(short = 'n', long, value_name = "NS")]
    pub namespace: Option<String>,
}

impl Filter {
    fn args(&self) -> Vec<String> {
        let mut a = vec![];
        if let Some(p) = &self.pod {
            a.extend(["--pod".into(), p.clone()]);
        }
        if let Some(n) = &self.namespace {
            a.extend(["-n".into(), n.clone()]);
        }
        a
    }
}

/// `nri-trace explain NS/POD REST...`: the pod as `kubectl get pods` names
/// it, in the namespace/name form explain takes.
pub(crate) fn explain_args(namespace: &str, pod: &str, rest: &[String]) -> Vec<String> {
    let mut a = vec!["explain".to_string(), format!("{namespace}/{pod}")];
    a.extend(rest.iter().cloned());
    a
}

/// `nri-trace watch [-o FORMAT] [filter] REST...`.
pub(crate) fn watch_args(output: Option<&str>, filter: &Filter, rest: &[String]) -> Vec<String> {
    let mut a = vec!["watch".to_string()];
    if let Some(o) = output {
        a.extend(["-o".into(), o.into()]);
    }
    a.extend(filter.args());
    a.extend(rest.iter().cloned());
    a
}

/// `nri-trace report [filter] REST...`: the flight recorder's directory is
/// report's default when it exists (the DaemonSet's `record --dir`).
pub(crate) fn report_args(filter: &Filter, rest: &[String]) -> Vec<String> {
    let mut a = vec!["report".to_string()];
    a.extend(filter.args());
    a.extend(rest.iter().cloned());
    a
}

/// The pod to exec into among `kubectl get pods` lines of `NAME PHASE
/// DELETION`: a Running one that is not being deleted.
fn pick_running(lines: &str) -> std::result::Result<String, Vec<String>> {
    let mut seen = vec![];
    for l in lines.lines().filter(|l| !l.trim().is_empty()) {
        let mut f = l.split('\t');
        let (name, phase, deleting) = (
            f.next().unwrap_or_default(),
            f.next().unwrap_or_default(),
            f.next().unwrap_or_default(),
        );
        if phase == "Running" && deleting.is_empty() {
            return Ok(name.to_string());
        }
        seen.push(if deleting.is_empty() {
            format!("{name} ({phase})")
        } else {
            format!("{name} ({phase}, being deleted)")
        });
    }
    Err(seen)
}

/// The user's kubectl with their --kubeconfig and --context.
pub(crate) struct Kubectl {
    bin: OsString,
    global: Vec<String>,
}

impl Kubectl {
    pub(crate) fn new(kubeconfig: Option<String>, context: Option<String>) -> Self {
        let mut global = vec![];
        if let Some(k) = kubeconfig {
            global.extend(["--kubeconfig".into(), k]);
        }
        if let Some(c) = context {
            global.extend(["--context".into(), c]);
        }
        Kubectl {
            bin: std::env::var_os("KUBECTL").unwrap_or_else(|| "kubectl".into()),
            global,
        }
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.bin);
        c.args(&self.global).args(args);
        c
    }

    /// kubectl's standard output; its own error message when it fails.
    fn output(&self, args: &[&str]) -> Result<String> {
        let out = self
            .command(args)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| self.not_run(&e))?;
        if !out.status.success() {
            bail!(
                "{} (kubectl {})",
                String::from_utf8_lossy(&out.stderr).trim(),
                args.join(" ")
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    fn not_run(&self, e: &std::io::Error) -> anyhow::Error {
        if e.kind() == std::io::ErrorKind::NotFound {
            anyhow!(
                "{} not found: install kubectl, or set $KUBECTL to its path",
                self.bin.to_string_lossy()
            )
        } else {
            anyhow!("running {}: {e}", self.bin.to_string_lossy())
        }
    }

    /// The current context's namespace, as kubectl defaults it.
    pub(crate) fn current_namespace(&self) -> Result<String> {
        let ns = self.output(&["config", "view", "--minify", "-o", "jsonpath={..namespace}"])?;
        Ok(if ns.is_empty() { "default".into() } else { ns })
    }

    /// The node pod NS/NAME is scheduled to.
    pub(crate) fn node_of_pod(&self, namespace: &str, pod: &str) -> Result<String> {
        let node = self
            .output(&[
                "get",
                "pod",
                pod,
                "-n",
                namespace,
                "-o",
                "jsonpath={.spec.nodeName}",
            ])
            .with_context(|| {
                format!(
                    "finding the node of pod {namespace}/{pod} (a pod gone from the API: give \
                     the node it ran on with --node)"
                )
            })?;
        if node.is_empty() {
            bail!(
                "pod {namespace}/{pod} is not scheduled to a node (its spec.nodeName is empty): \
                 no node holds it; `kubectl describe pod -n {namespace} {pod}` says why"
            );
        }
        Ok(node)
    }

    /// That the cluster knows `node`.
    pub(crate) fn check_node(&self, node: &str) -> Result<()> {
        self.output(&["get", "node", node, "-o", "name"])
            .with_context(|| format!("node {node} (`kubectl get nodes` lists them)"))?;
        Ok(())
    }

    /// The nri-trace pod running on `node`.
    pub(crate) fn nri_trace_pod_on(&self, pods: &NriTracePods, node: &str) -> Result<String> {
        let field = format!("spec.nodeName={node}");
        let lines = self.output(&[
            "get",
            "pods",
            "-n",
            &pods.namespace,
            "-l",
            &pods.selector,
            "--field-selector",
            &field,
            "-o",
            "jsonpath={range .items[*]}{.metadata.name}{\"\\t\"}{.status.phase}{\"\\t\"}\
             {.metadata.deletionTimestamp}{\"\\n\"}{end}",
        ])?;
        pick_running(&lines).map_err(|seen| {
            let list = format!(
                "kubectl get pods -n {} -l {} -o wide",
                pods.namespace, pods.selector
            );
            if seen.is_empty() {
                anyhow!(
                    "no nri-trace pod on node {node} (namespace {}, selector {}): apply the \
                     DaemonSet (kubectl apply -f deploy/daemonset.yaml, deploy/README.md) and \
                     check its pod was scheduled there: {list}",
                    pods.namespace,
                    pods.selector
                )
            } else {
                anyhow!(
                    "the nri-trace pod on node {node} is not running: {}; `kubectl describe pod \
                     -n {} NAME` says why",
                    seen.join(", "),
                    pods.namespace
                )
            }
        })
    }

    /// Become `kubectl exec` of nri-trace in `pod`: its output, exit code
    /// and signals are the user's. With a terminal on both ends it gets
    /// one too (-it), which the TUI needs. Returns only if kubectl could
    /// not be run.
    pub(crate) fn exec(&self, namespace: &str, pod: &str, args: &[String]) -> anyhow::Error {
        let tty = std::io::stdin().is_terminal() && std::io::stdout().is_terminal();
        let mut a: Vec<&str> = vec!["exec"];
        if tty {
            a.push("-it");
        }
        a.extend(["-n", namespace, pod, "--", "nri-trace"]);
        a.extend(args.iter().map(String::as_str));
        let e = self.command(&a).exec();
        self.not_run(&e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn nri_trace_arguments() {
        assert_eq!(
            explain_args("shop", "web-0", &strings(&["--wait", "30"])),
            strings(&["explain", "shop/web-0", "--wait", "30"])
        );
        let f = Filter {
            pod: Some("web-0".into()),
            namespace: Some("shop".into()),
        };
        assert_eq!(
            watch_args(Some("json"), &f, &[]),
            strings(&["watch", "-o", "json", "--pod", "web-0", "-n", "shop"])
        );
        let none = Filter {
            pod: None,
            namespace: None,
        };
        assert_eq!(watch_args(None, &none, &[]), strings(&["watch"]));
        assert_eq!(
            report_args(&none, &strings(&["-o", "json"])),
            strings(&["report", "-o", "json"])
        );
    }

    #[test]
    fn the_running_pod_is_picked() {
        let lines = "nri-trace-a\tPending\t\nnri-trace-b\tRunning\t2026-11-30T10:00:00Z\n\
                     nri-trace-c\tRunning\t\n";
        assert_eq!(pick_running(lines), Ok("nri-trace-c".into()));
        assert_eq!(
            pick_running("nri-trace-a\tPending\t\n"),
            Err(vec!["nri-trace-a (Pending)".to_string()])
        );
        assert_eq!(
            pick_running("nri-trace-b\tRunning\t2026-11-30T10:00:00Z\n"),
            Err(vec!["nri-trace-b (Running, being deleted)".to_string()])
        );
        assert_eq!(pick_running(""), Err(vec![]));
    }
}
