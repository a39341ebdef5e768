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

use std::{
    collections::{HashMap, HashSet, VecDeque},
    os::fd::{AsRawFd, RawFd},
    path::{Path, PathBuf},
    time::Duration,
};

use nri_trace_common::{FD_CONN, FD_LISTEN};
use thiserror::Error;
use tokio::{io::unix::AsyncFd, sync::mpsc, task::JoinHandle};

use super::{
    backend::{BackendError, CaptureBackend},
    discovery::{self, DiscoveryError, EnvPeerSocket, Listener},
    record,
    tracker::{BoundListener, ConnFacts, ConnTracker, NewConn},
    CaptureEvent, ConnId, Loss, Origin, Peer, ProcessEvent,
};

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
pub const DRAIN_BUDGET: usize = 4 << 20;

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

/// What the session found when it started.
#[derive(Clone, Debug)]
pub struct SessionInfo {
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
    pub info: SessionInfo,
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

/// How far behind the drain's clock a [`CaptureEvent::Tick`] is stamped: a
/// probe stamps a record and submits it to the ring within microseconds
/// (the same program run), so every record stamped before then has been
/// read by a drain that found the ring empty this much later.
pub const TICK_LAG_NS: u64 = 50_000_000;
/// While the sockets stay quiet, a tick this often for the first
/// [`FAST_TICKS_FOR_NS`] (a call settles 10 ms after its end, an ambiguous
/// one within 3 s: each comes out within a tenth of a second)...
pub const FAST_TICK_NS: u64 = 100_000_000;
pub const FAST_TICKS_FOR_NS: u64 = 5_000_000_000;
/// ...then this often (capture time keeps moving for deadlines: a hung
/// hook's).
pub const IDLE_TICK_NS: u64 = 1_000_000_000;

/// When the drain loop sends the capture's clock ([`CaptureEvent::Tick`]):
/// once the sockets have been quiet for [`TICK_LAG_NS`] after their last
/// event, then every [`FAST_TICK_NS`], and after [`FAST_TICKS_FOR_NS`]
/// every [`IDLE_TICK_NS`], while they stay quiet. Never while
/// socket events flow (their own timestamps move capture time), and never
/// behind one already sent.
#[derive(Debug, Default)]
struct TickClock {
    /// Monotonic time of the last drain that sent events.
    last_events_ns: u64,
    /// Whether events went since the last tick.
    events_since_tick: bool,
    last_tick_ns: u64,
}

impl TickClock {
    /// After a drain at `now` that found `sent` events: the tick to send, if due.
    fn after_drain(&mut self, now: u64, sent: bool) -> Option<u64> {
        if sent {
            self.last_events_ns = now;
            self.events_since_tick = true;
            return None;
        }
        let quiet = now.saturating_sub(self.last_events_ns);
        let every = if quiet < FAST_TICKS_FOR_NS {
            FAST_TICK_NS
        } else {
            IDLE_TICK_NS
        };
        let due = if self.events_since_tick {
            quiet >= TICK_LAG_NS
        } else {
            now.saturating_sub(self.last_tick_ns) >= every
        };
        let at = now.checked_sub(TICK_LAG_NS)?;
        if !due || at < self.last_events_ns {
            return None;
        }
        self.last_tick_ns = now;
        self.events_since_tick = false;
        Some(at)
    }
}

/// CLOCK_MONOTONIC now, the clock of bpf_ktime_get_ns().
pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// CLOCK_REALTIME minus CLOCK_MONOTONIC now: the offset capture
/// timestamps' wall clock is derived with.
pub fn wall_offset_ns() -> i128 {
    i128::from(clock_ns(libc::CLOCK_REALTIME)) - i128::from(monotonic_ns())
}

/// Now as a capture [`Timestamp`]: CLOCK_MONOTONIC and the wall clock
/// that goes with it.
pub fn now_timestamp() -> super::Timestamp {
    let mono_ns = monotonic_ns();
    let wall_ns = u64::try_from(i128::from(mono_ns) + wall_offset_ns()).unwrap_or(0);
    super::Timestamp { mono_ns, wall_ns }
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    unsafe { libc::clock_gettime(clock, &raw mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Who is at the other end of (tgid, fd), as far as /proc can tell, with
/// the variables `env` of its environment.
///
/// This is SO_PEERCRED: the process that connect()ed or listen()ed, or, for
/// a socketpair, the process that *created* the pair (af_unix.c
/// `unix_socketpair`), i.e. the traced process itself even after it handed
/// the other end to a child. Pre-existing socketpairs get their peer from
/// the holder of the peer socket instead (see [`peer_process`]).
pub fn peer_of(tgid: u32, fd: i32, env: &[String]) -> Option<Peer> {
    let cred = discovery::peer_cred(tgid, u32::try_from(fd).ok()?)?;
    // pid 0: the peer is in a PID namespace we cannot see.
    let env: &[String] = if cred.pid == 0 { &[] } else { env };
    Some(peer_with(cred.pid, cred.uid, env))
}

/// Process `pid` as a [`Peer`] (uid from `/proc/<pid>/status`), with the
/// variables `env` of its environment; `None` if it is gone.
pub fn peer_process(pid: u32, env: &[String]) -> Option<Peer> {
    let uid = discovery::process_euid(pid)?;
    Some(peer_with(pid, uid, env))
}

/// A [`Peer`] from its pid and uid, with what /proc shows of it. Each read
/// is bounded or small, and one that fails (the process exited between
/// SO_PEERCRED and here, or pid 0: another PID namespace) leaves its field
/// unknown rather than failing the connection.
fn peer_with(pid: u32, uid: u32, env: &[String]) -> Peer {
    let info = (pid != 0).then(|| discovery::process_info(pid)).flatten();
    Peer {
        pid,
        uid,
        comm: info.as_ref().map(|i| i.comm.clone()),
        cmdline: info.map(|i| i.cmdline).unwrap_or_default(),
        env: discovery::process_env(pid, env),
        cgroup: (pid != 0).then(|| discovery::process_cgroup(pid)).flatten(),
    }
}

/// How long a peer read from /proc stands for its process (reader's clock).
const RECENT_PEER_NS: u64 = 10_000_000_000;
/// Most peers remembered.
const MAX_RECENT_PEERS: usize = 1024;

/// The peers read lately, by pid, to complete a peer whose process exited
/// before /proc was read: a client that dials twice and exits milliseconds
/// after its second dial (`crictl ps` dials the runtime and the image
/// service: its second connection was read with the pid alone, under a CI
/// run's load, 2026-11-28) is the process its first connection showed.
/// Only the same pid and uid, read within [`RECENT_PEER_NS`]: pids are
/// allocated cyclically (kernel/pid.c `alloc_pid`, `idr_alloc_cyclic`),
/// so one is not handed out again before `pid_max` others were. A client
/// with one connection that exits before the read stays unknown.
#[derive(Debug, Default)]
struct RecentPeers {
    by_pid: HashMap<u32, (Peer, u64)>,
}

impl RecentPeers {
    /// `peer` as read at `now_ns`, completed from the same process's
    /// earlier read when /proc no longer showed it; remembered when it did.
    fn complete(&mut self, peer: Option<Peer>, now_ns: u64) -> Option<Peer> {
        let mut p = peer?;
        if p.pid == 0 {
            return Some(p);
        }
        if p.comm.is_some() {
            if self.by_pid.len() >= MAX_RECENT_PEERS && !self.by_pid.contains_key(&p.pid) {
                self.by_pid
                    .retain(|_, (_, at)| now_ns.saturating_sub(*at) <= RECENT_PEER_NS);
                if self.by_pid.len() >= MAX_RECENT_PEERS {
                    self.by_pid.clear();
                }
            }
            self.by_pid.insert(p.pid, (p.clone(), now_ns));
            return Some(p);
        }
        if let Some((seen, at)) = self.by_pid.get(&p.pid) {
            if seen.uid == p.uid && now_ns.saturating_sub(*at) <= RECENT_PEER_NS {
                p.comm.clone_from(&seen.comm);
                p.cmdline.clone_from(&seen.cmdline);
                p.cgroup.clone_from(&seen.cgroup);
                if p.env.is_empty() {
                    p.env.clone_from(&seen.env);
                }
            }
        }
        Some(p)
    }
}

struct Fd(RawFd);
impl AsRawFd for Fd {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

/// Start capturing. Must be called inside a tokio runtime.
#[allow(
    clippy::unused_async,
    reason = "it spawns the drain task: async keeps it inside a runtime"
)]
pub async fn start(
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
        info: SessionInfo {
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

/// Track the processes listening on `path` and register the connections
/// they hold (to be followed if `follow`); the listeners.
fn attach_listeners(
    backend: &mut dyn CaptureBackend,
    tracker: &mut ConnTracker,
    path: &Path,
    peer_env: &[String],
    follow: bool,
    to_follow: &mut Vec<ToFollow>,
    out: &mut Vec<CaptureEvent>,
) -> Result<Vec<Listener>, SessionError> {
    let found = discovery::find_listeners(path)?;
    // Listening fds first, so accepts from now on are seen by the kernel;
    // then register what /proc shows as already connected.
    for l in &found {
        backend.track_process(l.pid)?;
        backend.track_fd(l.pid, l.listen_fd, FD_LISTEN)?;
        tracker.add_listener(l.pid, l.listen_fd as i32, l.path.clone());
    }
    // Re-scan after tracking so nothing accepted in between is missed.
    let found = discovery::find_listeners(path)?;
    let scan_done = monotonic_ns();
    for l in &found {
        for c in &l.connections {
            backend.track_fd(l.pid, c.fd, FD_CONN)?;
            let peer = peer_of(l.pid, c.fd as i32, peer_env);
            let peer_pid = peer.as_ref().map(|p| p.pid);
            if let Some(ev) = tracker.register_existing(
                l.pid,
                c.fd as i32,
                Some(l.path.clone()),
                peer,
                Some(c.inode),
                scan_done,
            ) {
                if let (CaptureEvent::Open(o), true) = (&ev, follow) {
                    to_follow.push(ToFollow {
                        conn: o.conn,
                        tgid: l.pid,
                        inode: c.inode,
                        peer_inode: None,
                        candidate: peer_pid,
                    });
                }
                out.push(ev);
            }
        }
    }
    Ok(found)
}

/// Register the connections of `tracked` processes whose peer has `var`
/// in its environment (see [`SessionConfig::existing_socketpair_env`]).
fn attach_socketpairs(
    backend: &mut dyn CaptureBackend,
    tracker: &mut ConnTracker,
    tracked: &[u32],
    var: &str,
    peer_env: &[String],
    to_follow: &mut Vec<ToFollow>,
    out: &mut Vec<CaptureEvent>,
) -> Result<Vec<EnvPeerSocket>, SessionError> {
    // Every process in `tracked` is already tracked in the kernel, so a
    // pair made from now on is seen there; one made between that and this
    // scan is both, and the tracker keeps only this registration (its Open
    // record is older than `scan_done`).
    let mut registered = Vec::new();
    match discovery::env_peer_sockets(tracked, var) {
        Ok(found) => {
            let scan_done = monotonic_ns();
            for s in found {
                // Already registered, e.g. as an accepted connection of a listener.
                if tracker.conn_of(s.pid, s.fd as i32).is_some() {
                    continue;
                }
                backend.track_fd(s.pid, s.fd, FD_CONN)?;
                if let Some(ev) = tracker.register_existing(
                    s.pid,
                    s.fd as i32,
                    None,
                    peer_process(s.peer_pid, peer_env),
                    Some(s.inode),
                    scan_done,
                ) {
                    if let CaptureEvent::Open(o) = &ev {
                        to_follow.push(ToFollow {
                            conn: o.conn,
                            tgid: s.pid,
                            inode: s.inode,
                            peer_inode: Some(s.peer_inode),
                            candidate: Some(s.peer_pid),
                        });
                    }
                    out.push(ev);
                }
                registered.push(s);
            }
        }
        // Not fatal: everything else is still captured. The usual cause
        // is a kernel without unix_diag, which the message names.
        Err(e) => {
            log::warn!("pre-existing connections to processes with {var} set are not captured: {e}")
        }
    }
    Ok(registered)
}

/// How the connections of a new listener are completed (see [`Resolver`]).
struct PeerRules<'a> {
    peer_env: &'a [String],
    follower: Option<&'a mut Follower>,
    no_follow: &'a mut HashSet<(u32, i32)>,
}

/// How often a socket whose listener exited is looked for again.
const REATTACH_SCAN_NS: u64 = 100_000_000;
/// Once one of a runtime's sockets is served again, the others are looked
/// for at every drain (for this long): the runtime is starting, and a
/// plugin that connects before its socket is traced again shows up
/// without its registration (seen in CI: containerd served nri.sock a few
/// ms after containerd.sock, and a plugin connected within the 100 ms).
const REATTACH_FAST_NS: u64 = 5_000_000_000;

/// Following a runtime across restarts: when the process listening on a
/// traced socket exits, the socket is looked for again until a process
/// listens on it, which is then traced as the first one was.
struct Reattach {
    /// Listener pid -> the traced socket paths it listens on.
    listener_paths: HashMap<u32, Vec<PathBuf>>,
    /// Paths whose listener exited and none is found yet.
    lost: Vec<PathBuf>,
    next_scan_ns: u64,
    /// Until when lost sockets are looked for at every drain.
    fast_until_ns: u64,
    existing_socketpair_env: Option<String>,
    no_follow_sockets: Vec<PathBuf>,
}

impl Reattach {
    /// Note the listeners among the exited processes of `out`, and
    /// report each path they served as gone, right after the exit (before
    /// a new listener's `Listening` in the same batch).
    fn on_exits(&mut self, out: &mut Vec<CaptureEvent>) {
        if !out
            .iter()
            .any(|ev| matches!(ev, CaptureEvent::Process(ProcessEvent::Exit { tgid, .. }) if self.listener_paths.contains_key(tgid)))
        {
            return;
        }
        for ev in std::mem::take(out) {
            let exited = match &ev {
                CaptureEvent::Process(ProcessEvent::Exit { ts, tgid }) => Some((*ts, *tgid)),
                _ => None,
            };
            out.push(ev);
            let Some((ts, tgid)) = exited else { continue };
            let Some(paths) = self.listener_paths.remove(&tgid) else {
                continue;
            };
            for path in paths {
                log::info!("listener of {} (pid {tgid}) exited", path.display());
                out.push(CaptureEvent::Process(ProcessEvent::ListenerGone {
                    ts,
                    tgid,
                    path: path.clone(),
                }));
                // Looked for again, unless another process serves it.
                let served = self.listener_paths.values().any(|ps| ps.contains(&path));
                if !served && !self.lost.contains(&path) {
                    self.lost.push(path);
                }
            }
        }
    }

    /// Note the listeners the kernel started tracking at their bind (see
    /// [`ConnTracker::take_bound`]): served again, as a scan would find;
    /// their pids.
    fn on_bound(
        &mut self,
        bound: Vec<BoundListener>,
        backend: &mut dyn CaptureBackend,
        no_follow: &mut HashSet<(u32, i32)>,
    ) -> Vec<u32> {
        let mut new_pids = Vec::new();
        for b in bound {
            log::info!("{} is bound again, by pid {}", b.path.display(), b.tgid);
            // The kernel tracks it already; this keeps the backend's own
            // view of its filter in step.
            if let Err(e) = backend.track_process(b.tgid) {
                log::warn!("tracking pid {}: {e}", b.tgid);
            }
            self.lost.retain(|p| *p != b.path);
            self.note_listener(b.tgid, b.fd, b.path, no_follow);
            new_pids.push(b.tgid);
        }
        new_pids
    }

    /// `tgid` serves `path` on `fd` from now on: remembered for its exit,
    /// and its accepts not followed when the path is not to be.
    fn note_listener(
        &mut self,
        tgid: u32,
        fd: i32,
        path: PathBuf,
        no_follow: &mut HashSet<(u32, i32)>,
    ) {
        if self.no_follow_sockets.contains(&path) {
            no_follow.insert((tgid, fd));
        }
        let paths = self.listener_paths.entry(tgid).or_default();
        if !paths.contains(&path) {
            paths.push(path);
        }
    }

    /// Trace the lost sockets' new listeners: `bound_pids` (those the
    /// kernel saw bind, see `on_bound`), and those a scan of /proc finds
    /// (at most every [`REATTACH_SCAN_NS`]; for a path bound in a way the
    /// kernel program does not match, e.g. relative to another directory).
    fn scan(
        &mut self,
        now: u64,
        bound_pids: Vec<u32>,
        backend: &mut dyn CaptureBackend,
        tracker: &mut ConnTracker,
        peers: PeerRules<'_>,
        out: &mut Vec<CaptureEvent>,
    ) {
        let PeerRules {
            peer_env: resolver_env,
            follower,
            no_follow,
        } = peers;
        let mut to_follow = Vec::new();
        let mut new_pids = bound_pids;
        if !self.lost.is_empty() && now >= self.next_scan_ns {
            let lost = std::mem::take(&mut self.lost);
            for path in lost {
                let follow = !self.no_follow_sockets.contains(&path);
                let mut opened = Vec::new();
                let found = attach_listeners(
                    backend,
                    tracker,
                    &path,
                    resolver_env,
                    follow,
                    &mut to_follow,
                    &mut opened,
                );
                match found {
                    Ok(found) if !found.is_empty() => {
                        for l in &found {
                            log::info!("{} is served again, by pid {}", path.display(), l.pid);
                            out.push(CaptureEvent::Process(ProcessEvent::Listening {
                                ts: tracker.ts(monotonic_ns()),
                                tgid: l.pid,
                                path: path.clone(),
                            }));
                            self.note_listener(l.pid, l.listen_fd as i32, path.clone(), no_follow);
                            new_pids.push(l.pid);
                        }
                        out.append(&mut opened);
                    }
                    Ok(_) => self.lost.push(path),
                    Err(e) => {
                        log::debug!("looking for a listener on {}: {e}", path.display());
                        self.lost.push(path);
                    }
                }
            }
            // Every REATTACH_SCAN_NS while the runtime is down; at every
            // drain for a while once part of it is back.
            self.next_scan_ns = if now < self.fast_until_ns || !new_pids.is_empty() {
                now
            } else {
                now + REATTACH_SCAN_NS
            };
        }
        if !new_pids.is_empty() {
            self.fast_until_ns = now + REATTACH_FAST_NS;
        }
        new_pids.sort_unstable();
        new_pids.dedup();
        if new_pids.is_empty() {
            return;
        }
        if let Some(var) = self.existing_socketpair_env.clone() {
            if let Err(e) = attach_socketpairs(
                backend,
                tracker,
                &new_pids,
                &var,
                resolver_env,
                &mut to_follow,
                out,
            ) {
                log::warn!("socketpairs of the new runtime process: {e}");
            }
        }
        if let Some(f) = follower {
            f.targets.extend(new_pids.iter().copied());
            f.follow_existing(backend, tracker, out, &to_follow);
        }
    }
}

async fn drain_loop(
    backend: Box<dyn CaptureBackend>,
    tracker: ConnTracker,
    poll: AsyncFd<Fd>,
    tx: Queue,
    stop: tokio::sync::oneshot::Receiver<()>,
    interval: Duration,
    resolver: Resolver,
) {
    let mut backend = backend;
    drain_until_stopped(&mut *backend, tracker, &poll, tx, stop, interval, resolver).await;
    // Deregister the fd from epoll before the backend closes it.
    drop(poll);
    drop(backend);
}

async fn drain_until_stopped(
    backend: &mut dyn CaptureBackend,
    mut tracker: ConnTracker,
    poll: &AsyncFd<Fd>,
    mut tx: Queue,
    mut stop: tokio::sync::oneshot::Receiver<()>,
    interval: Duration,
    mut resolver: Resolver,
) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut loss = Loss::default();
    let mut malformed = 0u64;
    let mut last_loss_check = 0u64;
    let mut ticks = TickClock::default();
    let mut out = Vec::new();
    let mut stopping = false;
    // The last drain stopped at its budget: drain again at once.
    let mut more = false;
    loop {
        tokio::select! {
            biased;
            _ = &mut stop, if !stopping => stopping = true,
            () = std::future::ready(()), if more => {}
            r = poll.readable() => {
                if let Ok(mut g) = r {
                    g.clear_ready();
                }
            }
            _ = tick.tick() => {}
        }
        let drain_start = monotonic_ns();
        more = backend.drain(DRAIN_BUDGET, &mut |bytes| match record::parse(bytes) {
            Ok(r) => tracker.on_record(&r, &mut out),
            Err(e) => {
                malformed += 1;
                log::debug!("malformed record: {e}");
            }
        });
        let peer_env = &resolver.peer_env;
        let recent = &mut resolver.recent;
        let read_at = monotonic_ns();
        let new_conns = tracker.resolve_peers(&mut out, &mut |tgid, fd| ConnFacts {
            peer: recent.complete(peer_of(tgid, fd, peer_env), read_at),
            inode: u32::try_from(fd)
                .ok()
                .and_then(|fd| discovery::fd_socket_inode(tgid, fd)),
        });
        // Fds of peer processes that are no peer end: off before anything
        // below untracks a process (which drops its fds anyway).
        for (tgid, fd) in tracker.take_ignored_fds() {
            if let Ok(fd) = u32::try_from(fd) {
                if let Err(e) = backend.track_fd(tgid, fd, 0) {
                    log::debug!("switching off fd {fd} of peer process {tgid}: {e}");
                }
            }
        }
        // A runtime that restarted: its sockets are served by a new process,
        // which the kernel may track already from its bind(); before the
        // follower looks at the batch's connections (the new listener's
        // accepts are its to follow). Listeners bound in this batch are
        // noted before its exits are looked at: a listener that binds and
        // exits within one drain (a busy machine delays the drain) is
        // reported gone like any other (CI saw its exit go unreported).
        let bound_pids = resolver.reattach.on_bound(
            tracker.take_bound(),
            &mut *backend,
            &mut resolver.no_follow,
        );
        // An exited process leaves the kernel maps at once: a new process
        // reusing its pid must not be captured through stale entries.
        for ev in &out {
            if let CaptureEvent::Process(ProcessEvent::Exit { tgid, .. }) = ev {
                if let Err(e) = backend.untrack_process(*tgid) {
                    log::warn!("untracking exited process {tgid}: {e}");
                }
            }
        }
        resolver.reattach.on_exits(&mut out);
        if let Some(f) = resolver.follower.as_mut() {
            f.targets.extend(bound_pids.iter().copied());
            let mut new_conns = new_conns;
            new_conns.retain(|n| match n.origin {
                Origin::Accept { listen_fd } => !resolver.no_follow.contains(&(n.tgid, listen_fd)),
                _ => true,
            });
            f.after_batch(
                &mut *backend,
                &mut tracker,
                &mut out,
                new_conns,
                monotonic_ns(),
            );
        }
        let now = monotonic_ns();
        if !stopping {
            resolver.reattach.scan(
                now,
                bound_pids,
                &mut *backend,
                &mut tracker,
                PeerRules {
                    peer_env: &resolver.peer_env,
                    follower: resolver.follower.as_mut(),
                    no_follow: &mut resolver.no_follow,
                },
                &mut out,
            );
        }
        if let Some(ctx) = resolver.sandbox.as_mut() {
            out.retain_mut(|ev| match ev {
                CaptureEvent::Sandbox(s) => ctx.enrich(s, now),
                // A restarted runtime: watch its tree too.
                CaptureEvent::Process(ProcessEvent::Listening { tgid, .. }) => {
                    let tree = super::sandbox::runtime_tree(&[*tgid]);
                    if let Err(e) = backend.watch_tasks(&tree) {
                        log::warn!("watching the restarted runtime's processes: {e}");
                    }
                    true
                }
                _ => true,
            });
        }
        // Syscalls whose last record never came (lost) are flushed 1 s
        // after they began, in capture time: by this drain's clock only if
        // it read the ring empty (a budget may have cut a syscall whose
        // rest is still in the ring, seconds after it when behind).
        tracker.flush_stale((!more).then_some(drain_start), 1_000_000_000, &mut out);
        drop_ignored_peers(
            &mut out,
            &mut tracker,
            &mut *backend,
            &resolver.ignore_peer_pids,
        );
        if let Some((path, ask)) = &resolver.cri_state {
            // A runtime (re)started on the CRI socket: its state anew.
            let restarted = out.iter().any(|ev| {
                matches!(ev, CaptureEvent::Process(ProcessEvent::Listening { path: p, .. }) if p == path)
            });
            if restarted {
                let _ = ask.send(Ask::Restart);
            }
        }
        // A drop stamps the kernel's `LOST_FIRST_NS`: looked at after every
        // batch with records in it (a full ring drops only while records
        // wait; one map read), the counters themselves then and every
        // 250 ms. The loss is reported in the batch that holds the first
        // records after it, and placed before them (`place_loss`).
        let due = stopping || now.saturating_sub(last_loss_check) > 250_000_000;
        let times = if due || !out.is_empty() {
            backend.take_loss_times().unwrap_or((None, 0))
        } else {
            (None, 0)
        };
        if due || times.0.is_some() {
            let read_at = last_loss_check;
            last_loss_check = now;
            if let Ok(mut l) = backend.loss() {
                l.malformed = malformed;
                if l.counts() != loss.counts() {
                    if l.lost_records > loss.lost_records {
                        // Without a first stamp (cleared unread: a race
                        // with the clear), the drops came after the last
                        // reading and before this one.
                        let (from, to) = match times {
                            (Some(f), t) => (f, t.max(f)),
                            (None, _) => (read_at, now),
                        };
                        l.lost_from = Some(tracker.ts(from));
                        l.lost_to = Some(tracker.ts(to));
                    }
                    loss = l;
                    place_loss(&mut out, l);
                }
            }
        }
        if stopping && !more {
            tracker.close_all(now, &mut out);
        } else if stopping {
            // The rest of the ring first.
        } else if let Some(at) = ticks.after_drain(
            now,
            // The sockets' own events: kernel events of the tree (execs,
            // unlinks: containerd's housekeeping goes on while its sockets
            // are quiet) do not move the decoders' clock, so they must not
            // hold the tick back.
            out.iter().any(|e| {
                matches!(
                    e,
                    CaptureEvent::Open(_) | CaptureEvent::Chunk(_) | CaptureEvent::Close(_)
                )
            }),
        ) {
            // Stamped as the capture's own events are (the wall-clock
            // offset taken at start: docs/capture.md).
            out.push(CaptureEvent::Tick { ts: tracker.ts(at) });
        }
        for ev in out.drain(..) {
            if !tx.send(ev).await {
                return;
            }
        }
        if stopping && !more {
            return;
        }
    }
}

/// Put a loss report into the batch before its first event stamped at or
/// after the loss began, so that every stage reads of the hole before the
/// records that follow it (a record kept in the ring from before the hole
/// may still come after the report: early is harmless, late is not).
fn place_loss(out: &mut Vec<CaptureEvent>, l: Loss) {
    let at = l.lost_from.map(|t| t.mono_ns);
    let pos = at
        .and_then(|from| {
            out.iter()
                .position(|e| event_ns(e).is_some_and(|t| t >= from))
        })
        .unwrap_or(out.len());
    out.insert(pos, CaptureEvent::Loss(l));
}

/// When a capture event happened, for those that say.
fn event_ns(e: &CaptureEvent) -> Option<u64> {
    match e {
        CaptureEvent::Chunk(c) => Some(c.ts.mono_ns),
        CaptureEvent::Open(o) => Some(o.ts.mono_ns),
        CaptureEvent::Close(c) => Some(c.ts.mono_ns),
        CaptureEvent::Tick { ts } => Some(ts.mono_ns),
        CaptureEvent::Process(p) => Some(p.ts().mono_ns),
        _ => None,
    }
}

/// The event channel's sender, bounded in bytes too: what the consumer has
/// not taken yet is the newest `max_capacity - capacity` events sent (a
/// FIFO), so their sizes are known without the receiver's help.
struct Queue {
    tx: mpsc::Sender<CaptureEvent>,
    limit: usize,
    /// Sizes of the events sent and maybe not taken yet, oldest first.
    sizes: VecDeque<usize>,
    bytes: usize,
}

impl Queue {
    fn new(tx: mpsc::Sender<CaptureEvent>, limit: usize) -> Self {
        Self {
            tx,
            limit,
            sizes: VecDeque::new(),
            bytes: 0,
        }
    }

    /// What `ev` holds in memory while queued.
    fn size(ev: &CaptureEvent) -> usize {
        size_of::<CaptureEvent>()
            + match ev {
                CaptureEvent::Chunk(c) => c.bytes.len(),
                _ => 0,
            }
    }

    /// Forget the events the consumer took. Events sent by others on the
    /// same channel (the CRI state) count as ours still queued: an
    /// overestimate, gone once they are taken.
    fn settle(&mut self) {
        let queued = self.tx.max_capacity() - self.tx.capacity();
        while self.sizes.len() > queued {
            self.bytes -= self.sizes.pop_front().unwrap_or(0);
        }
    }

    /// Send `ev` once it fits (an event alone always does); false when the
    /// consumer is gone. While it waits, the drain does not run: the ring
    /// fills and the kernel counts what it drops.
    async fn send(&mut self, ev: CaptureEvent) -> bool {
        let n = Self::size(&ev);
        loop {
            self.settle();
            if self.bytes == 0 || self.bytes + n <= self.limit {
                break;
            }
            if self.tx.is_closed() {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        if self.tx.send(ev).await.is_err() {
            return false;
        }
        self.sizes.push_back(n);
        self.bytes += n;
        true
    }
}

/// What the drain loop needs to complete new connections.
struct Resolver {
    peer_env: Vec<String>,
    /// Present when `SessionConfig::follow_peer_ends` is set.
    follower: Option<Follower>,
    /// (tgid, listening fd) whose accepted connections are not followed.
    no_follow: HashSet<(u32, i32)>,
    reattach: Reattach,
    /// Present when `SessionConfig::sandbox` is set.
    sandbox: Option<super::sandbox::SandboxContext>,
    /// `SessionConfig::ignore_peer_pids`.
    ignore_peer_pids: Vec<u32>,
    /// `SessionConfig::cri_state`'s socket, and how to ask the task that
    /// queries it.
    cri_state: Option<(PathBuf, mpsc::UnboundedSender<Ask>)>,
    /// Peers read lately, for those gone before they were read.
    recent: RecentPeers,
}

/// Connections in `out` whose peer is one of `pids` leave the capture:
/// their events go, the tracker forgets them, the kernel stops capturing
/// their fds. Their peer is known in the batch that opened them
/// (`ConnTracker::resolve_peers`); a connection of ours lives far longer
/// than a batch (the CRI state query keeps its connection open).
fn drop_ignored_peers(
    out: &mut Vec<CaptureEvent>,
    tracker: &mut ConnTracker,
    backend: &mut dyn CaptureBackend,
    pids: &[u32],
) {
    if pids.is_empty() {
        return;
    }
    let dropped: HashSet<ConnId> = out
        .iter()
        .filter_map(|ev| match ev {
            CaptureEvent::Open(o) if o.peer.as_ref().is_some_and(|p| pids.contains(&p.pid)) => {
                Some(o.conn)
            }
            _ => None,
        })
        .collect();
    if dropped.is_empty() {
        return;
    }
    for &conn in &dropped {
        for (tgid, fd) in tracker.forget(conn) {
            if let Ok(fd) = u32::try_from(fd) {
                if let Err(e) = backend.track_fd(tgid, fd, 0) {
                    log::debug!("switching off fd {fd} of {tgid} (our own connection): {e}");
                }
            }
        }
    }
    out.retain(|ev| {
        let conn = match ev {
            CaptureEvent::Open(o) => o.conn,
            CaptureEvent::Chunk(c) => c.conn,
            CaptureEvent::Close(c) => c.conn,
            _ => return true,
        };
        !dropped.contains(&conn)
    });
}

/// Why the CRI state is asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ask {
    Start,
    /// A new runtime process listens on the CRI socket: it may not answer
    /// CRI calls until it has loaded its state (containerd's CRI plugin
    /// answers "server is not initialized yet"), so it is asked again a
    /// few times.
    Restart,
}

/// Tries after a restart, and the pause before the n-th (n x this).
const RESTART_TRIES: u32 = 8;
const RESTART_BACKOFF: Duration = Duration::from_millis(250);

/// The CRI state task: one query per ask, its answer into the event
/// stream. It holds the stream weakly (the stream ends with the drain
/// task) and ends when the drain task drops its asker. The last query's
/// connection stays open until the next: its peer is known to the capture
/// long before it closes (see [`drop_ignored_peers`]).
async fn ask_cri_state(
    path: PathBuf,
    tx: mpsc::WeakSender<CaptureEvent>,
    mut asked: mpsc::UnboundedReceiver<Ask>,
) {
    let mut _open = None;
    while let Some(why) = asked.recv().await {
        let tries = if why == Ask::Restart {
            RESTART_TRIES
        } else {
            1
        };
        let mut failed = None;
        for n in 0..tries {
            if n > 0 {
                tokio::time::sleep(RESTART_BACKOFF * n).await;
            }
            match super::cri_state::query(&path, now_timestamp).await {
                Ok((state, channel)) => {
                    log::debug!(
                        "CRI state: {} pods, {} containers, {} bytes in {} µs",
                        state.pods.len(),
                        state.containers.len(),
                        state.bytes,
                        state.took_ns / 1000
                    );
                    _open = Some(channel);
                    failed = None;
                    let Some(tx) = tx.upgrade() else { return };
                    if tx.send(CaptureEvent::CriState(state)).await.is_err() {
                        return;
                    }
                    break;
                }
                Err(e) => failed = Some(e),
            }
        }
        if let Some(e) = failed {
            // The error and its sources, each once (tonic's transport
            // error says little without the io::Error under it).
            let mut why = String::new();
            let mut next: Option<&dyn std::error::Error> = Some(&e);
            while let Some(err) = next {
                let text = err.to_string();
                if !why.contains(&text) {
                    if !why.is_empty() {
                        why.push_str(": ");
                    }
                    why.push_str(&text);
                }
                next = err.source();
            }
            log::warn!(
                "cannot read the runtime's pods and containers over CRI ({why}): pods made \
                 before the trace are named only once a traced call names them. Give the \
                 runtime's CRI socket with --cri-socket, or --no-cri-state not to ask"
            );
        }
    }
}

/// A traced connection found at start whose peer end is to be followed.
struct ToFollow {
    conn: ConnId,
    tgid: u32,
    inode: u64,
    /// The peer socket's inode, when the discovery already knows it.
    peer_inode: Option<u64>,
    /// The process expected to hold the peer socket.
    candidate: Option<u32>,
}

/// How long a new connection whose peer socket no process holds yet (a
/// connect the server has not accepted) is looked at again.
const RETRY_NS: u64 = 200_000_000;
/// Bound on connections waiting to be followed.
const MAX_WAITING: usize = 256;
/// Children remembered per target, as candidates for socketpair ends.
const MAX_CHILDREN: usize = 32;

/// Why a traced connection's peer end is not followed yet.
#[derive(Clone, Copy, Debug)]
enum Wait {
    /// A socketpair end whose other end the target still holds (as the
    /// connection `sibling`): looked at again when that closes, i.e. when
    /// the target handed it to a child and closed its copy.
    SiblingOpen { sibling: ConnId },
    /// The peer socket was in no candidate's fds: looked at again at every
    /// batch until `until_ns`.
    Until { until_ns: u64 },
}

#[derive(Clone, Debug)]
struct Waiting {
    conn: ConnId,
    tgid: u32,
    inode: u64,
    /// The peer socket's inode, once asked for.
    peer_inode: Option<u64>,
    /// SO_PEERCRED's pid, the first process to look in.
    candidate: Option<u32>,
    wait: Wait,
}

/// Outcome of one attempt to follow a connection.
#[derive(Debug, PartialEq, Eq)]
enum Followed {
    /// Registered (or already captured, or impossible): done with it.
    Done,
    /// No candidate holds the peer socket (yet).
    NotFound,
}

/// Follows the peer's end of traced connections
/// ([`SessionConfig::follow_peer_ends`]).
///
/// Only connections of `targets` (the processes the session was asked to
/// trace) are followed; peer processes become [`ConnTracker`] peer
/// processes, whose own connections are never captured, and which are
/// untracked again once none of their followed ends is open.
struct Follower {
    targets: HashSet<u32>,
    peer_env: Vec<String>,
    /// Recent children of each target (Fork events), newest last.
    children: HashMap<u32, VecDeque<u32>>,
    waiting: Vec<Waiting>,
}

impl Follower {
    fn new(targets: &[u32], peer_env: &[String]) -> Self {
        Self {
            targets: targets.iter().copied().collect(),
            peer_env: peer_env.to_vec(),
            children: HashMap::new(),
            waiting: Vec::new(),
        }
    }

    /// The connections found at start: one sock_diag dump for all of them.
    fn follow_existing(
        &mut self,
        backend: &mut dyn CaptureBackend,
        tracker: &mut ConnTracker,
        out: &mut Vec<CaptureEvent>,
        found: &[ToFollow],
    ) {
        if found.is_empty() {
            return;
        }
        let peers = if found.iter().any(|f| f.peer_inode.is_none()) {
            match discovery::unix_peers() {
                Ok(p) => p,
                Err(e) => {
                    log::warn!("the peer ends of connections are not captured: {e}");
                    return;
                }
            }
        } else {
            HashMap::new()
        };
        for f in found {
            let Some(peer_inode) = f.peer_inode.or_else(|| peers.get(&f.inode).copied()) else {
                continue;
            };
            let candidates: Vec<u32> = f.candidate.into_iter().collect();
            let r = self.follow(
                backend,
                tracker,
                out,
                f.conn,
                f.tgid,
                peer_inode,
                &candidates,
            );
            log::debug!("following {} (pid {}): {r:?}", f.conn, f.tgid);
        }
    }

    /// Called after every drained batch (its events in `out`, exits already
    /// untracked): forget idle peer processes, then follow the new
    /// connections and retry the waiting ones.
    fn after_batch(
        &mut self,
        backend: &mut dyn CaptureBackend,
        tracker: &mut ConnTracker,
        out: &mut Vec<CaptureEvent>,
        new_conns: Vec<NewConn>,
        now_ns: u64,
    ) {
        for tgid in tracker.take_idle_peer_processes() {
            if let Err(e) = backend.untrack_process(tgid) {
                log::warn!("untracking peer process {tgid}: {e}");
            }
        }
        let mut closed = HashSet::new();
        for ev in out.iter() {
            match ev {
                CaptureEvent::Process(ProcessEvent::Fork { parent, child, .. })
                    if self.targets.contains(parent) =>
                {
                    let c = self.children.entry(*parent).or_default();
                    c.push_back(*child);
                    if c.len() > MAX_CHILDREN {
                        c.pop_front();
                    }
                }
                CaptureEvent::Process(ProcessEvent::Exit { tgid, .. }) => {
                    self.targets.remove(tgid);
                    self.children.remove(tgid);
                }
                CaptureEvent::Close(c) => {
                    closed.insert(c.conn);
                }
                _ => {}
            }
        }
        // Waiting connections whose turn it is; the others stay.
        let mut due = Vec::new();
        for w in std::mem::take(&mut self.waiting) {
            if closed.contains(&w.conn) || !tracker.is_open(w.conn) {
                continue;
            }
            match w.wait {
                Wait::SiblingOpen { sibling } if !closed.contains(&sibling) => self.waiting.push(w),
                Wait::Until { until_ns } if now_ns > until_ns => {}
                _ => due.push(w),
            }
        }
        for nc in new_conns {
            if !self.targets.contains(&nc.tgid) {
                continue;
            }
            let Some(inode) = nc.inode else { continue };
            let wait = match nc.origin {
                // The target still holds the other end: wait until it
                // lets go of it (hands it to a child and closes its copy).
                Origin::Socketpair { other_fd } => tracker
                    .conn_of(nc.tgid, other_fd)
                    .map(|sibling| Wait::SiblingOpen { sibling }),
                Origin::Accept { .. } | Origin::Connect | Origin::Existing => None,
                // A dup the tracker could not alias: nothing to follow.
                Origin::Dup { .. } => continue,
            };
            let w = Waiting {
                conn: nc.conn,
                tgid: nc.tgid,
                inode,
                peer_inode: None,
                candidate: nc.peer_pid,
                wait: wait.unwrap_or_else(|| Wait::Until {
                    until_ns: now_ns.saturating_add(RETRY_NS),
                }),
            };
            match wait {
                Some(_) => self.push_waiting(w),
                None => due.push(w),
            }
        }
        for mut w in due {
            // SO_PEERCRED's process, then the target's recent children
            // (where the other end of a socketpair goes), newest first.
            // pid 0: a process in a PID namespace we cannot see.
            let mut candidates: Vec<u32> = w.candidate.into_iter().collect();
            if let Some(c) = self.children.get(&w.tgid) {
                candidates.extend(c.iter().rev());
            }
            candidates.retain(|&p| p != 0 && p != w.tgid);
            if candidates.is_empty() {
                continue; // nowhere to look: not followed
            }
            let peer_inode = match w.peer_inode {
                Some(p) => p,
                None => match discovery::unix_peer_of(w.inode) {
                    Ok(Some(p)) => p,
                    // Closed meanwhile, or its peer is gone.
                    Ok(None) => continue,
                    Err(e) => {
                        log::debug!("peer socket of {} (inode {}): {e}", w.conn, w.inode);
                        continue;
                    }
                },
            };
            w.peer_inode = Some(peer_inode);
            let r = self.follow(
                backend,
                tracker,
                out,
                w.conn,
                w.tgid,
                peer_inode,
                &candidates,
            );
            if r == Followed::NotFound {
                let until_ns = match w.wait {
                    Wait::Until { until_ns } => until_ns,
                    // The target let go of the other end and no child
                    // holds it (yet): a short grace period.
                    Wait::SiblingOpen { .. } => now_ns.saturating_add(RETRY_NS),
                };
                self.push_waiting(Waiting {
                    wait: Wait::Until { until_ns },
                    ..w
                });
            }
        }
    }

    fn push_waiting(&mut self, w: Waiting) {
        if self.waiting.len() < MAX_WAITING {
            self.waiting.push(w);
        } else {
            log::debug!(
                "too many connections waiting: the peer end of {} is not followed",
                w.conn
            );
        }
    }

    /// Find which of `candidates` holds socket `peer_inode` (the peer of
    /// the target's connection `conn`), track it and register its end.
    #[allow(clippy::too_many_arguments)]
    fn follow(
        &mut self,
        backend: &mut dyn CaptureBackend,
        tracker: &mut ConnTracker,
        out: &mut Vec<CaptureEvent>,
        conn: ConnId,
        tgid: u32,
        peer_inode: u64,
        candidates: &[u32],
    ) -> Followed {
        let mut seen = HashSet::new();
        let holder = candidates
            .iter()
            .copied()
            // pid 0: the peer is in a PID namespace we cannot see; the
            // target itself is no peer (both ends of its own pair).
            .filter(|&p| p != 0 && p != tgid && seen.insert(p))
            .find_map(|p| {
                let fds: Vec<u32> = discovery::socket_fds_of(p)
                    .ok()?
                    .into_iter()
                    .filter(|&(_, ino)| ino == peer_inode)
                    .map(|(fd, _)| fd)
                    .collect();
                (!fds.is_empty()).then_some((p, fds))
            });
        let Some((pid, fds)) = holder else {
            return Followed::NotFound;
        };
        if fds
            .iter()
            .any(|&fd| tracker.conn_of(pid, fd as i32).is_some())
        {
            return Followed::Done; // its end is captured already
        }
        if !self.targets.contains(&pid) && !tracker.is_peer_process(pid) {
            if let Err(e) = backend.track_process(pid) {
                log::warn!("cannot track peer process {pid} of {conn}: {e}");
                return Followed::Done;
            }
            // From here on, a peer process that is no longer needed is
            // untracked at the next batch end (`take_idle_peer_processes`).
            tracker.add_peer_process(pid);
        }
        let mut tracked = Vec::new();
        for &fd in &fds {
            match backend.track_fd(pid, fd, FD_CONN) {
                Ok(()) => tracked.push(fd),
                Err(e) => log::warn!("cannot track fd {fd} of peer process {pid}: {e}"),
            }
        }
        // Tracked first, checked then: an fd closed or reused in between
        // does not hold the socket any more and is switched off again (not
        // in a traced process, where the kernel may have tracked the new
        // connection on it meanwhile); one closed after this check is seen
        // closing by the kernel.
        let mut kept = Vec::new();
        for fd in tracked {
            if discovery::fd_socket_inode(pid, fd) == Some(peer_inode) {
                kept.push(fd as i32);
            } else if !self.targets.contains(&pid) {
                if let Err(e) = backend.track_fd(pid, fd, 0) {
                    log::debug!("switching off fd {fd} of peer process {pid}: {e}");
                }
            }
        }
        let checked = monotonic_ns();
        if let Some(ev) = tracker.register_peer_end(
            pid,
            &kept,
            conn,
            Some(peer_inode),
            peer_process(tgid, &self.peer_env),
            checked,
        ) {
            out.push(ev);
        }
        Followed::Done
    }
}

#[cfg(test)]
mod tests {
    /// A peer gone before its read is the process its pid and uid showed
    /// lately, and only that.
    #[test]
    fn a_peer_gone_before_its_read_is_completed_from_its_process() {
        let read = |pid, uid, comm: Option<&str>| {
            Some(Peer {
                pid,
                uid,
                comm: comm.map(Into::into),
                cmdline: comm.map(|c| vec![c.to_string()]).unwrap_or_default(),
                env: Default::default(),
                cgroup: comm.map(|_| "/user.slice/user-0.slice/session-3.scope".into()),
            })
        };
        let s = 1_000_000_000;
        let mut r = RecentPeers::default();
        assert_eq!(r.complete(None, s), None);
        let first = r.complete(read(40, 0, Some("crictl")), s).unwrap();
        // Its second connection, read after it exited: pid and uid alone.
        assert_eq!(r.complete(read(40, 0, None), 2 * s), Some(first));
        // Another uid, another pid, too late, pid 0: left as read.
        assert_eq!(
            r.complete(read(40, 1000, None), 2 * s),
            read(40, 1000, None)
        );
        assert_eq!(r.complete(read(41, 0, None), 2 * s), read(41, 0, None));
        let late = s + RECENT_PEER_NS + 1;
        assert_eq!(r.complete(read(40, 0, None), late), read(40, 0, None));
        assert_eq!(r.complete(read(0, 0, None), 2 * s), read(0, 0, None));
        // Bounded: past the bound the stale ones go, then all.
        for pid in 100..100 + MAX_RECENT_PEERS as u32 + 5 {
            r.complete(read(pid, 0, Some("x")), 3 * s);
        }
        assert!(r.by_pid.len() <= MAX_RECENT_PEERS);
    }

    /// The event channel holds at most `queue_bytes`: a second chunk that
    /// would pass the bound waits until the consumer took the first, though
    /// the channel has room for 16 events.
    #[tokio::test]
    async fn the_queue_is_bounded_in_bytes() {
        use super::{mpsc, Duration, Queue};
        use crate::capture::{CaptureEvent, Chunk, ConnId, Direction, Syscall, Timestamp};
        let chunk = |n: usize| {
            CaptureEvent::Chunk(Chunk {
                conn: ConnId(1),
                direction: Direction::In,
                ts: Timestamp {
                    mono_ns: 0,
                    wall_ns: 0,
                },
                tid: 1,
                syscall: Syscall::Read,
                bytes: vec![0; n],
                truncated: false,
                gap_before: false,
                syscall_len: n as u64,
            })
        };
        let (tx, mut rx) = mpsc::channel(16);
        let limit = 2 * Queue::size(&chunk(600));
        let mut q = Queue::new(tx, limit);
        let sender = tokio::spawn(async move {
            for _ in 0..3 {
                assert!(q.send(chunk(1000)).await);
            }
            q.sizes.len()
        });
        // Only one 1000-byte chunk fits; the sender waits for as long as
        // nothing is taken, however long this test is scheduled away.
        while rx.is_empty() {
            tokio::task::yield_now().await;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(rx.len(), 1);
        assert!(!sender.is_finished());
        for _ in 0..3 {
            assert!(rx.recv().await.is_some());
        }
        let left = sender.await.unwrap();
        assert!(left <= 1, "{left}");
        // An event alone always goes, whatever its size.
        let (tx, mut rx) = mpsc::channel(16);
        let mut q = Queue::new(tx, 10);
        assert!(q.send(chunk(1 << 20)).await);
        assert!(rx.recv().await.is_some());
    }

    use super::*;
    use crate::capture::Timestamp;

    const MS: u64 = 1_000_000;

    /// Ticks come only on quiet sockets: one a lag after the last events
    /// (stamped after them), then every 100 ms for 5 s, then every second;
    /// none while events flow.
    #[test]
    fn ticks_follow_quiet_never_flow() {
        let mut t = TickClock::default();
        let start = 10_000 * MS;
        let at = |t: &mut TickClock, ms: u64, events: bool| t.after_drain(start + ms * MS, events);
        assert_eq!(at(&mut t, 0, true), None, "events flow");
        assert_eq!(at(&mut t, 2, false), None, "not quiet long enough");
        let first = at(&mut t, 60, false).expect("quiet past the lag");
        assert!(first >= start, "stamped after the last events: {first}");
        assert_eq!(at(&mut t, 62, false), None, "not yet the next");
        let next = at(&mut t, 165, false).expect("100 ms later");
        assert!(next > first);
        // Past 5 s of quiet: a second apart.
        let late = at(&mut t, 6_000, false).expect("still ticking");
        assert_eq!(at(&mut t, 6_500, false), None, "a second apart now");
        let idle = at(&mut t, 7_001, false).expect("a second later");
        assert!(idle > late);
        assert_eq!(at(&mut t, 7_002, true), None, "events again");
        assert_eq!(at(&mut t, 7_020, false), None);
        let after = at(&mut t, 7_060, false).expect("quiet again");
        assert!(after >= start + 7_002 * MS);
    }

    /// Records handed out as the eBPF backend's `drain` does: in order, up
    /// to the budget (each record's length plus `RECORD_COST`); empty, a
    /// backend that records nothing and accepts everything.
    #[derive(Default)]
    struct RingOf(VecDeque<Vec<u8>>);

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

    /// The drain loop 5 s behind the kernel (records stamped 5 s before
    /// it reads them, as in split-synchronize on a loaded 2-core machine:
    /// the runtime's ~490 KiB messages to a plugin queued in the ring), and
    /// a write of 30 records of 16 KiB that the drain budget cuts after its
    /// second or third: the write comes out whole, in one chunk. Before,
    /// the loop flushed it as stale between the two drains (its clock said
    /// it was 5 s old), cut at 32 or 48 KiB, and dropped its other records
    /// without counting a loss: the NRI call it carried was gone.
    #[tokio::test]
    async fn a_write_cut_by_the_drain_budget_comes_out_whole_when_the_reader_is_behind() {
        use nri_trace_common::{RecordHeader, RecordKind, Syscall, FLAG_LAST, MAX_CHUNK};
        let at = monotonic_ns() - 5_000_000_000;
        let record = |fd: i32, seq: i32, offset: usize, len: usize, total: usize, fill: u8| {
            let h = RecordHeader {
                kind: RecordKind::Data as u16,
                syscall: Syscall::Write as u16,
                flags: if offset + len == total { FLAG_LAST } else { 0 },
                ts_ns: at + u64::from(seq as u32),
                tgid: 7,
                tid: 8,
                fd,
                aux: seq,
                ret: total as i64,
                offset: offset as u32,
                len: len as u32,
            };
            record::encode(&h, &vec![fill; len])
        };
        // One-record writes on fd 5, then the big write on fd 6: the first
        // drain's budget ends after its second or third record (249 writes
        // before it with a budget of 4 MiB).
        let per_record =
            MAX_CHUNK + nri_trace_common::RECORD_HEADER_LEN + super::super::backend::RECORD_COST;
        let fillers = DRAIN_BUDGET / per_record - 2;
        let mut ring: VecDeque<Vec<u8>> = (0..fillers)
            .map(|i| record(5, i as i32, 0, MAX_CHUNK, MAX_CHUNK, 0))
            .collect();
        let total = 30 * MAX_CHUNK;
        for i in 0..30 {
            ring.push_back(record(6, 0, i * MAX_CHUNK, MAX_CHUNK, total, i as u8));
        }
        assert!((fillers + 3) * per_record >= DRAIN_BUDGET);
        assert!((fillers + 1) * per_record < DRAIN_BUDGET);

        let efd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        assert!(efd >= 0);
        // SAFETY: `efd` is this test's; it is closed only after `poll` is
        // dropped.
        let poll =
            unsafe { AsyncFd::register_with_interest(Fd(efd), tokio::io::Interest::READABLE) }
                .unwrap();
        let (tx, mut rx) = mpsc::channel(1 << 16);
        let (stop_tx, stop) = tokio::sync::oneshot::channel();
        let resolver = Resolver {
            peer_env: Vec::new(),
            follower: None,
            no_follow: HashSet::new(),
            reattach: Reattach {
                listener_paths: HashMap::new(),
                lost: Vec::new(),
                next_scan_ns: 0,
                fast_until_ns: 0,
                existing_socketpair_env: None,
                no_follow_sockets: Vec::new(),
            },
            sandbox: None,
            ignore_peer_pids: Vec::new(),
            cri_state: None,
            recent: RecentPeers::default(),
        };
        // Stopping: the loop drains until the ring is empty, then returns.
        stop_tx.send(()).unwrap();
        let mut backend = RingOf(ring);
        drain_until_stopped(
            &mut backend,
            ConnTracker::new(0),
            &poll,
            Queue::new(tx, 1 << 30),
            stop,
            Duration::from_millis(2),
            resolver,
        )
        .await;
        drop(poll);
        unsafe { libc::close(efd) };
        let mut big = Vec::new();
        while let Ok(ev) = rx.try_recv() {
            if let CaptureEvent::Chunk(c) = ev {
                if c.syscall_len == total as u64 {
                    big.push(c);
                }
            }
        }
        assert_eq!(
            big.len(),
            1,
            "the big write in pieces: {:?}",
            big.iter()
                .map(|c| (c.bytes.len(), c.truncated))
                .collect::<Vec<_>>()
        );
        let c = &big[0];
        assert_eq!(
            (c.bytes.len(), c.truncated, c.gap_before),
            (total, false, false)
        );
        assert!(c
            .bytes
            .chunks(MAX_CHUNK)
            .enumerate()
            .all(|(i, b)| b.iter().all(|&x| x == i as u8)));
    }

    fn exit(tgid: u32, ms: u64) -> CaptureEvent {
        CaptureEvent::Process(ProcessEvent::Exit {
            ts: Timestamp {
                mono_ns: ms * 1_000_000,
                wall_ns: 0,
            },
            tgid,
        })
    }

    /// The old listener exits, a new one binds and exits, all in one drain:
    /// both exits are reported as the socket's listener gone, in order.
    #[test]
    fn a_listener_bound_and_gone_in_one_batch_is_reported_gone() {
        let path = PathBuf::from("/run/x.sock");
        let mut r = Reattach {
            listener_paths: HashMap::from([(10, vec![path.clone()])]),
            lost: Vec::new(),
            next_scan_ns: 0,
            fast_until_ns: 0,
            existing_socketpair_env: None,
            no_follow_sockets: Vec::new(),
        };
        let bound = vec![BoundListener {
            tgid: 20,
            fd: 3,
            path: path.clone(),
        }];
        let mut no_follow = HashSet::new();
        assert_eq!(
            r.on_bound(bound, &mut RingOf::default(), &mut no_follow),
            vec![20]
        );
        let mut out = vec![exit(10, 1), exit(20, 2)];
        r.on_exits(&mut out);
        let gone: Vec<u32> = out
            .iter()
            .filter_map(|e| match e {
                CaptureEvent::Process(ProcessEvent::ListenerGone { tgid, path: p, .. }) => {
                    assert_eq!(p, &path);
                    Some(*tgid)
                }
                _ => None,
            })
            .collect();
        assert_eq!(gone, vec![10, 20]);
        // Nobody serves it now: it is looked for again.
        assert_eq!(r.lost, vec![path]);
    }
}
