//! A capture session: sets up tracking from /proc, then drains the backend
//! on a timer (and on the backend's wakeups) into a bounded channel of
//! [`CaptureEvent`]s.
//!
//! Back-pressure is deliberate: a slow consumer makes the drain task wait,
//! the ring buffer fills, and the kernel drops and *counts* records. The
//! traced runtime is never slowed down by nri-trace's consumer. The channel
//! is bounded in bytes as well as in events ([`SessionConfig::queue_bytes`]):
//! a count alone let a burst of 32 KiB chunks (a million tiny HTTP/2
//! frames) queue tens of MiB in front of a slower decoder, where the ring
//! would have held them at 16 MiB and then counted the loss.

mod attach;
mod clock;
mod cri_query;
mod drain;
mod follower;
mod peers;
mod queue;
mod reattach;

use std::{collections::HashMap, path::PathBuf, time::Duration};

use thiserror::Error;
use tokio::{io::unix::AsyncFd, sync::mpsc, task::JoinHandle};

use super::{
    backend::{BackendError, CaptureBackend},
    discovery::{DiscoveryError, EnvPeerSocket, Listener},
    tracker::ConnTracker,
    CaptureEvent,
};
use attach::{attach_listeners, attach_socketpairs};
use cri_query::{ask_cri_state, Ask};
use drain::{drain_loop, Fd, Resolver};
use follower::Follower;
use peers::RecentPeers;
use queue::Queue;
use reattach::Reattach;

pub(crate) use clock::now_timestamp;
pub use clock::{monotonic_ns, wall_offset_ns};

#[derive(Debug, Error)]
pub enum SessionError {
    #[error(transparent)]
    Discovery(#[from] DiscoveryError),
    #[error(transparent)]
    Backend(#[from] BackendError),
    #[error("nothing to capture: give at least one --socket or --pid")]
    NoTarget,
    #[error("cannot watch the ring buffer descriptor")]
    Poll(#[source] std::io::Error),
}

/// Most a drain takes from the ring before its events are sent on
/// (`CaptureBackend::drain`'s budget): a drain that ran until the ring was
/// empty kept up with a fast producer and built one batch of everything it
/// produced (a million 8-byte reads: some 170 MB, and an OOM kill inside a
/// 128 MiB cgroup; docs/faults.md).
pub(crate) const DRAIN_BUDGET: usize = 4 << 20;

/// Default [`SessionConfig::queue_bytes`]: as much as the default ring
/// holds, so that userspace queues at most what the kernel would.
pub const DEFAULT_QUEUE_BYTES: usize = nri_trace_common::DEFAULT_RING_BYTES as usize;

#[derive(Clone, Debug)]
pub struct SessionConfig {
    /// Listening unix sockets whose server-side connections are captured.
    pub sockets: Vec<PathBuf>,
    /// Processes to track without a listener (their socketpairs, and
    /// connects to `connect_paths`).
    pub pids: Vec<u32>,
    /// Socket paths whose connect() by a tracked process is captured.
    pub connect_paths: Vec<PathBuf>,
    /// How often the ring buffer is drained when no wakeup came.
    pub drain_interval: Duration,
    /// Capacity of the event channel.
    pub channel: usize,
    /// Most chunk bytes (plus the events' own size) waiting in the event
    /// channel; the drain task waits (and the ring fills) beyond it.
    pub queue_bytes: usize,
    /// Environment variables read from each peer process into
    /// [`Peer::env`] (e.g. NRI_PLUGIN_NAME, NRI_PLUGIN_IDX).
    pub peer_env: Vec<String>,
    /// When set, also capture the connections that already exist when the
    /// session starts and do not belong to a listener: every connected unix
    /// socket of a tracked process (listener pids and `pids`) whose peer
    /// socket is held by a process that has this environment variable. For
    /// NRI, `NRI_PLUGIN_SOCKET`: the runtime launches pre-installed plugins
    /// with one end of a socketpair as fd 3 and that variable set, so these
    /// connections never show up on the NRI socket path.
    pub existing_socketpair_env: Option<String>,
    /// Also capture the *peer's end* of every traced connection whose peer
    /// is another process (e.g. the NRI plugin's end of its connection to
    /// the runtime): the peer process is tracked too, for that fd only, and
    /// its end is a connection of its own whose `ConnOpen::other_end` names
    /// the traced end. Followed: connections found at start (listener
    /// connections, `existing_socketpair_env` pairs) and new ones once their
    /// peer is found (see docs/capture.md for the limits). Never recursive:
    /// the peer's own other connections are not captured.
    pub follow_peer_ends: bool,
    /// With `follow_peer_ends`: connections of these listening sockets are
    /// not followed (e.g. the CRI socket when CRI and NRI are traced
    /// together: kubelet's end would cost kubelet and add nothing).
    pub no_follow_sockets: Vec<PathBuf>,
    /// Report the sandbox events of the runtime's process tree (the
    /// tracked processes, shims, kubelet and their descendants): the
    /// backend must have its sandbox probes attached.
    pub sandbox: bool,
    /// Connections whose peer (SO_PEERCRED) is one of these processes are
    /// not captured: dropped from the stream and switched off in the
    /// kernel as soon as their peer is known (nri-trace's own pid, so
    /// that its CRI state query is not traced as a runtime's call).
    pub ignore_peer_pids: Vec<u32>,
    /// Ask the runtime listening on this CRI socket for its pods and
    /// containers (capture/cri_state.rs) at start and whenever a process
    /// listens on it again (a runtime restart): a
    /// [`CaptureEvent::CriState`] in the stream each time it answers.
    pub cri_state: Option<PathBuf>,
    /// A socket of `sockets` that nothing listens on yet is waited for
    /// instead of an error: the kernel tracks whoever binds it from the
    /// bind on (as after a runtime restart), and it is looked for in /proc
    /// as a lost socket is. For a tracer started before the runtime (a
    /// DaemonSet at node boot).
    pub wait_for_listeners: bool,
}

impl Default for SessionConfig {
    fn default() -> Self {
        Self {
            sockets: vec![],
            pids: vec![],
            connect_paths: vec![],
            drain_interval: Duration::from_millis(2),
            channel: 65536,
            queue_bytes: DEFAULT_QUEUE_BYTES,
            peer_env: vec![],
            existing_socketpair_env: None,
            follow_peer_ends: false,
            no_follow_sockets: vec![],
            sandbox: false,
            ignore_peer_pids: vec![],
            cri_state: None,
            wait_for_listeners: false,
        }
    }
}

/// What the session found when it attached (not the record file's
/// `session` line).
#[derive(Clone, Debug)]
pub struct AttachState {
    pub listeners: Vec<Listener>,
    pub tracked_pids: Vec<u32>,
    /// Pre-existing connections found through
    /// [`SessionConfig::existing_socketpair_env`] and registered.
    pub existing_socketpairs: Vec<EnvPeerSocket>,
    /// Sockets nothing served yet ([`SessionConfig::wait_for_listeners`]):
    /// each is traced from its bind, reported as a
    /// [`ProcessEvent::Listening`].
    pub unserved: Vec<PathBuf>,
}

pub struct Session {
    pub attached: AttachState,
    pub events: mpsc::Receiver<CaptureEvent>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl Session {
    /// Ask the drain task to flush and finish; `events` then ends.
    pub fn stop_signal(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }

    /// Stop draining, flush what is left, and close the event stream.
    pub async fn stop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.task.take() {
            let _ = t.await;
        }
    }
}
/// Start capturing. Must be called inside a tokio runtime.
#[allow(
    clippy::unused_async,
    reason = "it spawns the drain task: async keeps it inside a runtime"
)]
pub async fn start_session(
    cfg: SessionConfig,
    mut backend: Box<dyn CaptureBackend>,
) -> Result<Session, SessionError> {
    if cfg.sockets.is_empty() && cfg.pids.is_empty() {
        return Err(SessionError::NoTarget);
    }
    let wall_offset = wall_offset_ns();
    let mut tracker = ConnTracker::new(wall_offset);
    let mut initial = Vec::new();
    let mut listeners = Vec::new();
    let mut tracked = Vec::new();
    let mut to_follow = Vec::new();
    // Sockets nothing serves yet (with `wait_for_listeners`).
    let mut unserved = Vec::new();

    for p in &cfg.connect_paths {
        backend.track_connect_path(p)?;
        tracker.add_connect_path(p.clone());
    }
    for &pid in &cfg.pids {
        backend.track_process(pid)?;
        tracked.push(pid);
    }
    for path in &cfg.sockets {
        let follow = !cfg.no_follow_sockets.contains(path);
        let found = match attach_listeners(
            &mut *backend,
            &mut tracker,
            path,
            &cfg.peer_env,
            follow,
            &mut to_follow,
            &mut initial,
        ) {
            Ok(found) => found,
            Err(SessionError::Discovery(DiscoveryError::NoListener { .. }))
                if cfg.wait_for_listeners =>
            {
                unserved.push(path.clone());
                continue;
            }
            Err(e) => return Err(e),
        };
        tracked.extend(found.iter().map(|l| l.pid));
        listeners.extend(found);
    }
    // The kernel tracks whoever binds one of these paths (again: a runtime
    // restarting; or for the first time: a runtime starting after us) from
    // the bind on; a /proc scan would come late.
    for path in listeners.iter().map(|l| &l.path).chain(&unserved) {
        let name = tracker.add_bind_path(path.clone());
        backend.watch_bind_path(path, name)?;
    }
    tracked.sort_unstable();
    tracked.dedup();
    let sandbox = if cfg.sandbox {
        // kubelet's own share of a teardown (unmounting the pod's volumes,
        // removing its cgroup: pod-stuck-terminating-zh.txt) is done by
        // the CRI client: the peers on the sockets whose far end is not
        // followed (the CRI socket), whatever their process is called.
        let clients = initial.iter().filter_map(|ev| match ev {
            CaptureEvent::Open(o)
                if o.socket_path
                    .as_ref()
                    .is_some_and(|p| cfg.no_follow_sockets.contains(p)) =>
            {
                o.peer.as_ref().map(|p| p.pid)
            }
            _ => None,
        });
        let roots: Vec<u32> = tracked.iter().copied().chain(clients).collect();
        let tree = super::sandbox::runtime_tree(&roots);
        log::debug!("watching the sandbox events of {} processes", tree.len());
        backend.watch_tasks(&tree)?;
        Some(super::sandbox::SandboxContext::new())
    } else {
        None
    };

    // Connections made before we attached that no listener accounts for:
    // the socketpairs a runtime created to launch plugins itself. Every
    // process in `tracked` is already tracked in the kernel, so a pair made
    // from now on is seen there; one made between that and this scan is
    // both, and the tracker keeps only this registration (its Open record
    // is older than `scan_done`).
    let existing_socketpairs = match cfg.existing_socketpair_env.as_deref() {
        Some(var) => attach_socketpairs(
            &mut *backend,
            &mut tracker,
            &tracked,
            var,
            &cfg.peer_env,
            &mut to_follow,
            &mut initial,
        )?,
        None => Vec::new(),
    };

    let follower = if cfg.follow_peer_ends {
        let mut f = Follower::new(&tracked, &cfg.peer_env);
        f.follow_existing(&mut *backend, &mut tracker, &mut initial, &to_follow);
        Some(f)
    } else {
        None
    };

    let (tx, rx) = mpsc::channel(cfg.channel.max(16));
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
    // SAFETY: the ring buffer fd is owned by `backend`, which drain_loop
    // keeps alive (and does not close) until after it drops `poll`.
    let poll = unsafe {
        AsyncFd::register_with_interest(Fd(backend.poll_fd()), tokio::io::Interest::READABLE)
    }
    .map_err(|e| SessionError::Poll(e.into()))?;
    let interval = cfg.drain_interval;
    let no_follow = listeners
        .iter()
        .filter(|l| cfg.no_follow_sockets.contains(&l.path))
        .map(|l| (l.pid, l.listen_fd as i32))
        .collect();
    let reattach = Reattach {
        listener_paths: listeners.iter().fold(HashMap::new(), |mut m, l| {
            m.entry(l.pid).or_insert_with(Vec::new).push(l.path.clone());
            m
        }),
        // Looked for as the sockets of a runtime that exited are.
        lost: unserved.clone(),
        next_scan_ns: 0,
        fast_until_ns: 0,
        existing_socketpair_env: cfg.existing_socketpair_env.clone(),
        no_follow_sockets: cfg.no_follow_sockets.clone(),
    };
    let cri_state = cfg.cri_state.map(|path| {
        let (ask, asked) = mpsc::unbounded_channel();
        // The first query, at start.
        let _ = ask.send(Ask::Start);
        tokio::spawn(ask_cri_state(path.clone(), tx.downgrade(), asked));
        (path, ask)
    });
    let queue_bytes = cfg.queue_bytes;
    let resolver = Resolver {
        peer_env: cfg.peer_env,
        follower,
        no_follow,
        reattach,
        sandbox,
        ignore_peer_pids: cfg.ignore_peer_pids,
        cri_state,
        recent: RecentPeers::default(),
    };
    let task = tokio::spawn(async move {
        for ev in initial {
            if tx.send(ev).await.is_err() {
                return;
            }
        }
        let queue = Queue::new(tx, queue_bytes);
        drain_loop(backend, tracker, poll, queue, stop_rx, interval, resolver).await;
    });
    Ok(Session {
        attached: AttachState {
            listeners,
            tracked_pids: tracked,
            existing_socketpairs,
            unserved,
        },
        events: rx,
        stop: Some(stop_tx),
        task: Some(task),
    })
}

/// What the tests of the session's parts share.
#[cfg(test)]
mod test_support {
    use std::{collections::VecDeque, os::fd::RawFd, path::Path};

    use super::super::{
        backend::{BackendError, CaptureBackend},
        Loss,
    };

    /// Records handed out as the eBPF backend's `drain` does: in order, up
    /// to the budget (each record's length plus `RECORD_COST`); empty, a
    /// backend that records nothing and accepts everything.
    #[derive(Default)]
    pub(super) struct RingOf(pub(super) VecDeque<Vec<u8>>);

    impl CaptureBackend for RingOf {
        fn track_process(&mut self, _: u32) -> Result<(), BackendError> {
            Ok(())
        }
        fn untrack_process(&mut self, _: u32) -> Result<(), BackendError> {
            Ok(())
        }
        fn track_fd(&mut self, _: u32, _: u32, _: u32) -> Result<(), BackendError> {
            Ok(())
        }
        fn track_connect_path(&mut self, _: &Path) -> Result<(), BackendError> {
            Ok(())
        }
        fn watch_bind_path(&mut self, _: &Path, _: u32) -> Result<(), BackendError> {
            Ok(())
        }
        fn loss(&self) -> Result<Loss, BackendError> {
            Ok(Loss::default())
        }
        fn drain(&mut self, budget: usize, f: &mut dyn FnMut(&[u8])) -> bool {
            let mut used = 0;
            while used < budget {
                let Some(r) = self.0.pop_front() else {
                    return false;
                };
                used += r.len() + super::super::backend::RECORD_COST;
                f(&r);
            }
            true
        }
        fn poll_fd(&self) -> RawFd {
            -1
        }
    }
}
