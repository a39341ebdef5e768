//! A fault-injecting NRI plugin: the Plugin service served with the `ttrpc`
//! crate on mux connection 1, RegisterPlugin called with a `ttrpc` client on
//! connection 2, and every request and lifecycle step recorded as truth.
//!
//! Truth records (see truth.rs):
//! - `Truth::Plugin`: `Connected` (socket connected or fd adopted),
//!   `Registered` (RegisterPlugin answered OK), `Configured` (Configure
//!   received; the mask we answer), `Synchronized` (Synchronize received;
//!   the pods it listed), `Disconnected` (the runtime closed the connection,
//!   a signal ended us, or a crash action fired).
//! - `Truth::Nri` per request: `recv_mono_ns` when its last byte was read
//!   from the socket, `reply_mono_ns` after the reply's last byte was written
//!   (None: never replied), and the status actually sent as the outcome.
//!   A request that is never answered is recorded with `reply_mono_ns: None`
//!   and outcome `DeadlineExceeded`: at once for `hang` (so that the record
//!   survives a SIGKILL), at disconnect otherwise (`Error{14}` there when
//!   the runtime gave no timeout or it had not expired). `crash` records
//!   `Error{code: 14, "crash..."}` and `Disconnected`, then exits with
//!   status [`CRASH_EXIT_CODE`] without answering.
//!
//! Requests run concurrently (ttrpc-rust spawns a task per request), so a
//! hanging request does not block others; the runtime serialises its NRI
//! calls anyway.

use std::{
    collections::HashMap,
    io,
    os::fd::{FromRawFd, RawFd},
    path::PathBuf,
    sync::{Arc, Mutex, RwLock},
    time::Duration,
};

use anyhow::{bail, Context, Result};
use async_trait::async_trait;
use futures::StreamExt as _;
use prost::Message as _;
use ttrpc::{
    proto::ResponseInit,
    r#async::{
        transport::{Listener, Socket},
        Client, MethodHandler, Server, Service, TtrpcContext,
    },
    Code, Request, Response,
};

use super::{
    config::{event_name, Behaviour, PluginConfig, Target},
    mux::{Mux, MuxEvent, MuxObserver},
};
use crate::{
    nri_api as api,
    truth::{mono_ns, Action, NriContainer, NriPod, Outcome, PluginEvent, Truth, TruthWriter},
};

/// ttrpc service names on the wire.
pub const PLUGIN_SERVICE: &str = "nri.pkg.api.v1alpha1.Plugin";
pub const RUNTIME_SERVICE: &str = "nri.pkg.api.v1alpha1.Runtime";

/// Exit status of the `crash` action.
pub const CRASH_EXIT_CODE: i32 = 3;

/// gRPC status UNAVAILABLE, for requests that got no reply.
const CODE_UNAVAILABLE: i32 = 14;

/// Plugin service methods we serve: those of NRI v0.6.1, then the dedicated
/// per-event methods of later versions (a newer runtime tries them first).
pub const METHODS: &[&str] = &[
    "Configure",
    "Synchronize",
    "Shutdown",
    "CreateContainer",
    "UpdateContainer",
    "StopContainer",
    "StateChange",
    // later versions
    "RunPodSandbox",
    "UpdatePodSandbox",
    "PostUpdatePodSandbox",
    "StopPodSandbox",
    "RemovePodSandbox",
    "PostCreateContainer",
    "StartContainer",
    "PostStartContainer",
    "PostUpdateContainer",
    "RemoveContainer",
    "ValidateContainerAdjustment",
];

/// How the plugin reaches the runtime.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// External plugin: connect to the runtime's NRI socket.
    Socket(PathBuf),
    /// Pre-launched plugin: the runtime's socketpair end, inherited as this
    /// fd (NRI_PLUGIN_SOCKET, always 3 in containerd/nri).
    Fd(RawFd),
}

/// Everything a plugin run needs.
#[derive(Clone, Debug)]
pub struct PluginOptions {
    pub name: String,
    pub idx: String,
    pub truth: PathBuf,
    pub endpoint: Endpoint,
    /// The configuration as resolved from file/env/CLI; a config string the
    /// runtime sends in Configure is merged over it (events and actions).
    pub config: PluginConfig,
}

/// Default NRI socket: the lab's.
pub fn default_socket() -> PathBuf {
    let lab =
        std::env::var("NRI_TRACE_LAB_DIR").unwrap_or_else(|_| "/var/lib/nri-trace-lab".into());
    PathBuf::from(lab.trim_end_matches('/')).join("run/nri.sock")
}

fn check_idx(idx: &str) -> Result<()> {
    if idx.len() != 2 || !idx.bytes().all(|b| b.is_ascii_digit()) {
        bail!("invalid plugin index {idx:?}: must be 2 digits (containerd/nri CheckPluginIndex)");
    }
    Ok(())
}

impl PluginOptions {
    /// Resolve identity and endpoint from `config` and the environment the
    /// runtime gives a pre-launched plugin (NRI_PLUGIN_NAME, NRI_PLUGIN_IDX,
    /// NRI_PLUGIN_SOCKET). A `socket` in the config makes it external even
    /// when NRI_PLUGIN_SOCKET is set.
    pub fn resolve(config: PluginConfig) -> Result<Self> {
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let endpoint = match (&config.socket, env("NRI_PLUGIN_SOCKET")) {
            (Some(p), _) => Endpoint::Socket(p.clone()),
            (None, Some(fd)) => Endpoint::Fd(
                fd.parse()
                    .with_context(|| format!("NRI_PLUGIN_SOCKET={fd:?} is not an fd number"))?,
            ),
            (None, None) => Endpoint::Socket(default_socket()),
        };
        let prelaunched = matches!(endpoint, Endpoint::Fd(_));
        // A pre-launched plugin is named by its file name; the runtime
        // ignores what it registers with, so the environment wins.
        let pick = |cfg: &Option<String>, var: &str| -> Option<String> {
            if prelaunched {
                env(var).or_else(|| cfg.clone())
            } else {
                cfg.clone().or_else(|| env(var))
            }
        };
        let name = pick(&config.name, "NRI_PLUGIN_NAME")
            .context("no plugin name (--name or NRI_PLUGIN_NAME)")?;
        let idx = pick(&config.idx, "NRI_PLUGIN_IDX")
            .context("no plugin index (--idx or NRI_PLUGIN_IDX)")?;
        check_idx(&idx)?;
        if prelaunched {
            for (cfg, got, what) in [(&config.name, &name, "name"), (&config.idx, &idx, "index")] {
                if let Some(c) = cfg {
                    if c != got {
                        log::warn!(
                            "pre-launched: using the runtime's plugin {what} {got:?}, not {c:?}"
                        );
                    }
                }
            }
        }
        let truth = if let Some(t) = &config.truth {
            t.clone()
        } else {
            let t = std::env::temp_dir().join(format!("nri-test-plugin-{idx}-{name}.truth.ndjson"));
            log::warn!("no truth file configured; recording to {}", t.display());
            t
        };
        config.behaviour()?; // fail early on a bad config
        Ok(Self {
            name,
            idx,
            truth,
            endpoint,
            config,
        })
    }
}

/// A request between its arrival and its record.
#[derive(Clone, Debug)]
struct Call {
    method: String,
    recv_mono_ns: u64,
    timeout_nano: i64,
    event: Option<String>,
    pod: Option<NriPod>,
    container: Option<NriContainer>,
    action: Action,
    /// Already written (hang, crash).
    recorded: bool,
}

struct Shared {
    name: String,
    idx: String,
    truth: TruthWriter,
    base_config: PluginConfig,
    behaviour: RwLock<Behaviour>,
    calls: Mutex<HashMap<u32, Call>>,
}

fn pod_ref(p: &api::PodSandbox) -> NriPod {
    NriPod {
        id: p.id.clone(),
        name: p.name.clone(),
        namespace: p.namespace.clone(),
        uid: p.uid.clone(),
    }
}

fn ctr_ref(c: &api::Container) -> NriContainer {
    NriContainer {
        id: c.id.clone(),
        name: c.name.clone(),
        pod_sandbox_id: c.pod_sandbox_id.clone(),
    }
}

/// What a request is about.
struct Decoded {
    target: Option<Target>,
    pod: Option<api::PodSandbox>,
    container: Option<api::Container>,
    configure: Option<api::ConfigureRequest>,
    synchronize: Option<api::SynchronizeRequest>,
}

fn decode(method: &str, payload: &[u8]) -> Result<Decoded, prost::DecodeError> {
    let mut d = Decoded {
        target: None,
        pod: None,
        container: None,
        configure: None,
        synchronize: None,
    };
    let ev = |e: api::Event| Some(Target::Event(e as i32));
    match method {
        "Configure" => {
            d.configure = Some(api::ConfigureRequest::decode(payload)?);
            d.target = Some(Target::Configure);
        }
        "Synchronize" => {
            d.synchronize = Some(api::SynchronizeRequest::decode(payload)?);
            d.target = Some(Target::Synchronize);
        }
        "Shutdown" => d.target = Some(Target::Shutdown),
        "StateChange" => {
            let r = api::StateChangeEvent::decode(payload)?;
            d.target = Some(Target::Event(r.event));
            (d.pod, d.container) = (r.pod, r.container);
        }
        "UpdateContainer" => {
            let r = api::UpdateContainerRequest::decode(payload)?;
            d.target = ev(api::Event::UpdateContainer);
            (d.pod, d.container) = (r.pod, r.container);
        }
        "UpdatePodSandbox" => {
            d.pod = api::UpdatePodSandboxRequest::decode(payload)?.pod;
            d.target = ev(api::Event::UpdatePodSandbox);
        }
        "ValidateContainerAdjustment" => {
            let r = api::ValidateContainerAdjustmentRequest::decode(payload)?;
            d.target = ev(api::Event::ValidateContainerAdjustment);
            (d.pod, d.container) = (r.pod, r.container);
        }
        // Every other request is {pod = 1, container = 2} or {pod = 1}.
        _ => {
            let r = api::CreateContainerRequest::decode(payload)?;
            (d.pod, d.container) = (r.pod, r.container);
            d.target = match method {
                "CreateContainer" => ev(api::Event::CreateContainer),
                "StopContainer" => ev(api::Event::StopContainer),
                "RunPodSandbox" => ev(api::Event::RunPodSandbox),
                "PostUpdatePodSandbox" => ev(api::Event::PostUpdatePodSandbox),
                "StopPodSandbox" => ev(api::Event::StopPodSandbox),
                "RemovePodSandbox" => ev(api::Event::RemovePodSandbox),
                "PostCreateContainer" => ev(api::Event::PostCreateContainer),
                "StartContainer" => ev(api::Event::StartContainer),
                "PostStartContainer" => ev(api::Event::PostStartContainer),
                "PostUpdateContainer" => ev(api::Event::PostUpdateContainer),
                "RemoveContainer" => ev(api::Event::RemoveContainer),
                _ => None,
            };
        }
    }
    Ok(d)
}

fn ok_response(payload: Vec<u8>) -> Response {
    let mut r = Response::init_status(ttrpc::get_status(Code::OK, ""));
    r.set_payload(payload);
    r
}

fn error_response(code: Code, message: &str) -> Response {
    Response::init_status(ttrpc::get_status(code, message))
}

impl Shared {
    fn record(&self, t: Truth) {
        if let Err(e) = self.truth.write(&t) {
            log::error!("writing truth: {e}");
        }
    }

    fn lifecycle(&self, what: PluginEvent) {
        log::info!("{}-{}: {what:?}", self.idx, self.name);
        self.record(Truth::Plugin {
            plugin: self.name.clone(),
            index: self.idx.clone(),
            mono_ns: mono_ns(),
            what,
        });
    }

    fn nri_record(&self, c: &Call, reply: Option<u64>, outcome: Outcome) {
        self.record(Truth::Nri {
            plugin: self.name.clone(),
            index: self.idx.clone(),
            method: c.method.clone(),
            event: c.event.clone(),
            pod: c.pod.clone(),
            container: c.container.clone(),
            recv_mono_ns: c.recv_mono_ns,
            reply_mono_ns: reply,
            action: c.action.clone(),
            outcome,
        });
    }

    /// What the mux saw on the wire.
    fn on_mux(&self, e: MuxEvent) {
        match e {
            MuxEvent::Request {
                stream_id,
                service,
                method,
                timeout_nano,
                at_mono_ns,
            } => {
                log::debug!(
                    "request {service}/{method} stream {stream_id} timeout {timeout_nano} ns"
                );
                self.calls.lock().unwrap().insert(
                    stream_id,
                    Call {
                        method,
                        recv_mono_ns: at_mono_ns,
                        timeout_nano,
                        event: None,
                        pod: None,
                        container: None,
                        action: Action::Ok,
                        recorded: false,
                    },
                );
            }
            MuxEvent::Response {
                stream_id,
                code,
                message,
                written,
                at_mono_ns,
            } => {
                let Some(c) = self.calls.lock().unwrap().remove(&stream_id) else {
                    log::warn!("response on stream {stream_id} for no known request");
                    return;
                };
                if c.recorded {
                    return;
                }
                let outcome = if code == 0 {
                    Outcome::Ok
                } else {
                    Outcome::Error { code, message }
                };
                self.nri_record(&c, written.then_some(at_mono_ns), outcome);
            }
        }
    }

    /// Record every request still unanswered (at disconnect).
    fn flush_unanswered(&self) {
        let now = mono_ns();

        for c in self
            .calls
            .lock()
            .unwrap()
            .drain()
            .map(|(_, c)| c)
            .filter(|c| !c.recorded)
        {
            let expired =
                c.timeout_nano > 0 && now.saturating_sub(c.recv_mono_ns) >= c.timeout_nano as u64;
            let outcome = if expired {
                Outcome::DeadlineExceeded
            } else {
                Outcome::Error {
                    code: CODE_UNAVAILABLE,
                    message: "connection closed before the reply".into(),
                }
            };
            self.nri_record(&c, None, outcome);
        }
    }

    /// Apply a config string from Configure (plugin_config_path drop-in).
    fn apply_runtime_config(&self, text: &str) {
        if text.trim().is_empty() {
            return;
        }
        let extra = match PluginConfig::from_json(text) {
            Ok(c) => c,
            Err(e) => {
                log::warn!("ignoring the runtime's plugin config: {e:#}");
                return;
            }
        };
        if extra.name.is_some()
            || extra.idx.is_some()
            || extra.truth.is_some()
            || extra.socket.is_some()
        {
            log::warn!("the runtime's plugin config can only set events and on; ignoring the rest");
        }
        let mut cfg = self.base_config.clone();
        cfg.events = extra.events.or(cfg.events);
        cfg.on.extend(extra.on);
        match cfg.behaviour() {
            Ok(b) => *self.behaviour.write().unwrap() = b,
            Err(e) => log::warn!("ignoring the runtime's plugin config: {e:#}"),
        }
    }

    async fn handle(&self, method: &str, stream_id: u32, payload: &[u8]) -> Response {
        let d = match decode(method, payload) {
            Ok(d) => d,
            Err(e) => {
                log::error!("{method}: undecodable request: {e}");
                return error_response(
                    Code::INVALID_ARGUMENT,
                    &format!("undecodable {method} request: {e}"),
                );
            }
        };
        log::debug!("{method}: {} payload bytes", payload.len());
        let mut reply_payload = vec![];
        if let Some(req) = &d.configure {
            log::debug!("Configure request: {req:?}");
            self.apply_runtime_config(&req.config);
            let mask = self.behaviour.read().unwrap().mask;
            self.lifecycle(PluginEvent::Configured {
                runtime: req.runtime_name.clone(),
                version: req.runtime_version.clone(),
                events_mask: mask,
            });
            reply_payload = api::ConfigureResponse {
                events: mask,
                request_timeout: 0,
            }
            .encode_to_vec();
        }
        if let Some(req) = &d.synchronize {
            self.lifecycle(PluginEvent::Synchronized {
                pods: req.pods.iter().map(pod_ref).collect(),
                containers: req.containers.len(),
                container_ids: req.containers.iter().map(|c| c.id.clone()).collect(),
            });
            // Since v0.7 the runtime may split Synchronize; acknowledge like
            // pkg/stub does, or, told `unsplit`, like a pre-v0.7 stub (no
            // `more` in its response).
            let unsplit =
                self.behaviour.read().unwrap().action(Target::Synchronize) == Action::Unsplit;
            reply_payload = api::SynchronizeResponse {
                update: vec![],
                more: req.more && !unsplit,
            }
            .encode_to_vec();
        }
        let action = d
            .target
            .map_or(Action::Ok, |t| self.behaviour.read().unwrap().action(t));
        let call = {
            let mut calls = self.calls.lock().unwrap();
            let c = calls.entry(stream_id).or_insert_with(|| Call {
                method: method.to_string(),
                recv_mono_ns: mono_ns(),
                timeout_nano: 0,
                event: None,
                pod: None,
                container: None,
                action: Action::Ok,
                recorded: false,
            });
            c.event = match d.target {
                Some(Target::Event(e)) => Some(event_name(e)),
                _ => None,
            };
            c.pod = d.pod.as_ref().map(pod_ref);
            c.container = d.container.as_ref().map(ctr_ref);
            c.action = action.clone();
            if matches!(action, Action::Hang | Action::Crash) {
                c.recorded = true;
            }
            c.clone()
        };
        let what = format!(
            "{method}{}",
            call.event
                .as_ref()
                .map(|e| format!(" {e}"))
                .unwrap_or_default()
        );
        log::info!("{what}: {action:?}");
        match action {
            // nri-test-plugin never adjusts (its configuration has no
            // adjust action: go-nri-plugin's, on upstream's stub).
            Action::Ok | Action::Unsplit | Action::Adjust { .. } => ok_response(reply_payload),
            Action::Delay { ms } => {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                ok_response(reply_payload)
            }
            Action::Error { message } => error_response(Code::UNKNOWN, &message),
            Action::Hang => {
                self.nri_record(&call, None, Outcome::DeadlineExceeded);
                futures::future::pending::<()>().await;
                unreachable!()
            }
            Action::Crash => {
                let message = format!("crash: exited on {what} without replying");
                self.nri_record(
                    &call,
                    None,
                    Outcome::Error {
                        code: CODE_UNAVAILABLE,
                        message: message.clone(),
                    },
                );
                self.lifecycle(PluginEvent::Disconnected { reason: message });
                std::process::exit(CRASH_EXIT_CODE);
            }
        }
    }
}

struct Method {
    shared: Arc<Shared>,
    name: &'static str,
}

#[async_trait]
impl MethodHandler for Method {
    async fn handler(&self, ctx: TtrpcContext, req: Request) -> ttrpc::Result<Response> {
        Ok(self
            .shared
            .handle(self.name, ctx.mh.stream_id, &req.payload)
            .await)
    }
}

/// Adopt the pre-launched plugin's inherited socket.
fn adopt_fd(fd: RawFd) -> Result<tokio::net::UnixStream> {
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstat(fd, &raw mut st) } != 0 {
        bail!("NRI_PLUGIN_SOCKET={fd}: {}", io::Error::last_os_error());
    }
    if st.st_mode & libc::S_IFMT != libc::S_IFSOCK {
        bail!("NRI_PLUGIN_SOCKET={fd} is not a socket");
    }
    // Keep it out of anything we might exec.
    unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    // SAFETY: the fd is an open socket that the runtime handed to us and
    // nothing else in this process owns.
    let s = unsafe { std::os::unix::net::UnixStream::from_raw_fd(fd) };
    s.set_nonblocking(true)?;
    Ok(tokio::net::UnixStream::from_std(s)?)
}

/// Run one plugin until the runtime disconnects (or SIGTERM/SIGINT).
/// Returns the reason it ended.
pub async fn run(opts: PluginOptions) -> Result<String> {
    let truth = TruthWriter::append(&opts.truth)
        .with_context(|| format!("opening {}", opts.truth.display()))?;
    let behaviour = opts.config.behaviour()?;
    let shared = Arc::new(Shared {
        name: opts.name.clone(),
        idx: opts.idx.clone(),
        truth,
        base_config: opts.config.clone(),
        behaviour: RwLock::new(behaviour),
        calls: Mutex::new(HashMap::new()),
    });

    let (trunk, prelaunched) = match &opts.endpoint {
        Endpoint::Socket(p) => (
            tokio::net::UnixStream::connect(p)
                .await
                .with_context(|| format!("connecting to {}", p.display()))?,
            false,
        ),
        Endpoint::Fd(fd) => (adopt_fd(*fd)?, true),
    };
    shared.lifecycle(PluginEvent::Connected {
        prelaunched,
        pid: std::process::id(),
    });

    let s2 = Arc::clone(&shared);
    let observer: MuxObserver = Arc::new(move |e| s2.on_mux(e));
    let mux = Mux::start(trunk, observer);

    // Plugin service on connection 1.
    let mut methods: HashMap<String, Box<dyn MethodHandler + Send + Sync>> = HashMap::new();
    for m in METHODS {
        methods.insert(
            m.to_string(),
            Box::new(Method {
                shared: Arc::clone(&shared),
                name: m,
            }),
        );
    }
    let service = Service {
        methods,
        streams: HashMap::new(),
    };
    let conn1 = mux.plugin_conn;
    let incoming = futures::stream::once(async move { Ok::<_, io::Error>(conn1) })
        .chain(futures::stream::pending());
    let mut server = Server::new()
        .add_listener(Listener::new(incoming))
        .register_service(HashMap::from([(PLUGIN_SERVICE.to_string(), service)]));
    server.start().await.context("starting the ttrpc server")?;

    // Runtime service on connection 2: register.
    let client = Client::new(Socket::new(mux.runtime_conn));
    let reg = api::RegisterPluginRequest {
        plugin_name: opts.name.clone(),
        plugin_idx: opts.idx.clone(),
        nri_version: String::new(),
    };
    let req = Request {
        service: RUNTIME_SERVICE.to_string(),
        method: "RegisterPlugin".to_string(),
        payload: reg.encode_to_vec(),
        timeout_nano: 5_000_000_000,
        ..Default::default()
    };
    let mut closed = mux.closed;
    let registered = tokio::select! {
        r = client.request(req) => r.map_err(|e| format!("RegisterPlugin failed: {e:?}")),
        r = &mut closed => Err(r.unwrap_or_else(|_| "mux ended".into())),
    };
    if let Err(reason) = registered {
        shared.flush_unanswered();
        shared.lifecycle(PluginEvent::Disconnected {
            reason: reason.clone(),
        });
        bail!("{reason}");
    }
    shared.lifecycle(PluginEvent::Registered);

    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let reason = tokio::select! {
        r = &mut closed => r.unwrap_or_else(|_| "mux ended".into()),
        _ = term.recv() => "terminated (SIGTERM)".to_string(),
        _ = int.recv() => "interrupted (SIGINT)".to_string(),
    };
    shared.flush_unanswered();
    shared.lifecycle(PluginEvent::Disconnected {
        reason: reason.clone(),
    });
    drop(client);
    drop(server);
    Ok(reason)
}
