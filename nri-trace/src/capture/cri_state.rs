//! What existed before the attach: the runtime's pods and containers, read
//! with one read-only CRI connection of nri-trace's own, as `crictl pods`
//! and `crictl ps -a` read them.
//!
//! A trace that starts on a busy node sees StopPodSandbox, StopContainer
//! and RemovePodSandbox calls name only ids (CRI api.proto: their requests
//! carry `pod_sandbox_id` / `container_id`), for pods whose RunPodSandbox
//! happened before it. [`query`] asks the runtime once for
//! `ListPodSandbox` and `ListContainers` (no filter, so every state; no
//! status calls: the lists carry the metadata, state and creation time),
//! and [`CriState::from_lists`] keeps what names them. The state then
//! travels as a capture event ([`super::CaptureEvent::CriState`]) like
//! anything else the capture saw, so a raw capture and a record file
//! replay to the same output as the live run.
//!
//! Bounded: two calls, never a write; each with a deadline ([`CALL_TIMEOUT`],
//! sent as `grpc-timeout` too), responses capped at kubelet's 16 MiB
//! ([`MAX_RESPONSE_BYTES`]), at most [`MAX_OBJECTS`] pods and containers
//! kept. The connection is kept open until the next query (after a runtime
//! restart): the capture session recognizes it by its peer (SO_PEERCRED,
//! nri-trace's own pid) and drops it (`SessionConfig::ignore_peer_pids`),
//! so nri-trace's own calls never show as traced CRI calls.

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use hyper_util::rt::TokioIo;
use k8s_cri::v1 as cri;
use prost_cri::Message as _;
use serde::{Deserialize, Serialize};
use tonic::transport::{Channel, Endpoint, Uri};

use super::Timestamp;

/// Deadline of each call (and of the connect). crictl's default
/// `--timeout` is 2 s; a runtime listing thousands of pods gets more.
pub(crate) const CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// Largest response accepted: kubelet's CRI client limit (`maxMsgSize`,
/// 16 MiB, kubernetes pkg/kubelet/cri/remote/utils.go).
pub(crate) const MAX_RESPONSE_BYTES: usize = 16 << 20;
/// Most pods (and, apart, containers) kept from one query: as many ids as
/// the engine's pod index remembers (`engine::pod_index::MAX_IDS`).
pub(crate) const MAX_OBJECTS: usize = 16_384;

/// Why the runtime's state could not be read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CriStateError {
    #[error("cannot connect to {}", path.display())]
    Connect {
        path: PathBuf,
        #[source]
        source: tonic::transport::Error,
    },
    #[error("{call} on {}: {status}", path.display())]
    Call {
        call: &'static str,
        path: PathBuf,
        #[source]
        status: Box<tonic::Status>,
    },
    #[error("{call} on {}: no answer within {CALL_TIMEOUT:?}", path.display())]
    Timeout { call: &'static str, path: PathBuf },
}

/// A pod sandbox as the runtime listed it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatePod {
    /// The sandbox id.
    pub id: String,
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub attempt: u32,
    /// `ready` or `notready` (CRI `PodSandboxState`).
    pub state: String,
    /// Creation time, nanoseconds since the Unix epoch (the runtime's
    /// `created_at`).
    pub created_unix_ns: i64,
}

impl std::fmt::Display for StatePod {
    /// `namespace/name`, as kubectl writes it (the name alone without a
    /// namespace), as every other pod reference.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.namespace.is_empty() {
            f.write_str(&self.name)
        } else {
            write!(f, "{}/{}", self.namespace, self.name)
        }
    }
}

/// A container as the runtime listed it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StateContainer {
    pub id: String,
    /// Its pod's sandbox id.
    pub sandbox_id: String,
    pub name: String,
    pub attempt: u32,
    /// `created`, `running`, `exited` or `unknown` (CRI `ContainerState`).
    pub state: String,
    /// Creation time, nanoseconds since the Unix epoch.
    pub created_unix_ns: i64,
}

/// The runtime's pods and containers when nri-trace asked.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CriState {
    /// When the answers were in.
    pub ts: Timestamp,
    /// Sorted by id.
    pub pods: Vec<StatePod>,
    /// Sorted by id.
    pub containers: Vec<StateContainer>,
    /// More than [`MAX_OBJECTS`] pods or containers were listed: the rest
    /// is not kept.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
    /// Bytes of the two responses (their protobuf messages).
    pub bytes: u64,
    /// How long the calls took, connect included.
    pub took_ns: u64,
    /// The runtime's name and version as its `Version` call says
    /// ("containerd 1.7.24~ds1"); `None` when it did not answer it. The
    /// conformance table is per runtime version (engine/conformance.rs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<String>,
}

/// CRI `PodSandboxState` as a word (api.proto: SANDBOX_READY = 0,
/// SANDBOX_NOTREADY = 1).
fn pod_state(v: i32) -> String {
    match cri::PodSandboxState::try_from(v) {
        Ok(cri::PodSandboxState::SandboxReady) => "ready".into(),
        Ok(cri::PodSandboxState::SandboxNotready) => "notready".into(),
        Err(_) => format!("state {v}"),
    }
}

/// CRI `ContainerState` as a word (api.proto: CONTAINER_CREATED = 0 ...
/// CONTAINER_UNKNOWN = 3).
fn container_state(v: i32) -> String {
    match cri::ContainerState::try_from(v) {
        Ok(cri::ContainerState::ContainerCreated) => "created".into(),
        Ok(cri::ContainerState::ContainerRunning) => "running".into(),
        Ok(cri::ContainerState::ContainerExited) => "exited".into(),
        Ok(cri::ContainerState::ContainerUnknown) => "unknown".into(),
        Err(_) => format!("state {v}"),
    }
}

impl CriState {
    /// The state from the two lists, at `ts`. Sandboxes without an id are
    /// skipped (nothing could name them); at most [`MAX_OBJECTS`] of each
    /// are kept, the newest first.
    pub fn from_lists(
        ts: Timestamp,
        pods: Vec<cri::PodSandbox>,
        containers: Vec<cri::Container>,
    ) -> Self {
        let mut truncated = false;
        let mut pods: Vec<StatePod> = pods
            .into_iter()
            .filter(|p| !p.id.is_empty())
            .map(|p| {
                let m = p.metadata.unwrap_or_default();
                StatePod {
                    id: p.id,
                    namespace: m.namespace,
                    name: m.name,
                    uid: m.uid,
                    attempt: m.attempt,
                    state: pod_state(p.state),
                    created_unix_ns: p.created_at,
                }
            })
            .collect();
        if pods.len() > MAX_OBJECTS {
            truncated = true;
            pods.sort_by_key(|p| std::cmp::Reverse(p.created_unix_ns));
            pods.truncate(MAX_OBJECTS);
        }
        pods.sort_by(|a, b| a.id.cmp(&b.id));
        let mut containers: Vec<StateContainer> = containers
            .into_iter()
            .filter(|c| !c.id.is_empty())
            .map(|c| {
                let m = c.metadata.unwrap_or_default();
                StateContainer {
                    id: c.id,
                    sandbox_id: c.pod_sandbox_id,
                    name: m.name,
                    attempt: m.attempt,
                    state: container_state(c.state),
                    created_unix_ns: c.created_at,
                }
            })
            .collect();
        if containers.len() > MAX_OBJECTS {
            truncated = true;
            containers.sort_by_key(|c| std::cmp::Reverse(c.created_unix_ns));
            containers.truncate(MAX_OBJECTS);
        }
        containers.sort_by(|a, b| a.id.cmp(&b.id));
        CriState {
            ts,
            pods,
            containers,
            truncated,
            bytes: 0,
            took_ns: 0,
            runtime: None,
        }
    }
}

/// A channel to the CRI socket at `path` (one connection).
async fn connect(path: &Path) -> Result<Channel, CriStateError> {
    let socket = path.to_path_buf();
    // The URI is not used: the connector dials the unix socket (as the
    // lab's driver, lab/src/cri.rs, and crictl do).
    Endpoint::from_static("http://cri.invalid")
        .connect_timeout(CALL_TIMEOUT)
        .timeout(CALL_TIMEOUT)
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let socket = socket.clone();
            async move {
                Ok::<_, std::io::Error>(TokioIo::new(
                    tokio::net::UnixStream::connect(socket).await?,
                ))
            }
        }))
        .await
        .map_err(|source| CriStateError::Connect {
            path: path.to_path_buf(),
            source,
        })
}

/// The runtime's pods and containers, read over a new connection to its
/// CRI socket `path`, stamped with `now()` when the answers are in; the
/// connection is handed back with them (keep it open: see the module doc).
pub(crate) async fn query(
    path: &Path,
    now: fn() -> Timestamp,
) -> Result<(CriState, Channel), CriStateError> {
    let t0 = std::time::Instant::now();
    let channel = connect(path).await?;
    let mut client = cri::runtime_service_client::RuntimeServiceClient::new(channel.clone())
        .max_decoding_message_size(MAX_RESPONSE_BYTES);
    let call_err = |call: &'static str| {
        move |status| CriStateError::Call {
            call,
            path: path.to_path_buf(),
            status: Box::new(status),
        }
    };
    let timeout = |call: &'static str| CriStateError::Timeout {
        call,
        path: path.to_path_buf(),
    };
    let mut req = tonic::Request::new(cri::ListPodSandboxRequest { filter: None });
    req.set_timeout(CALL_TIMEOUT);
    let pods = tokio::time::timeout(CALL_TIMEOUT, client.list_pod_sandbox(req))
        .await
        .map_err(|_elapsed| timeout("ListPodSandbox"))?
        .map_err(call_err("ListPodSandbox"))?
        .into_inner();
    let mut req = tonic::Request::new(cri::ListContainersRequest { filter: None });
    req.set_timeout(CALL_TIMEOUT);
    let containers = tokio::time::timeout(CALL_TIMEOUT, client.list_containers(req))
        .await
        .map_err(|_elapsed| timeout("ListContainers"))?
        .map_err(call_err("ListContainers"))?
        .into_inner();
    // Which runtime this is, for the conformance table: best effort (a
    // runtime may not answer it; the lists are what matters).
    let mut req = tonic::Request::new(cri::VersionRequest {
        version: String::new(),
    });
    req.set_timeout(CALL_TIMEOUT);
    let runtime = match tokio::time::timeout(CALL_TIMEOUT, client.version(req)).await {
        Ok(Ok(v)) => {
            let v = v.into_inner();
            Some(
                format!("{} {}", v.runtime_name, v.runtime_version)
                    .trim()
                    .to_string(),
            )
            .filter(|s| !s.is_empty())
        }
        _ => None,
    };
    let bytes = (pods.encoded_len() + containers.encoded_len()) as u64;
    let took_ns = t0.elapsed().as_nanos() as u64;
    let ts = now();
    let mut state = CriState::from_lists(ts, pods.items, containers.containers);
    state.bytes = bytes;
    state.took_ns = took_ns;
    state.runtime = runtime;
    Ok((state, channel))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(id: &str, name: &str, state: i32, created: i64) -> cri::PodSandbox {
        cri::PodSandbox {
            id: id.into(),
            metadata: Some(cri::PodSandboxMetadata {
                name: name.into(),
                uid: format!("uid-{name}"),
                namespace: "default".into(),
                attempt: 1,
            }),
            state,
            created_at: created,
            ..Default::default()
        }
    }

    fn container(id: &str, sandbox: &str, name: &str, state: i32) -> cri::Container {
        cri::Container {
            id: id.into(),
            pod_sandbox_id: sandbox.into(),
            metadata: Some(cri::ContainerMetadata {
                name: name.into(),
                attempt: 2,
            }),
            state,
            created_at: 7,
            ..Default::default()
        }
    }

    const TS: Timestamp = Timestamp {
        mono_ns: 5,
        wall_ns: 6,
    };

    #[test]
    fn lists_become_named_pods_and_containers() {
        let s = CriState::from_lists(
            TS,
            vec![
                pod("bb", "web-7f9c", 1, 20),
                pod("aa", "db-0", 0, 10),
                pod("", "no-id", 0, 1),
            ],
            vec![
                container("c2", "aa", "pg", 2),
                container("c1", "bb", "nginx", 1),
                container("c3", "bb", "init", 0),
                container("c4", "bb", "side", 3),
                container("c5", "bb", "odd", 9),
            ],
        );
        assert_eq!(s.ts, TS);
        assert!(!s.truncated);
        assert_eq!(
            s.pods,
            vec![
                StatePod {
                    id: "aa".into(),
                    namespace: "default".into(),
                    name: "db-0".into(),
                    uid: "uid-db-0".into(),
                    attempt: 1,
                    state: "ready".into(),
                    created_unix_ns: 10,
                },
                StatePod {
                    id: "bb".into(),
                    namespace: "default".into(),
                    name: "web-7f9c".into(),
                    uid: "uid-web-7f9c".into(),
                    attempt: 1,
                    state: "notready".into(),
                    created_unix_ns: 20,
                },
            ]
        );
        let got: Vec<(&str, &str, &str, &str)> = s
            .containers
            .iter()
            .map(|c| {
                (
                    c.id.as_str(),
                    c.sandbox_id.as_str(),
                    c.name.as_str(),
                    c.state.as_str(),
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                ("c1", "bb", "nginx", "running"),
                ("c2", "aa", "pg", "exited"),
                ("c3", "bb", "init", "created"),
                ("c4", "bb", "side", "unknown"),
                ("c5", "bb", "odd", "state 9"),
            ]
        );
        assert_eq!(s.containers[0].attempt, 2);
        assert_eq!(s.containers[0].created_unix_ns, 7);
    }

    #[test]
    fn missing_metadata_leaves_names_empty() {
        let p = cri::PodSandbox {
            id: "x".into(),
            ..Default::default()
        };
        let s = CriState::from_lists(TS, vec![p], vec![]);
        assert_eq!(s.pods[0].name, "");
        assert_eq!(s.pods[0].state, "ready");
    }

    #[test]
    fn past_the_cap_the_newest_are_kept() {
        let n = MAX_OBJECTS + 3;
        let pods = (0..n)
            .map(|i| pod(&format!("p{i:06}"), &format!("n{i}"), 0, i as i64))
            .collect();
        let s = CriState::from_lists(TS, pods, vec![]);
        assert!(s.truncated);
        assert_eq!(s.pods.len(), MAX_OBJECTS);
        // The three oldest (created 0, 1, 2) went.
        assert!(!s.pods.iter().any(|p| p.created_unix_ns < 3));
        assert!(s.pods.windows(2).all(|w| w[0].id < w[1].id));
    }

    #[test]
    fn a_refused_socket_names_it() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let dir = std::env::temp_dir().join(format!("nri-trace-cri-state-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let path = dir.join("none.sock");
        let e = rt.block_on(query(&path, || TS)).unwrap_err();
        assert!(matches!(e, CriStateError::Connect { .. }), "{e:?}");
        assert!(e.to_string().contains("none.sock"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
