//! fake-cri: a container runtime that holds N pods and does nothing else,
//! for the `named-span` part of `cargo xtask bench` (docs/benchmarks.md).
//!
//! ```text
//! fake-cri serve --cri /tmp/cri.sock --nri /tmp/nri.sock --pods 1000
//! fake-cri stop --cri /tmp/cri.sock --pod 617    # {"sandbox_id":..,"namespace":..,"name":..}, then Version calls
//! ```
//!
//! `serve` answers `runtime.v1.RuntimeService` on the CRI socket:
//! ListPodSandbox and ListContainers with the N pods (one container each,
//! labels and annotations as kubelet sets them), StopPodSandbox with OK,
//! anything else with UNIMPLEMENTED. It also holds a listening NRI socket
//! that nothing talks on: `nri-trace watch` traces both sockets and
//! requires both to be served (pipeline/target.rs); given both with
//! `--cri-socket` and `--nri-socket`, it asks nothing of the process that
//! listens (no process name, no runtime discovery). `stop` is the kubelet
//! side: a new connection that sends StopPodSandbox for pod number K, says
//! which pod that was, then goes on with a call every 10 ms (see `stop`).
//!
//! The server is a tower service routing on the gRPC path with tonic's
//! `Grpc` codec helper, not an implementation of k8s-cri's generated
//! `RuntimeService` trait: that trait has 30 methods and no default bodies,
//! and its `#[async_trait]` would not see methods a macro wrote, so each
//! UNIMPLEMENTED one would be written out by hand.

use std::{
    collections::HashMap,
    convert::Infallible,
    future::Future,
    path::{Path, PathBuf},
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
    time::Duration,
};

use anyhow::{Context as _, Result};
use clap::{Parser, Subcommand};
use hyper_util::rt::TokioIo;
use k8s_cri::v1::{self as api, runtime_service_client::RuntimeServiceClient};
use tonic::{
    body::Body,
    codegen::{http, tokio_stream::wrappers::UnixListenerStream},
    server::{Grpc, NamedService},
    transport::{Endpoint, Server, Uri},
    Request, Response, Status,
};
use tonic_prost::ProstCodec;

#[derive(Parser)]
#[command(
    name = "fake-cri",
    about = "A CRI runtime holding N pods, for the benchmarks"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Serve the CRI API with N pods on --cri, and hold a listening --nri.
    Serve {
        #[arg(long)]
        cri: PathBuf,
        #[arg(long)]
        nri: PathBuf,
        #[arg(long, default_value_t = 1000)]
        pods: usize,
    },
    /// Send StopPodSandbox for pod number --pod over a new connection.
    Stop {
        #[arg(long)]
        cri: PathBuf,
        #[arg(long)]
        pod: usize,
    },
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<()> {
    match Cli::parse().cmd {
        Cmd::Serve { cri, nri, pods } => serve(&cri, &nri, pods).await,
        Cmd::Stop { cri, pod } => stop(&cri, pod).await,
    }
}

/// A hex string of `len` digits that depends on `seed` and `i` only, so
/// that `serve` and `stop` agree on ids without talking.
fn hex(seed: u64, i: usize, len: usize) -> String {
    // splitmix64 (Steele, Lea, Flood 2014), one output per 16 digits;
    // (seed, i) in the two halves of the start keep the streams apart.
    let mut x = (seed << 32) ^ i as u64;
    let mut s = String::with_capacity(len + 16);
    while s.len() < len {
        x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        s += &format!("{:016x}", z ^ (z >> 31));
    }
    s.truncate(len);
    s
}

/// Pod number `i`: its sandbox id (64 hex digits, as containerd's),
/// namespace and name (a Deployment's pod: `app-<hash>-<suffix>`), uid.
struct PodName {
    id: String,
    namespace: String,
    name: String,
    uid: String,
    app: String,
    template_hash: String,
}

fn pod_name(i: usize) -> PodName {
    let app = format!("app{}", i % 50);
    let template_hash = hex(2, i, 10);
    let u = hex(3, i, 32);
    PodName {
        id: hex(1, i, 64),
        namespace: format!("team-{}", i % 20),
        name: format!("{app}-{template_hash}-{}", &hex(4, i, 5)),
        uid: format!(
            "{}-{}-{}-{}-{}",
            &u[0..8],
            &u[8..12],
            &u[12..16],
            &u[16..20],
            &u[20..32]
        ),
        app,
        template_hash,
    }
}

/// Created 2026-11-01 plus `i` minutes, in ns since the epoch.
fn created_ns(i: usize) -> i64 {
    1_793_491_200_000_000_000 + i as i64 * 60_000_000_000
}

fn map(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
        .collect()
}

/// The sandbox as containerd lists it: the labels and annotations kubelet
/// put in its PodSandboxConfig (kubernetes pkg/kubelet/kuberuntime
/// labels.go: the pod's labels plus io.kubernetes.pod.*; the pod's
/// annotations plus kubernetes.io/config.*).
fn sandbox(i: usize) -> api::PodSandbox {
    let p = pod_name(i);
    api::PodSandbox {
        id: p.id.clone(),
        metadata: Some(api::PodSandboxMetadata {
            name: p.name.clone(),
            uid: p.uid.clone(),
            namespace: p.namespace.clone(),
            attempt: 0,
        }),
        state: api::PodSandboxState::SandboxReady.into(),
        created_at: created_ns(i),
        labels: map(&[
            ("io.kubernetes.pod.name", &p.name),
            ("io.kubernetes.pod.namespace", &p.namespace),
            ("io.kubernetes.pod.uid", &p.uid),
            ("app", &p.app),
            ("app.kubernetes.io/name", &p.app),
            ("app.kubernetes.io/part-of", "shop"),
            ("pod-template-hash", &p.template_hash),
        ]),
        annotations: map(&[
            (
                "kubernetes.io/config.seen",
                "2026-11-01T00:00:00.000000000Z",
            ),
            ("kubernetes.io/config.source", "api"),
            ("prometheus.io/scrape", "true"),
            ("prometheus.io/port", "9090"),
        ]),
        runtime_handler: String::new(),
    }
}

/// Pod `i`'s one container, as containerd lists it (labels.go again:
/// io.kubernetes.container.* and the pod's identity; the hash, restart
/// count and termination settings as annotations).
fn container(i: usize) -> api::Container {
    let p = pod_name(i);
    let image = format!("registry.example/shop/{}:1.{}", p.app, i % 7);
    api::Container {
        id: hex(5, i, 64),
        pod_sandbox_id: p.id.clone(),
        metadata: Some(api::ContainerMetadata {
            name: p.app.clone(),
            attempt: 0,
        }),
        image: Some(api::ImageSpec {
            image: image.clone(),
            ..Default::default()
        }),
        image_ref: format!("sha256:{}", hex(6, i % 7, 64)),
        state: api::ContainerState::ContainerRunning.into(),
        created_at: created_ns(i) + 2_000_000_000,
        labels: map(&[
            ("io.kubernetes.container.name", &p.app),
            ("io.kubernetes.pod.name", &p.name),
            ("io.kubernetes.pod.namespace", &p.namespace),
            ("io.kubernetes.pod.uid", &p.uid),
        ]),
        annotations: map(&[
            ("io.kubernetes.container.hash", &hex(7, i, 8)),
            ("io.kubernetes.container.restartCount", "0"),
            (
                "io.kubernetes.container.terminationMessagePath",
                "/dev/termination-log",
            ),
            ("io.kubernetes.container.terminationMessagePolicy", "File"),
            ("io.kubernetes.pod.terminationGracePeriod", "30"),
            (
                "io.kubernetes.container.ports",
                r#"[{"name":"http","containerPort":8080,"protocol":"TCP"}]"#,
            ),
        ]),
        image_id: image,
    }
}

/// The runtime's answers, made once.
#[derive(Clone)]
struct FakeRuntime {
    pods: Arc<api::ListPodSandboxResponse>,
    containers: Arc<api::ListContainersResponse>,
}

impl NamedService for FakeRuntime {
    const NAME: &'static str = "runtime.v1.RuntimeService";
}

/// One unary call answered with `answer`, whatever its request.
async fn unary<Req, Resp>(req: http::Request<Body>, answer: Resp) -> http::Response<Body>
where
    Req: prost_cri::Message + Default + Send + 'static,
    Resp: prost_cri::Message + Clone + Send + 'static,
{
    let svc = tower::service_fn(move |_: Request<Req>| {
        let answer = answer.clone();
        async move { Ok::<_, Status>(Response::new(answer)) }
    });
    Grpc::new(ProstCodec::<Resp, Req>::default())
        .unary(svc, req)
        .await
}

impl tower::Service<http::Request<Body>> for FakeRuntime {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            let method = req.uri().path().rsplit('/').next().unwrap_or_default();
            Ok(match method {
                "ListPodSandbox" => {
                    unary::<api::ListPodSandboxRequest, _>(req, (*this.pods).clone()).await
                }
                "ListContainers" => {
                    unary::<api::ListContainersRequest, _>(req, (*this.containers).clone()).await
                }
                "StopPodSandbox" => {
                    unary::<api::StopPodSandboxRequest, _>(req, api::StopPodSandboxResponse {})
                        .await
                }
                other => {
                    Status::unimplemented(format!("fake-cri does not serve {other}")).into_http()
                }
            })
        })
    }
}

async fn serve(cri: &Path, nri: &Path, pods: usize) -> Result<()> {
    let runtime = FakeRuntime {
        pods: Arc::new(api::ListPodSandboxResponse {
            items: (0..pods).map(sandbox).collect(),
        }),
        containers: Arc::new(api::ListContainersResponse {
            containers: (0..pods).map(container).collect(),
        }),
    };
    for p in [cri, nri] {
        let _ = std::fs::remove_file(p);
    }
    // Held, never accepted on: nothing connects to it in the bench.
    let _nri = tokio::net::UnixListener::bind(nri)
        .with_context(|| format!("binding the NRI socket {}", nri.display()))?;
    let listener = tokio::net::UnixListener::bind(cri)
        .with_context(|| format!("binding the CRI socket {}", cri.display()))?;
    println!("fake-cri: serving {pods} pods");
    Server::builder()
        .add_service(runtime)
        .serve_with_incoming(UnixListenerStream::new(listener))
        .await
        .context("serving CRI")
}

async fn stop(cri: &Path, pod: usize) -> Result<()> {
    let path = cri.to_path_buf();
    let channel = Endpoint::from_static("http://cri.invalid")
        .connect_timeout(Duration::from_secs(5))
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move {
                Ok::<_, std::io::Error>(TokioIo::new(tokio::net::UnixStream::connect(path).await?))
            }
        }))
        .await
        .with_context(|| format!("connecting to {}", cri.display()))?;
    let p = pod_name(pod);
    let mut req = Request::new(api::StopPodSandboxRequest {
        pod_sandbox_id: p.id.clone(),
    });
    // kubelet's runtime request timeout (2 min), sent as grpc-timeout.
    req.set_timeout(Duration::from_mins(2));
    let mut client = RuntimeServiceClient::new(channel);
    client
        .stop_pod_sandbox(req)
        .await
        .context("StopPodSandbox")?;
    println!(
        "{}",
        serde_json::json!({"sandbox_id": p.id, "namespace": p.namespace, "name": p.name})
    );
    // Then traffic on the same connection, as kubelet's never stops: a
    // call's span comes out once capture time is 10 ms past its end
    // (nri-trace engine/correlate.rs, NRI_SETTLE_NS), and capture time
    // moves only with captured events. Version every 10 ms (UNIMPLEMENTED
    // here), until killed or for 30 s.
    for _ in 0..3000 {
        tokio::time::sleep(Duration::from_millis(10)).await;
        let _ = client.version(api::VersionRequest::default()).await;
    }
    Ok(())
}
