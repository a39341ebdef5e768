//! The NRI methods of versions no runtime in the lab speaks, decoded from
//! bytes of an independent encoder.
//!
//! The lab's runtimes are NRI 0.6.1 (containerd 1.7) and 0.8 (containerd
//! 2.1): they call StateChange for pod events, CreateContainer,
//! UpdateContainer and StopContainer, and no per-event method of v0.10
//! (UpdatePodSandbox, ValidateContainerAdjustment) or v0.12 (RunPodSandbox,
//! StopPodSandbox, ... see `proto/nri/v1alpha1/api.proto`). Here the
//! `ttrpc` crate (0.10, what the lab's test plugins serve with) plays both
//! ends: its client as a v0.12 runtime, its server as the plugin, once
//! with every v0.12 method and once with the v0.6.1 set only, which the
//! crate answers with Unimplemented itself (`asynchronous/server.rs`, as
//! ttrpc-go's server does). containerd/nri v0.12.0
//! `pkg/adaptation/plugin_type.go` then calls the plugin's StateChange with
//! the same event for nine of the methods; this test plays that fallback.
//! The bytes the two wrote are recorded in order (a relay between them),
//! each write put in one NRI mux frame on conn_id 1 as
//! `pkg/net/multiplex/mux.go` `write` does, and fed to nri-trace's NRI
//! assembler as a capture of the runtime's end. The NRI messages are the
//! lab's prost types (`nri_trace_lab::nri_api`), not nri-trace's.
//!
//! No root, no lab: runs everywhere.

use std::{
    collections::HashMap,
    io,
    path::PathBuf,
    sync::{Arc, Mutex},
};

use async_trait::async_trait;
use futures::StreamExt as _;
use nri_trace::{
    capture::{CaptureEvent, Chunk, ConnId, ConnOpen, Direction, Origin, Syscall, Timestamp},
    model::{NriCall, NriObservation, NriOutcome},
    testing::NriCallAssembler,
};
use nri_trace_lab::nri_api as api;
use prost::Message as _;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream, ReadHalf, WriteHalf};
use ttrpc::{
    r#async::{
        transport::{Listener, Socket},
        Client, MethodHandler, Server, Service, TtrpcContext,
    },
    Code, Request, Response,
};

const PLUGIN_SERVICE: &str = "nri.pkg.api.v1alpha1.Plugin";
const NRI_SOCKET: &str = "/run/nri/nri.sock";
/// gRPC's Unimplemented (google/rpc/code.proto).
const UNIMPLEMENTED: i32 = 12;

/// The methods of NRI v0.6.1's Plugin service (`pkg/api/api.proto`).
const V0_6_METHODS: &[&str] = &[
    "Configure",
    "Synchronize",
    "Shutdown",
    "CreateContainer",
    "UpdateContainer",
    "StopContainer",
    "StateChange",
];

/// A plugin method that answers OK with a fixed payload.
struct Answer(Vec<u8>);

#[async_trait]
impl MethodHandler for Answer {
    async fn handler(&self, _ctx: TtrpcContext, _req: Request) -> ttrpc::Result<Response> {
        Ok(Response {
            status: Some(ttrpc::get_status(Code::OK, "")),
            payload: self.0.clone(),
        })
    }
}

/// What the relay saw, in order: (direction relative to the runtime, bytes
/// of one read).
type Wire = Vec<(Direction, Vec<u8>)>;
type Log = Arc<Mutex<Wire>>;
/// Each call's method and the status code its caller saw (0: OK).
type Codes = Vec<(String, i32)>;

async fn pump(
    mut from: ReadHalf<DuplexStream>,
    mut to: WriteHalf<DuplexStream>,
    dir: Direction,
    log: Log,
) {
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        // Logged before it is passed on: a response is logged after the
        // request that caused it.
        log.lock().unwrap().push((dir, buf[..n].to_vec()));
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
}

fn pod() -> api::PodSandbox {
    api::PodSandbox {
        id: "pod-1".into(),
        name: "web".into(),
        namespace: "default".into(),
        uid: "uid-1".into(),
        ..Default::default()
    }
}

fn container() -> api::Container {
    api::Container {
        id: "ctr-1".into(),
        pod_sandbox_id: "pod-1".into(),
        name: "app".into(),
        ..Default::default()
    }
}

/// The request of per-event method `method` (v0.10 / v0.12 messages).
fn event_request(method: &str) -> Vec<u8> {
    let (p, c) = (Some(pod()), Some(container()));
    match method {
        "RunPodSandbox" => api::RunPodSandboxRequest { pod: p }.encode_to_vec(),
        "UpdatePodSandbox" => api::UpdatePodSandboxRequest {
            pod: p,
            ..Default::default()
        }
        .encode_to_vec(),
        "PostUpdatePodSandbox" => api::PostUpdatePodSandboxRequest { pod: p }.encode_to_vec(),
        "StopPodSandbox" => api::StopPodSandboxRequest { pod: p }.encode_to_vec(),
        "RemovePodSandbox" => api::RemovePodSandboxRequest { pod: p }.encode_to_vec(),
        "PostCreateContainer" => api::PostCreateContainerRequest {
            pod: p,
            container: c,
        }
        .encode_to_vec(),
        "StartContainer" => api::StartContainerRequest {
            pod: p,
            container: c,
        }
        .encode_to_vec(),
        "PostStartContainer" => api::PostStartContainerRequest {
            pod: p,
            container: c,
        }
        .encode_to_vec(),
        "PostUpdateContainer" => api::PostUpdateContainerRequest {
            pod: p,
            container: c,
        }
        .encode_to_vec(),
        "RemoveContainer" => api::RemoveContainerRequest {
            pod: p,
            container: c,
        }
        .encode_to_vec(),
        "ValidateContainerAdjustment" => api::ValidateContainerAdjustmentRequest {
            pod: p,
            container: c,
            ..Default::default()
        }
        .encode_to_vec(),
        other => panic!("no request for {other}"),
    }
}

/// The event a per-event method stands for, as StateChange carries it.
fn event_of(method: &str) -> api::Event {
    match method {
        "RunPodSandbox" => api::Event::RunPodSandbox,
        "UpdatePodSandbox" => api::Event::UpdatePodSandbox,
        "PostUpdatePodSandbox" => api::Event::PostUpdatePodSandbox,
        "StopPodSandbox" => api::Event::StopPodSandbox,
        "RemovePodSandbox" => api::Event::RemovePodSandbox,
        "PostCreateContainer" => api::Event::PostCreateContainer,
        "StartContainer" => api::Event::StartContainer,
        "PostStartContainer" => api::Event::PostStartContainer,
        "PostUpdateContainer" => api::Event::PostUpdateContainer,
        "RemoveContainer" => api::Event::RemoveContainer,
        "ValidateContainerAdjustment" => api::Event::ValidateContainerAdjustment,
        other => panic!("no event for {other}"),
    }
}

/// Methods whose Unimplemented answer makes a v0.12 runtime call
/// StateChange (v0.12.0 plugin_type.go).
const FALLS_BACK: &[&str] = &[
    "RunPodSandbox",
    "PostUpdatePodSandbox",
    "StopPodSandbox",
    "RemovePodSandbox",
    "PostCreateContainer",
    "StartContainer",
    "PostStartContainer",
    "PostUpdateContainer",
    "RemoveContainer",
];

/// Every per-event method of v0.10 / v0.12 the tests call.
const NEW_METHODS: &[&str] = &[
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

/// Serve `methods` with the ttrpc crate, call `calls` on it with its
/// client as a v0.12 runtime would (StateChange after an Unimplemented
/// answer to a method that falls back), and return what went over the
/// wire with each call's status code as the client saw it.
fn exchange(methods: &[&str], calls: &[&str]) -> (Wire, Codes) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (client_end, relay_a) = tokio::io::duplex(1 << 16);
        let (relay_b, server_end) = tokio::io::duplex(1 << 16);
        let log: Log = Arc::default();
        let (a_r, a_w) = tokio::io::split(relay_a);
        let (b_r, b_w) = tokio::io::split(relay_b);
        tokio::spawn(pump(a_r, b_w, Direction::Out, Arc::clone(&log)));
        tokio::spawn(pump(b_r, a_w, Direction::In, Arc::clone(&log)));

        let mut handlers: HashMap<String, Box<dyn MethodHandler + Send + Sync>> = HashMap::new();
        for m in methods {
            let payload = match *m {
                "ValidateContainerAdjustment" => api::ValidateContainerAdjustmentResponse {
                    reject: false,
                    reason: String::new(),
                }
                .encode_to_vec(),
                _ => Vec::new(),
            };
            handlers.insert((*m).to_string(), Box::new(Answer(payload)));
        }
        let incoming = futures::stream::once(async move { Ok::<_, io::Error>(server_end) })
            .chain(futures::stream::pending());
        let mut server = Server::new()
            .add_listener(Listener::new(incoming))
            .register_service(HashMap::from([(
                PLUGIN_SERVICE.to_string(),
                Service {
                    methods: handlers,
                    streams: HashMap::new(),
                },
            )]));
        server.start().await.expect("ttrpc server");
        let client = Client::new(Socket::new(client_end));

        let call = |method: String, payload: Vec<u8>| {
            let client = client.clone();
            async move {
                let req = Request {
                    service: PLUGIN_SERVICE.into(),
                    method: method.clone(),
                    payload,
                    timeout_nano: 2_000_000_000,
                    ..Default::default()
                };
                let code = match client.request(req).await {
                    Ok(_) => 0,
                    Err(ttrpc::Error::RpcStatus(s)) => s.code,
                    Err(e) => panic!("{method}: {e:?}"),
                };
                (method, code)
            }
        };
        let mut codes = Vec::new();
        for m in calls {
            let (m, code) = call((*m).to_string(), event_request(m)).await;
            let fallback = code == UNIMPLEMENTED && FALLS_BACK.contains(&m.as_str());
            codes.push((m.clone(), code));
            if fallback {
                let sc = api::StateChangeEvent {
                    event: event_of(&m) as i32,
                    pod: Some(pod()),
                    container: m.contains("Container").then(container),
                };
                codes.push(call("StateChange".into(), sc.encode_to_vec()).await);
            }
        }
        drop(client);
        server.shutdown().await.ok();
        let wire = log.lock().unwrap().clone();
        (wire, codes)
    })
}

fn ts(ns: u64) -> Timestamp {
    Timestamp {
        mono_ns: ns,
        wall_ns: ns,
    }
}

/// The exchange as a capture of the runtime's end of an NRI socket
/// connection: each relayed read one mux frame (conn_id 1, the Plugin
/// service) in one syscall. Returns the finished calls.
fn decode(wire: &[(Direction, Vec<u8>)]) -> Vec<NriCall> {
    let mut a = NriCallAssembler::new(vec![PathBuf::from(NRI_SOCKET)]);
    let mut out = Vec::new();
    a.on_capture(
        &CaptureEvent::Open(ConnOpen {
            conn: ConnId(1),
            ts: ts(1_000),
            tgid: 1,
            fd: 3,
            origin: Origin::Accept { listen_fd: 4 },
            socket_path: Some(NRI_SOCKET.into()),
            peer: None,
            inode: None,
            other_end: None,
        }),
        &mut out,
    );
    for (i, (dir, bytes)) in wire.iter().enumerate() {
        // containerd/nri pkg/net/multiplex/mux.go write: conn_id, length,
        // payload (frames split only above 4 MiB + 10).
        let mut frame = Vec::with_capacity(8 + bytes.len());
        frame.extend_from_slice(&1u32.to_be_bytes());
        frame.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
        frame.extend_from_slice(bytes);
        a.on_capture(
            &CaptureEvent::Chunk(Chunk {
                conn: ConnId(1),
                direction: *dir,
                ts: ts(2_000 + 1_000 * i as u64),
                tid: 1,
                syscall: if *dir == Direction::Out {
                    Syscall::Write
                } else {
                    Syscall::Read
                },
                syscall_len: frame.len() as u64,
                bytes: frame,
                truncated: false,
                gap_before: false,
            }),
            &mut out,
        );
    }
    out.into_iter()
        .filter_map(|o| match o {
            NriObservation::Call(c) => Some(c),
            _ => None,
        })
        .collect()
}

/// A v0.12 plugin: every v0.10 / v0.12 per-event method decodes to its
/// method, event, pod and container, answered OK.
#[test]
fn v0_10_and_v0_12_methods_decode_from_the_ttrpc_crate() {
    let all: Vec<&str> = V0_6_METHODS.iter().chain(NEW_METHODS).copied().collect();
    let (wire, codes) = exchange(&all, NEW_METHODS);
    assert!(codes.iter().all(|(_, c)| *c == 0), "{codes:?}");
    let calls = decode(&wire);
    let got: Vec<&str> = calls.iter().filter_map(NriCall::method_name).collect();
    assert_eq!(got, NEW_METHODS, "decoded methods, in order");
    for (c, m) in calls.iter().zip(NEW_METHODS) {
        assert_eq!(c.outcome, NriOutcome::Ok, "{m}: {c:?}");
        assert!(!c.partial, "{m}");
        assert_eq!(
            c.event.map(|e| e.as_str_name()),
            Some(event_of(m).as_str_name()),
            "{m}"
        );
        assert_eq!(c.timeout_nano, Some(2_000_000_000), "{m}");
        assert_eq!(c.pod.as_ref().map(|p| p.id.as_str()), Some("pod-1"), "{m}");
        assert_eq!(c.pod.as_ref().map(|p| p.name.as_str()), Some("web"), "{m}");
        let ctr = c.container.as_ref().map(|k| k.id.as_str());
        let want = (m.contains("Container")).then_some("ctr-1");
        assert_eq!(ctr, want, "{m}");
    }
    let validate = calls
        .iter()
        .find(|c| c.method_name() == Some("ValidateContainerAdjustment"))
        .unwrap();
    assert!(
        validate.summary.contains("accepted"),
        "ValidateContainerAdjustment summary {:?}",
        validate.summary
    );
}

/// A pre-v0.12 plugin (v0.6.1's methods): the ttrpc crate answers each new
/// method Unimplemented; for the nine that fall back, the runtime's
/// StateChange with the same event follows, decoded to the same event,
/// pod and container; the other two (v0.10's UpdatePodSandbox and
/// ValidateContainerAdjustment) stay errors with no fallback claimed.
#[test]
fn unimplemented_then_state_change_fallback_from_the_ttrpc_crate() {
    let (wire, codes) = exchange(V0_6_METHODS, NEW_METHODS);
    let calls = decode(&wire);
    assert_eq!(calls.len(), codes.len(), "{codes:?}");
    let mut i = 0;
    for m in NEW_METHODS {
        let c = &calls[i];
        assert_eq!(c.method_name(), Some(*m));
        assert_eq!(codes[i], ((*m).to_string(), UNIMPLEMENTED));
        match &c.outcome {
            NriOutcome::Error { code, .. } => assert_eq!(*code, UNIMPLEMENTED, "{m}"),
            other => panic!("{m}: outcome {other:?}"),
        }
        let claims = c.summary.contains("falls back to StateChange");
        i += 1;
        if FALLS_BACK.contains(m) {
            assert!(claims, "{m}: summary {:?}", c.summary);
            let f = &calls[i];
            assert_eq!(f.method_name(), Some("StateChange"), "after {m}");
            assert_eq!(f.outcome, NriOutcome::Ok, "StateChange after {m}");
            assert_eq!(f.event, c.event, "StateChange after {m}");
            assert_eq!(f.pod.as_ref().map(|p| &p.id), c.pod.as_ref().map(|p| &p.id));
            assert_eq!(
                f.container.as_ref().map(|k| &k.id),
                c.container.as_ref().map(|k| &k.id)
            );
            i += 1;
        } else {
            assert!(!claims, "{m} has no fallback: summary {:?}", c.summary);
        }
    }
    assert_eq!(i, calls.len());
}
