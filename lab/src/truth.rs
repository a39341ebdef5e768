//! Ground truth: what the lab's driver did and got, and what each test
//! plugin received and answered, one JSON object per line.
//!
//! nri-trace's end-to-end tests compare its output against these files, so
//! they must be written by the actor itself at the moment it acts, never
//! reconstructed afterwards. Timestamps use CLOCK_MONOTONIC, the clock of
//! the kernel probes (`bpf_ktime_get_ns`), so both can be compared directly.

use std::{
    fs::{File, OpenOptions},
    io::{BufRead, BufReader, Write},
    path::Path,
    sync::{Arc, Mutex},
};

use serde::{Deserialize, Serialize};

/// CLOCK_MONOTONIC in nanoseconds.
pub fn mono_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// CLOCK_REALTIME in nanoseconds.
pub fn wall_ns() -> u64 {
    clock_ns(libc::CLOCK_REALTIME)
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    unsafe { libc::clock_gettime(clock, &raw mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// A pod as the driver names it (CRI PodSandboxMetadata) plus the sandbox id
/// the runtime returned, when known.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodRef {
    pub name: String,
    pub namespace: String,
    pub uid: String,
    #[serde(default)]
    pub attempt: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox_id: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerRef {
    pub name: String,
    #[serde(default)]
    pub attempt: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
}

/// How a call ended, from the caller's (driver's) or handler's (plugin's)
/// point of view.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Outcome {
    Ok,
    /// gRPC / ttrpc status code and message.
    Error {
        code: i32,
        message: String,
    },
    /// The caller's deadline expired first (client side).
    DeadlineExceeded,
}

/// One ground-truth record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "source", rename_all = "snake_case")]
pub enum Truth {
    /// The CRI driver made one CRI call.
    Cri {
        /// e.g. "RunPodSandbox", as in `/runtime.v1.RuntimeService/<method>`.
        method: String,
        pod: Option<PodRef>,
        container: Option<ContainerRef>,
        start_mono_ns: u64,
        end_mono_ns: u64,
        start_wall_ns: u64,
        /// The per-call deadline the driver set, if any.
        deadline_ms: Option<u64>,
        outcome: Outcome,
        /// 0 for the first try; n for the n-th retry of the same request.
        retry: u32,
    },
    /// A test plugin handled one NRI request.
    Nri {
        plugin: String,
        /// Plugin index ("NN" in NN-name).
        index: String,
        /// ttrpc method, e.g. "StateChange", "CreateContainer", "Synchronize".
        method: String,
        /// NRI event name for event deliveries (e.g. "RUN_POD_SANDBOX").
        event: Option<String>,
        pod: Option<NriPod>,
        container: Option<NriContainer>,
        /// When the request was read and when the reply was written
        /// (reply_mono_ns is None when the plugin never replied).
        recv_mono_ns: u64,
        reply_mono_ns: Option<u64>,
        /// What the plugin was configured to do for this event.
        action: Action,
        /// What it answered.
        outcome: Outcome,
    },
    /// A test plugin's connection lifecycle.
    Plugin {
        plugin: String,
        index: String,
        mono_ns: u64,
        what: PluginEvent,
    },
    /// Something the scenario runner did or observed (scenario-specific).
    Note { mono_ns: u64, text: String },
    /// The driver's own share of a pod's volumes, as kubelet's volume
    /// manager does it: mount a pod volume before RunPodSandbox, unmount
    /// (umount2) and remove its directory at teardown.
    Volume {
        /// `mount`, `unmount` or `remove`.
        op: String,
        /// The volume's directory on the host.
        path: String,
        pod: Option<PodRef>,
        start_mono_ns: u64,
        end_mono_ns: u64,
        /// Error: `code` is the errno, `message` its name and text.
        outcome: Outcome,
        /// 0 for the first try; n for the n-th retry of the same step.
        retry: u32,
    },
    /// A command-line client the scenario ran against the runtime (crictl,
    /// what an SRE types on a node), once, as it ran: which process it was
    /// (every CRI call it made is that pid's), where, and what it said.
    Tool {
        /// Its program name, e.g. "crictl".
        tool: String,
        /// Its arguments after the endpoint options, e.g. ["stopp", ID].
        args: Vec<String>,
        pid: u32,
        /// The cgroup it ran in (below the cgroup v2 mount), when the
        /// scenario put it in one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cgroup: Option<String>,
        /// The pod its arguments name, when they name one.
        pod: Option<PodRef>,
        /// Just before it was spawned, and once it had been reaped.
        start_mono_ns: u64,
        end_mono_ns: u64,
        /// Its exit code (`None`: killed by a signal).
        exit_code: Option<i32>,
        /// What it printed on standard output (its first 4 KiB).
        stdout: String,
    },
}

/// An NRI pod as delivered to a plugin.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NriPod {
    pub id: String,
    pub name: String,
    pub namespace: String,
    pub uid: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NriContainer {
    pub id: String,
    pub name: String,
    pub pod_sandbox_id: String,
}

/// A fault-injection action for one event.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Action {
    /// Answer at once.
    Ok,
    /// Sleep, then answer.
    Delay { ms: u64 },
    /// Answer with an error.
    Error { message: String },
    /// Never answer (past the runtime's request timeout).
    Hang,
    /// Exit the process without answering.
    Crash,
    /// Synchronize only: answer every part with `more` false, as a plugin
    /// on an NRI stub older than v0.7 does (its `SynchronizeResponse` has
    /// no `more`); a runtime that splits its Synchronize then closes the
    /// plugin (nri v0.7+ `pkg/adaptation/plugin.go` `synchronize`).
    Unsplit,
    /// CreateContainer only (go-nri-plugin's `adjust:PARTS`): answer with
    /// an adjustment of these parts of the container ("hooks": an OCI
    /// prestart hook; "env": an environment variable).
    Adjust { parts: Vec<String> },
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum PluginEvent {
    /// Connected to the runtime (external: connect; pre-launched: fd 3).
    Connected { prelaunched: bool, pid: u32 },
    /// RegisterPlugin answered by the runtime.
    Registered,
    /// Configure received; the events mask the plugin subscribed to.
    Configured {
        runtime: String,
        version: String,
        events_mask: i32,
    },
    /// Synchronize received, with the pods it listed.
    Synchronized {
        pods: Vec<NriPod>,
        containers: usize,
        /// The ids of the containers it listed.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        container_ids: Vec<String>,
    },
    /// The runtime closed the connection (or the plugin exited).
    Disconnected { reason: String },
}

/// A thread-safe NDJSON writer of truth records (flushes every line: a
/// plugin may be killed at any moment).
#[derive(Clone)]
pub struct TruthWriter {
    file: Arc<Mutex<File>>,
}

impl TruthWriter {
    /// Append to `path` (created 0644 if missing).
    pub fn append(path: &Path) -> std::io::Result<Self> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(Self {
            file: Arc::new(Mutex::new(file)),
        })
    }

    pub fn write(&self, t: &Truth) -> std::io::Result<()> {
        let mut line = serde_json::to_vec(t).map_err(std::io::Error::other)?;
        line.push(b'\n');
        let mut f = self
            .file
            .lock()
            .map_err(|_poisoned| std::io::Error::other("poisoned"))?;
        // One write per line so concurrent appenders never interleave.
        f.write_all(&line)?;
        f.flush()
    }
}

/// The note the scenario runner writes when its observer (nri-trace) has
/// attached: what an observer sees starts there.
pub const OBSERVER_ATTACHED: &str = "observer attached";

/// When the observer attached, if it did.
pub fn observer_attached_ns(truth: &[Truth]) -> Option<u64> {
    truth.iter().find_map(|t| match t {
        Truth::Note { mono_ns, text } if text == OBSERVER_ATTACHED => Some(*mono_ns),
        _ => None,
    })
}

/// The driver's CRI calls of `method` (e.g. "StopPodSandbox"), in the
/// order it made them: each call's (start, end), monotonic ns.
pub fn cri_spans<'a>(
    truth: &'a [Truth],
    method: &'a str,
) -> impl DoubleEndedIterator<Item = (u64, u64)> + 'a {
    truth.iter().filter_map(move |t| match t {
        Truth::Cri {
            method: m,
            start_mono_ns,
            end_mono_ns,
            ..
        } if m == method => Some((*start_mono_ns, *end_mono_ns)),
        _ => None,
    })
}

/// Read every record of a truth file.
pub fn read(path: &Path) -> std::io::Result<Vec<Truth>> {
    read_from(BufReader::new(File::open(path)?))
}

/// Read every record of a truth stream (e.g. a decompressed fixture).
pub fn read_from(r: impl BufRead) -> std::io::Result<Vec<Truth>> {
    let mut out = Vec::new();
    for line in r.lines() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        out.push(serde_json::from_str(&line).map_err(std::io::Error::other)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let p = std::env::temp_dir().join(format!("truth-{}.ndjson", std::process::id()));
        let _ = std::fs::remove_file(&p);
        let w = TruthWriter::append(&p).unwrap();
        let t = Truth::Nri {
            plugin: "slow".into(),
            index: "10".into(),
            method: "StateChange".into(),
            event: Some("RUN_POD_SANDBOX".into()),
            pod: Some(NriPod {
                id: "abc".into(),
                name: "p".into(),
                namespace: "ns".into(),
                uid: "u".into(),
            }),
            container: None,
            recv_mono_ns: 1,
            reply_mono_ns: Some(2),
            action: Action::Delay { ms: 5 },
            outcome: Outcome::Ok,
        };
        w.write(&t).unwrap();
        w.write(&Truth::Note {
            mono_ns: 3,
            text: "x".into(),
        })
        .unwrap();
        let back = read(&p).unwrap();
        assert_eq!(
            back,
            vec![
                t,
                Truth::Note {
                    mono_ns: 3,
                    text: "x".into()
                }
            ]
        );
        let _ = std::fs::remove_file(&p);
        assert!(mono_ns() > 0 && wall_ns() > mono_ns());
    }
}
