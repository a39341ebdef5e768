//! The runtime side of NRI, for load: a peer that listens on an NRI socket
//! the way containerd does, accepts external plugins (the lab's
//! `nri-test-plugin`), and delivers NRI events to them at a given rate
//! (`bin/nri-rate`, the benchmark `cargo xtask bench --only nri-rate`, and
//! tests/tests/nri_rate.rs).
//!
//! containerd on the lab's two cores cannot make 10,000 NRI calls/s (issue
//! 23 item 4), so this peer speaks NRI itself, with the `ttrpc` crate, the
//! way containerd/nri v0.6.1 `pkg/adaptation` does (containerd 1.7.24, the
//! lab's runtime):
//!
//! - `plugin.connect`: the accepted connection is split by the NRI
//!   multiplexer (`pkg/net/multiplex`, frames `conn_id u32 BE | len u32 BE`);
//!   connection 1 carries the Plugin service with the runtime as the ttrpc
//!   client, connection 2 the Runtime service with the runtime as the
//!   server ([`RuntimeMux`]).
//! - The plugin calls `RegisterPlugin` on connection 2 (answered `Empty`);
//!   the runtime then calls `Configure{config, runtime_name,
//!   runtime_version}` (v0.6.1 sends only these three) and reads the event
//!   mask from its answer, then `Synchronize{pods, containers}` with what it
//!   holds.
//! - Events (`adaptation.go`): CreateContainer, UpdateContainer and
//!   StopContainer have their own methods; every other event is
//!   `StateChange{event, pod, container}`. Each call carries the request
//!   timeout (2 s, `plugin_request_timeout`) in `timeout_nano`, and goes to
//!   the plugins in index order, each only if its mask has the event.
//!
//! One difference, on purpose: containerd holds one lock over every NRI
//! entry point, so it has one call in flight. That bounds its rate by one
//! round trip per call; to reach 10,000 calls/s on two cores the peer runs
//! `in_flight` pod lifecycles at once (each one still event by event and
//! plugin by plugin, as containerd delivers them). Several streams are then
//! open at once on one connection, which ttrpc allows (odd stream ids per
//! connection) and nri-trace decodes per (connection, stream).
//!
//! Payloads are shaped like what containerd's CRI plugin hands NRI:
//! 64-hex-digit ids, the kubelet's labels and annotations, the pod's cgroup
//! parent and namespaces, a container's args, env, mounts, resources and
//! cgroups path; a container request is over a kilobyte (the unit test
//! below checks it).

use std::{
    collections::{BTreeMap, HashMap},
    io,
    path::{Path, PathBuf},
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};
use async_trait::async_trait;
use futures::StreamExt as _;
use prost::Message as _;
use serde::Serialize;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt, DuplexStream, ReadHalf, WriteHalf},
    net::{unix::OwnedReadHalf, unix::OwnedWriteHalf, UnixListener, UnixStream},
    sync::{mpsc, Mutex as AsyncMutex},
};
use ttrpc::{
    proto::ResponseInit,
    r#async::{
        transport::{Listener, Socket},
        Client, MethodHandler, Server, Service, TtrpcContext,
    },
    Code, Request, Response,
};

use crate::{
    nri_api as api,
    nri_plugin::{
        config::event_name,
        mux::{
            encode_frames, FrameDecoder, PLUGIN_SERVICE_CONN, RUNTIME_SERVICE_CONN, WRITE_CHUNK,
        },
        plugin::{PLUGIN_SERVICE, RUNTIME_SERVICE},
    },
};

/// containerd's default `plugin_request_timeout` (2 s), sent in every
/// request's `timeout_nano`.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// containerd's default `plugin_registration_timeout` (5 s).
pub const REGISTRATION_TIMEOUT: Duration = Duration::from_secs(5);
/// What the peer says it is in Configure.
pub const RUNTIME_NAME: &str = "nri-rate";

// ------------------------------------------------------------ the mux

/// The runtime's end of the NRI multiplexer: the trunk split into the
/// Plugin service's byte stream (we are its ttrpc client) and the Runtime
/// service's (we serve it), each an in-process pipe.
pub struct RuntimeMux {
    /// Connection 1: call the Plugin service on it.
    pub plugin_conn: DuplexStream,
    /// Connection 2: serve the Runtime service on it.
    pub runtime_conn: DuplexStream,
    /// The tasks that own the trunk: aborting them closes the connection.
    pub tasks: Vec<tokio::task::JoinHandle<()>>,
}

const PIPE_SIZE: usize = 256 * 1024;

impl RuntimeMux {
    /// Start the mux tasks on `trunk` (inside a tokio runtime). They end
    /// when the trunk or both local ends close.
    pub fn start(trunk: UnixStream) -> Self {
        let (plugin_local, plugin_conn) = tokio::io::duplex(PIPE_SIZE);
        let (runtime_local, runtime_conn) = tokio::io::duplex(PIPE_SIZE);
        let (trunk_r, trunk_w) = trunk.into_split();
        let trunk_w = Arc::new(AsyncMutex::new(trunk_w));
        let (p_read, p_write) = tokio::io::split(plugin_local);
        let (r_read, r_write) = tokio::io::split(runtime_local);
        let tasks = vec![
            tokio::spawn(demux(trunk_r, p_write, r_write)),
            tokio::spawn(mux_out(p_read, Arc::clone(&trunk_w), PLUGIN_SERVICE_CONN)),
            tokio::spawn(mux_out(r_read, trunk_w, RUNTIME_SERVICE_CONN)),
        ];
        Self {
            plugin_conn,
            runtime_conn,
            tasks,
        }
    }
}

/// Trunk -> the two local connections. Frames for a connection nobody
/// opened are dropped, as the Go mux does.
async fn demux(
    mut trunk: OwnedReadHalf,
    mut plugin: WriteHalf<DuplexStream>,
    mut runtime: WriteHalf<DuplexStream>,
) {
    let mut frames = FrameDecoder::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match trunk.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        frames.push(&buf[..n]);
        loop {
            let (conn, payload) = match frames.next_frame() {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(e) => {
                    log::error!("nri-rate mux: {e}");
                    return;
                }
            };
            let to = match conn {
                PLUGIN_SERVICE_CONN => &mut plugin,
                RUNTIME_SERVICE_CONN => &mut runtime,
                other => {
                    log::warn!("nri-rate mux: dropping a frame for unopened conn {other}");
                    continue;
                }
            };
            if to.write_all(&payload).await.is_err() {
                return;
            }
        }
    }
}

/// A local connection -> trunk frames of at most 4096 bytes (ttrpc-go's
/// buffered writer flushes at 4 KiB, so containerd's frames are no larger).
async fn mux_out(
    mut local: ReadHalf<DuplexStream>,
    trunk: Arc<AsyncMutex<OwnedWriteHalf>>,
    conn: u32,
) {
    let mut buf = vec![0u8; WRITE_CHUNK];
    loop {
        let n = match local.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let frames = encode_frames(conn, &buf[..n], WRITE_CHUNK);
        let mut w = trunk.lock().await;
        if w.write_all(&frames).await.is_err() {
            return;
        }
    }
}

// ------------------------------------------------ the Runtime service

/// Serves RegisterPlugin (reports who registered) and UpdateContainers
/// (nothing to update here: an empty answer).
struct RuntimeMethod {
    name: &'static str,
    registered: mpsc::UnboundedSender<(String, String)>,
}

#[async_trait]
impl MethodHandler for RuntimeMethod {
    async fn handler(&self, _ctx: TtrpcContext, req: Request) -> ttrpc::Result<Response> {
        let payload = match self.name {
            "RegisterPlugin" => {
                let r =
                    api::RegisterPluginRequest::decode(req.payload.as_slice()).map_err(|e| {
                        ttrpc::Error::RpcStatus(ttrpc::get_status(
                            Code::INVALID_ARGUMENT,
                            format!("undecodable RegisterPlugin: {e}"),
                        ))
                    })?;
                let _ = self.registered.send((r.plugin_name, r.plugin_idx));
                api::Empty {}.encode_to_vec()
            }
            _ => api::UpdateContainersResponse::default().encode_to_vec(),
        };
        let mut r = Response::init_status(ttrpc::get_status(Code::OK, ""));
        r.set_payload(payload);
        Ok(r)
    }
}

// ------------------------------------------------------- one plugin

/// A registered and configured plugin, as the runtime holds it.
pub struct PluginConn {
    pub name: String,
    pub idx: String,
    /// The events it subscribed to (ConfigureResponse.events; 0 is all).
    pub mask: i32,
    client: Client,
    /// Kept alive: dropping it stops serving RegisterPlugin's connection.
    /// (In a Mutex: ttrpc's Server is not Sync, and the workers share the
    /// plugins across tasks.)
    _server: Mutex<Server>,
    mux_tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for PluginConn {
    /// Close the plugin's connection, as the runtime does when it shuts
    /// down: the plugin sees EOF and exits.
    fn drop(&mut self) {
        for t in &self.mux_tasks {
            t.abort();
        }
    }
}

impl PluginConn {
    pub fn label(&self) -> String {
        format!("{}-{}", self.idx, self.name)
    }

    fn subscribed(&self, event: api::Event) -> bool {
        self.mask == 0 || self.mask & (1 << (event as i32 - 1)) != 0
    }

    async fn call(&self, method: &str, payload: Vec<u8>) -> ttrpc::Result<Vec<u8>> {
        let req = Request {
            service: PLUGIN_SERVICE.to_string(),
            method: method.to_string(),
            payload,
            timeout_nano: REQUEST_TIMEOUT.as_nanos() as i64,
            ..Default::default()
        };
        Ok(self.client.request(req).await?.payload)
    }
}

/// Accept one plugin on `listener`: the mux, the Runtime service, its
/// RegisterPlugin, then Configure (and the mask it answers).
pub async fn accept_plugin(listener: &UnixListener) -> Result<PluginConn> {
    let (stream, _) = listener.accept().await.context("accepting a plugin")?;
    let mux = RuntimeMux::start(stream);
    let (tx, mut registered) = mpsc::unbounded_channel();
    let mut methods: HashMap<String, Box<dyn MethodHandler + Send + Sync>> = HashMap::new();
    for name in ["RegisterPlugin", "UpdateContainers"] {
        methods.insert(
            name.to_string(),
            Box::new(RuntimeMethod {
                name,
                registered: tx.clone(),
            }),
        );
    }
    let conn2 = mux.runtime_conn;
    let incoming = futures::stream::once(async move { Ok::<_, io::Error>(conn2) })
        .chain(futures::stream::pending());
    let mut server = Server::new()
        .add_listener(Listener::new(incoming))
        .register_service(HashMap::from([(
            RUNTIME_SERVICE.to_string(),
            Service {
                methods,
                streams: HashMap::new(),
            },
        )]));
    server
        .start()
        .await
        .context("starting the Runtime service")?;
    let (name, idx) = tokio::time::timeout(REGISTRATION_TIMEOUT, registered.recv())
        .await
        .context("no RegisterPlugin within the registration timeout")?
        .context("the plugin's connection ended before RegisterPlugin")?;
    let mut plugin = PluginConn {
        name,
        idx,
        mask: 0,
        client: Client::new(Socket::new(mux.plugin_conn)),
        _server: Mutex::new(server),
        mux_tasks: mux.tasks,
    };
    let configure = api::ConfigureRequest {
        config: String::new(),
        runtime_name: RUNTIME_NAME.to_string(),
        runtime_version: env!("CARGO_PKG_VERSION").to_string(),
        ..Default::default()
    };
    let reply = plugin
        .call("Configure", configure.encode_to_vec())
        .await
        .map_err(|e| anyhow::anyhow!("Configure of {}: {e:?}", plugin.label()))?;
    plugin.mask = api::ConfigureResponse::decode(reply.as_slice())
        .context("undecodable ConfigureResponse")?
        .events;
    Ok(plugin)
}

// ------------------------------------------------- pods and containers

/// containerd's ids: 64 lowercase hex digits (a sha256).
fn hex_id(seed: u64) -> String {
    let mut s = String::with_capacity(64);
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    for _ in 0..4 {
        // xorshift64*: distinct, reproducible ids.
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        s += &format!("{:016x}", x.wrapping_mul(0x2545_f491_4f6c_dd1d));
    }
    s
}

fn uid(seed: u64) -> String {
    crate::cri::dashed_uuid(&hex_id(seed ^ 0x5555))
}

fn map(pairs: &[(&str, String)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_string(), v.clone()))
        .collect()
}

fn ns(kind: &str, path: String) -> api::LinuxNamespace {
    api::LinuxNamespace {
        r#type: kind.to_string(),
        path,
    }
}

/// The pod of lifecycle `n` in the namespace `namespace`, as containerd's
/// CRI plugin hands it to NRI (a BestEffort pod under systemd's cgroups).
pub fn make_pod(namespace: &str, n: u64) -> api::PodSandbox {
    let id = hex_id(n);
    let uid = uid(n);
    let name = format!("rate-{n}");
    let pid = 10_000 + (n % 50_000) as u32;
    api::PodSandbox {
        id: id.clone(),
        name: name.clone(),
        uid: uid.clone(),
        namespace: namespace.to_string(),
        labels: map(&[
            ("app", "rate".into()),
            ("io.kubernetes.pod.name", name),
            ("io.kubernetes.pod.namespace", namespace.into()),
            ("io.kubernetes.pod.uid", uid.clone()),
            ("pod-template-hash", "7f9c5d8b6d".into()),
        ]),
        annotations: map(&[
            (
                "kubernetes.io/config.seen",
                "2026-11-27T01:00:00.000000000Z".into(),
            ),
            ("kubernetes.io/config.source", "api".into()),
        ]),
        runtime_handler: String::new(),
        linux: Some(api::LinuxPodSandbox {
            cgroup_parent: format!("kubepods-besteffort-pod{}.slice", uid.replace('-', "_")),
            cgroups_path: format!(
                "kubepods-besteffort-pod{}.slice:cri-containerd:{id}",
                uid.replace('-', "_")
            ),
            namespaces: vec![
                ns("ipc", format!("/proc/{pid}/ns/ipc")),
                ns("uts", format!("/proc/{pid}/ns/uts")),
                ns("network", format!("/var/run/netns/cni-{}", &uid)),
                ns("pid", String::new()),
                ns("mount", String::new()),
            ],
            ..Default::default()
        }),
        pid,
        ..Default::default()
    }
}

/// The one container of `pod`, in state `state`.
pub fn make_container(pod: &api::PodSandbox, n: u64, state: api::ContainerState) -> api::Container {
    let id = hex_id(n ^ 0xc0ff_ee00);
    let pod_uid = &pod.uid;
    let opt_i = |v: i64| Some(api::OptionalInt64 { value: v });
    let opt_u = |v: u64| Some(api::OptionalUInt64 { value: v });
    api::Container {
        id: id.clone(),
        pod_sandbox_id: pod.id.clone(),
        name: "app".into(),
        state: state as i32,
        labels: map(&[
            ("io.kubernetes.container.name", "app".into()),
            ("io.kubernetes.pod.name", pod.name.clone()),
            ("io.kubernetes.pod.namespace", pod.namespace.clone()),
            ("io.kubernetes.pod.uid", pod_uid.clone()),
        ]),
        annotations: map(&[
            ("io.kubernetes.container.hash", "5f2c1a7e".into()),
            ("io.kubernetes.container.restartCount", "0".into()),
            (
                "io.kubernetes.container.terminationMessagePath",
                "/dev/termination-log".into(),
            ),
            (
                "io.kubernetes.container.terminationMessagePolicy",
                "File".into(),
            ),
            ("io.kubernetes.pod.terminationGracePeriod", "30".into()),
        ]),
        args: vec!["/bin/sh".into(), "-c".into(), "sleep 3600".into()],
        env: vec![
            "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into(),
            format!("HOSTNAME={}", pod.name),
            "KUBERNETES_SERVICE_HOST=10.96.0.1".into(),
            "KUBERNETES_SERVICE_PORT=443".into(),
            "KUBERNETES_PORT=tcp://10.96.0.1:443".into(),
            "KUBERNETES_PORT_443_TCP=tcp://10.96.0.1:443".into(),
            "KUBERNETES_PORT_443_TCP_PROTO=tcp".into(),
            "KUBERNETES_PORT_443_TCP_ADDR=10.96.0.1".into(),
        ],
        mounts: vec![
            api::Mount {
                destination: "/var/run/secrets/kubernetes.io/serviceaccount".into(),
                r#type: "bind".into(),
                source: format!(
                    "/var/lib/kubelet/pods/{pod_uid}/volumes/kubernetes.io~projected/kube-api-access-x7k2q"
                ),
                options: vec!["rbind".into(), "rprivate".into(), "ro".into()],
            },
            api::Mount {
                destination: "/etc/hosts".into(),
                r#type: "bind".into(),
                source: format!("/var/lib/kubelet/pods/{pod_uid}/etc-hosts"),
                options: vec!["rbind".into(), "rprivate".into(), "rw".into()],
            },
            api::Mount {
                destination: "/dev/termination-log".into(),
                r#type: "bind".into(),
                source: format!("/var/lib/kubelet/pods/{pod_uid}/containers/app/{}", &id[..8]),
                options: vec!["rbind".into(), "rprivate".into(), "rw".into()],
            },
            api::Mount {
                destination: "/etc/resolv.conf".into(),
                r#type: "bind".into(),
                source: format!(
                    "/var/lib/containerd/io.containerd.grpc.v1.cri/sandboxes/{}/resolv.conf",
                    pod.id
                ),
                options: vec!["rbind".into(), "rprivate".into(), "rw".into()],
            },
        ],
        linux: Some(api::LinuxContainer {
            namespaces: pod
                .linux
                .as_ref()
                .map(|l| l.namespaces.clone())
                .unwrap_or_default(),
            resources: Some(api::LinuxResources {
                memory: Some(api::LinuxMemory {
                    limit: opt_i(0),
                    swap: opt_i(0),
                    ..Default::default()
                }),
                cpu: Some(api::LinuxCpu {
                    shares: opt_u(2),
                    quota: opt_i(0),
                    period: opt_u(100_000),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            oom_score_adj: Some(api::OptionalInt { value: 1000 }),
            cgroups_path: format!(
                "kubepods-besteffort-pod{}.slice:cri-containerd:{id}",
                pod_uid.replace('-', "_")
            ),
            ..Default::default()
        }),
        pid: if state == api::ContainerState::ContainerRunning {
            pod.pid + 7
        } else {
            0
        },
        ..Default::default()
    }
}

/// One step of a pod's lifecycle, in containerd's order for a pod with one
/// container (RunPodSandbox, CreateContainer, StartContainer, StopContainer,
/// RemoveContainer, StopPodSandbox, RemovePodSandbox and their Post-events).
const LIFECYCLE: [(api::Event, Option<api::ContainerState>); 9] = {
    use api::{ContainerState as S, Event as E};
    [
        (E::RunPodSandbox, None),
        (E::CreateContainer, Some(S::ContainerCreated)),
        (E::PostCreateContainer, Some(S::ContainerCreated)),
        (E::StartContainer, Some(S::ContainerCreated)),
        (E::PostStartContainer, Some(S::ContainerRunning)),
        (E::StopContainer, Some(S::ContainerRunning)),
        (E::RemoveContainer, Some(S::ContainerStopped)),
        (E::StopPodSandbox, None),
        (E::RemovePodSandbox, None),
    ]
};

/// The method and payload of `event` for `pod` (and `container`), as
/// v0.6.1's adaptation sends them.
pub fn event_request(
    event: api::Event,
    pod: &api::PodSandbox,
    container: Option<&api::Container>,
) -> (&'static str, Vec<u8>) {
    let (pod, container) = (Some(pod.clone()), container.cloned());
    match event {
        api::Event::CreateContainer => (
            "CreateContainer",
            api::CreateContainerRequest { pod, container }.encode_to_vec(),
        ),
        api::Event::StopContainer => (
            "StopContainer",
            api::StopContainerRequest { pod, container }.encode_to_vec(),
        ),
        api::Event::UpdateContainer => (
            "UpdateContainer",
            api::UpdateContainerRequest {
                pod,
                container,
                ..Default::default()
            }
            .encode_to_vec(),
        ),
        _ => (
            "StateChange",
            api::StateChangeEvent {
                event: event as i32,
                pod,
                container,
            }
            .encode_to_vec(),
        ),
    }
}

// ------------------------------------------------------------ the run

/// What to run.
#[derive(Clone, Debug)]
pub struct RateOptions {
    /// Calls per second, over all plugins.
    pub rate: f64,
    pub duration: Duration,
    /// Pod lifecycles run at once (see the module docs).
    pub in_flight: usize,
    /// The pods' namespace.
    pub namespace: String,
    /// Pods (with one container each) told to the plugins in Synchronize.
    pub sync_pods: u64,
    /// Where each answered call is written (NDJSON, [`CallRecord`]).
    pub calls_log: Option<PathBuf>,
}

/// One call the peer made and its answer (the `--calls` log).
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct CallRecord {
    /// `NN-name`.
    pub plugin: String,
    pub method: String,
    /// Upper-case event name; None for Configure and Synchronize.
    pub event: Option<String>,
    pub pod_id: Option<String>,
    pub container_id: Option<String>,
    /// True when the plugin answered with status OK.
    pub ok: bool,
}

/// Counts of one (plugin, method, event).
#[derive(Clone, Debug, Default, Serialize)]
pub struct KeyCount {
    pub sent: u64,
    pub ok: u64,
    pub failed: u64,
}

/// What a run did, printed as one JSON line.
#[derive(Clone, Debug, Serialize)]
pub struct RateSummary {
    pub target_rate: f64,
    pub duration_s: f64,
    pub in_flight: usize,
    pub plugins: Vec<PluginSummary>,
    /// Event calls sent (Configure and Synchronize not included).
    pub calls_sent: u64,
    pub calls_ok: u64,
    pub calls_failed: u64,
    /// calls_sent over the time from the first call to the last answer.
    pub achieved_rate: f64,
    /// The most any call was sent after its paced slot, ms: near the
    /// timer's 1 ms granularity when the peer keeps up, growing when it
    /// does not.
    pub max_behind_schedule_ms: f64,
    pub pods: u64,
    /// Per "NN-name METHOD EVENT".
    pub per_call: BTreeMap<String, KeyCount>,
}

#[derive(Clone, Debug, Serialize)]
pub struct PluginSummary {
    pub plugin: String,
    pub events_mask: i32,
    /// Configure and Synchronize answered OK.
    pub configured: bool,
}

struct Tally {
    per_call: Mutex<BTreeMap<String, KeyCount>>,
    sent: AtomicU64,
    ok: AtomicU64,
    failed: AtomicU64,
    pods: AtomicU64,
    /// Max of (send time - slot), µs.
    max_late_us: AtomicU64,
    log: Option<Mutex<io::BufWriter<std::fs::File>>>,
}

impl Tally {
    fn record(&self, c: &CallRecord) {
        self.sent.fetch_add(1, Ordering::Relaxed);
        if c.ok {
            self.ok.fetch_add(1, Ordering::Relaxed);
        } else {
            self.failed.fetch_add(1, Ordering::Relaxed);
        }
        let key = format!(
            "{} {} {}",
            c.plugin,
            c.method,
            c.event.as_deref().unwrap_or("-")
        );
        {
            let mut m = self.per_call.lock().unwrap();
            let k = m.entry(key).or_default();
            k.sent += 1;
            if c.ok {
                k.ok += 1;
            } else {
                k.failed += 1;
            }
        }
        if let Some(log) = &self.log {
            use std::io::Write as _;
            let mut w = log.lock().unwrap();
            let _ = serde_json::to_writer(&mut *w, c);
            let _ = w.write_all(b"\n");
        }
    }
}

/// Hands out the send times of a paced run: call k at `start + k / rate`.
struct Pacer {
    start: Instant,
    rate: f64,
    next: AtomicU64,
    /// Calls in the run: rate x duration.
    calls: u64,
}

impl Pacer {
    /// The next call's slot, or None once the run's calls are handed out.
    /// (Slots are `k / rate` s from the start: a whole-nanosecond interval
    /// would fit extra calls into the duration, 33,333 ns at 30,000/s.)
    fn slot(&self) -> Option<Instant> {
        let k = self.next.fetch_add(1, Ordering::Relaxed);
        (k < self.calls).then(|| self.start + Duration::from_secs_f64(k as f64 / self.rate))
    }
}

/// Synchronize every plugin with `n` pods (one container each, running),
/// as the runtime does right after Configure.
async fn synchronize(plugins: &[PluginConn], namespace: &str, n: u64, tally: &Tally) -> Vec<bool> {
    let pods: Vec<_> = (0..n).map(|i| make_pod(namespace, u64::MAX - i)).collect();
    let containers: Vec<_> = pods
        .iter()
        .enumerate()
        .map(|(i, p)| {
            make_container(
                p,
                u64::MAX - i as u64,
                api::ContainerState::ContainerRunning,
            )
        })
        .collect();
    let payload = api::SynchronizeRequest {
        pods,
        containers,
        more: false,
    }
    .encode_to_vec();
    let mut ok = vec![];
    for p in plugins {
        let res = p.call("Synchronize", payload.clone()).await;
        if let Err(e) = &res {
            log::error!("Synchronize of {}: {e:?}", p.label());
        }
        tally.record(&CallRecord {
            plugin: p.label(),
            method: "Synchronize".into(),
            event: None,
            pod_id: None,
            container_id: None,
            ok: res.is_ok(),
        });
        ok.push(res.is_ok());
    }
    ok
}

/// One worker: pod lifecycles one after another, each event to each
/// subscribed plugin in index order, each call at its paced slot.
async fn worker(
    plugins: Arc<Vec<PluginConn>>,
    pacer: Arc<Pacer>,
    tally: Arc<Tally>,
    namespace: String,
    first: u64,
    step: u64,
) {
    let mut n = first;
    loop {
        let pod = make_pod(&namespace, n);
        tally.pods.fetch_add(1, Ordering::Relaxed);
        for (event, state) in LIFECYCLE {
            let container = state.map(|s| make_container(&pod, n, s));
            let (method, payload) = event_request(event, &pod, container.as_ref());
            for p in plugins.iter().filter(|p| p.subscribed(event)) {
                let Some(at) = pacer.slot() else {
                    return;
                };
                tokio::time::sleep_until(at.into()).await;
                let late = Instant::now().saturating_duration_since(at);
                tally
                    .max_late_us
                    .fetch_max(late.as_micros() as u64, Ordering::Relaxed);
                let res = p.call(method, payload.clone()).await;
                if let Err(e) = &res {
                    log::warn!(
                        "{method} {} to {}: {e:?}",
                        event_name(event as i32),
                        p.label()
                    );
                }
                tally.record(&CallRecord {
                    plugin: p.label(),
                    method: method.to_string(),
                    event: Some(event.as_str_name().to_string()),
                    pod_id: Some(pod.id.clone()),
                    container_id: container.as_ref().map(|c| c.id.clone()),
                    ok: res.is_ok(),
                });
            }
        }
        n += step;
    }
}

/// Accept `plugins` plugins on `listener`, configure and synchronize them,
/// then deliver events at the paced rate for the run's duration.
pub async fn run(
    listener: UnixListener,
    plugins: usize,
    opts: &RateOptions,
) -> Result<RateSummary> {
    if !opts.rate.is_finite() || opts.rate <= 0.0 || opts.in_flight == 0 {
        bail!("--rate must be above 0 and --in-flight at least 1");
    }
    let mut conns = Vec::with_capacity(plugins);
    for _ in 0..plugins {
        let p = accept_plugin(&listener).await?;
        eprintln!(
            "nri-rate: plugin {} registered, events mask {:#x}",
            p.label(),
            p.mask
        );
        conns.push(p);
    }
    // The runtime calls its plugins in index order.
    conns.sort_by(|a, b| (&a.idx, &a.name).cmp(&(&b.idx, &b.name)));
    let log = match &opts.calls_log {
        Some(p) => Some(Mutex::new(io::BufWriter::new(
            std::fs::File::create(p).with_context(|| format!("creating {}", p.display()))?,
        ))),
        None => None,
    };
    let tally = Arc::new(Tally {
        per_call: Mutex::new(BTreeMap::new()),
        sent: AtomicU64::new(0),
        ok: AtomicU64::new(0),
        failed: AtomicU64::new(0),
        pods: AtomicU64::new(0),
        max_late_us: AtomicU64::new(0),
        log,
    });
    let synced = synchronize(&conns, &opts.namespace, opts.sync_pods, &tally).await;
    // Synchronize is not an event call: count the paced calls only.
    let (sync_ok, sync_failed) = (
        tally.ok.swap(0, Ordering::Relaxed),
        tally.failed.swap(0, Ordering::Relaxed),
    );
    tally.sent.store(0, Ordering::Relaxed);
    log::info!("Synchronize: {sync_ok} ok, {sync_failed} failed");
    let plugin_summary: Vec<_> = conns
        .iter()
        .zip(&synced)
        .map(|(p, ok)| PluginSummary {
            plugin: p.label(),
            events_mask: p.mask,
            configured: *ok,
        })
        .collect();
    eprintln!(
        "nri-rate: {} plugins configured and synchronized; {} calls/s for {:.1} s",
        conns.len(),
        opts.rate,
        opts.duration.as_secs_f64()
    );

    let start = Instant::now();
    let pacer = Arc::new(Pacer {
        start,
        rate: opts.rate,
        next: AtomicU64::new(0),
        calls: (opts.rate * opts.duration.as_secs_f64()).round() as u64,
    });
    let conns = Arc::new(conns);
    let workers: Vec<_> = (0..opts.in_flight as u64)
        .map(|w| {
            tokio::spawn(worker(
                Arc::clone(&conns),
                Arc::clone(&pacer),
                Arc::clone(&tally),
                opts.namespace.clone(),
                w,
                opts.in_flight as u64,
            ))
        })
        .collect();
    for w in workers {
        w.await.context("a worker panicked")?;
    }
    let done = Instant::now();
    let elapsed = done.duration_since(start).as_secs_f64();
    if let Some(log) = &tally.log {
        use std::io::Write as _;
        log.lock()
            .unwrap()
            .flush()
            .context("writing the calls log")?;
    }
    let sent = tally.sent.load(Ordering::Relaxed);
    let per_call = tally.per_call.lock().unwrap().clone();
    Ok(RateSummary {
        target_rate: opts.rate,
        duration_s: opts.duration.as_secs_f64(),
        in_flight: opts.in_flight,
        plugins: plugin_summary,
        calls_sent: sent,
        calls_ok: tally.ok.load(Ordering::Relaxed),
        calls_failed: tally.failed.load(Ordering::Relaxed),
        achieved_rate: sent as f64 / elapsed,
        max_behind_schedule_ms: tally.max_late_us.load(Ordering::Relaxed) as f64 / 1e3,
        pods: tally.pods.load(Ordering::Relaxed),
        per_call,
    })
}

/// Bind the NRI socket at `path` (a stale socket file is replaced, as
/// containerd does).
pub fn listen(path: &Path) -> Result<UnixListener> {
    if path.exists() {
        std::fs::remove_file(path).with_context(|| format!("removing {}", path.display()))?;
    }
    UnixListener::bind(path).with_context(|| format!("binding {}", path.display()))
}

#[cfg(test)]
mod tests;
