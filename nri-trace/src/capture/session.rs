//! A capture session: sets up tracking from /proc, then drains the backend
//! on a timer (and on the backend's wakeups) into a bounded channel of
//! [`CaptureEvent`]s.
//!
//! Back-pressure is deliberate: a slow consumer makes the drain task wait,
//! the ring buffer fills, and the kernel drops and *counts* records. The
//! traced runtime is never slowed down by nri-trace's consumer.

use std::{
    os::fd::{AsRawFd, RawFd},
    path::PathBuf,
    time::Duration,
};

use nri_trace_common::{FD_CONN, FD_LISTEN};
use thiserror::Error;
use tokio::{io::unix::AsyncFd, sync::mpsc, task::JoinHandle};

use super::{
    backend::{BackendError, CaptureBackend},
    discovery::{self, DiscoveryError, Listener},
    record,
    tracker::ConnTracker,
    CaptureEvent, Loss, Peer, ProcessEvent,
};

#[derive(Debug, Error)]
pub enum SessionError {
    #[error(transparent)]
    Discovery(#[from] DiscoveryError),
    #[error(transparent)]
    Backend(#[from] BackendError),
    #[error("nothing to capture: give at least one --socket or --pid")]
    NoTarget,
    #[error("cannot watch the ring buffer descriptor: {0}")]
    Poll(std::io::Error),
}

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
}

impl Default for SessionConfig {
    fn default() -> Self {
        Self {
            sockets: vec![],
            pids: vec![],
            connect_paths: vec![],
            drain_interval: Duration::from_millis(2),
            channel: 65536,
        }
    }
}

/// What the session found when it started.
#[derive(Clone, Debug)]
pub struct SessionInfo {
    pub listeners: Vec<Listener>,
    pub tracked_pids: Vec<u32>,
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

/// CLOCK_MONOTONIC now, the clock of bpf_ktime_get_ns().
pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Who is at the other end of (tgid, fd), as far as /proc can tell.
pub fn peer_of(tgid: u32, fd: i32) -> Option<Peer> {
    let cred = discovery::peer_cred(tgid, u32::try_from(fd).ok()?)?;
    let info = discovery::process_info(cred.pid);
    Some(Peer {
        pid: cred.pid,
        uid: cred.uid,
        comm: info.as_ref().map(|i| i.comm.clone()),
        cmdline: info.map(|i| i.cmdline).unwrap_or_default(),
    })
}

struct Fd(RawFd);
impl AsRawFd for Fd {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

/// Start capturing. Must be called inside a tokio runtime.
pub async fn start(
    cfg: SessionConfig,
    mut backend: Box<dyn CaptureBackend>,
) -> Result<Session, SessionError> {
    if cfg.sockets.is_empty() && cfg.pids.is_empty() {
        return Err(SessionError::NoTarget);
    }
    let wall_offset = clock_ns(libc::CLOCK_REALTIME) as i128 - monotonic_ns() as i128;
    let mut tracker = ConnTracker::new(wall_offset);
    let mut initial = Vec::new();
    let mut listeners = Vec::new();
    let mut tracked = Vec::new();

    for p in &cfg.connect_paths {
        backend.track_connect_path(p)?;
        tracker.add_connect_path(p.clone());
    }
    for &pid in &cfg.pids {
        backend.track_process(pid)?;
        tracked.push(pid);
    }
    for path in &cfg.sockets {
        let found = discovery::find_listeners(path)?;
        // Listening fds first, so accepts from now on are seen by the kernel;
        // then register what /proc shows as already connected.
        for l in &found {
            backend.track_process(l.pid)?;
            backend.track_fd(l.pid, l.listen_fd, FD_LISTEN)?;
            tracker.add_listener(l.pid, l.listen_fd as i32, l.path.clone());
            tracked.push(l.pid);
        }
        // Re-scan after tracking so nothing accepted in between is missed.
        let found = discovery::find_listeners(path)?;
        let scan_done = monotonic_ns();
        for l in &found {
            for c in &l.connections {
                backend.track_fd(l.pid, c.fd, FD_CONN)?;
                if let Some(ev) = tracker.register_existing(
                    l.pid,
                    c.fd as i32,
                    Some(l.path.clone()),
                    peer_of(l.pid, c.fd as i32),
                    scan_done,
                ) {
                    initial.push(ev);
                }
            }
        }
        listeners.extend(found);
    }
    tracked.sort();
    tracked.dedup();

    let (tx, rx) = mpsc::channel(cfg.channel.max(16));
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
    // SAFETY: the ring buffer fd is owned by `backend`, which drain_loop
    // keeps alive (and does not close) until after it drops `poll`.
    let poll = unsafe {
        AsyncFd::register_with_interest(Fd(backend.poll_fd()), tokio::io::Interest::READABLE)
    }
    .map_err(|e| SessionError::Poll(e.into()))?;
    let interval = cfg.drain_interval;
    let task = tokio::spawn(async move {
        for ev in initial {
            if tx.send(ev).await.is_err() {
                return;
            }
        }
        drain_loop(backend, tracker, poll, tx, stop_rx, interval).await;
    });
    Ok(Session {
        info: SessionInfo {
            listeners,
            tracked_pids: tracked,
        },
        events: rx,
        stop: Some(stop_tx),
        task: Some(task),
    })
}

async fn drain_loop(
    backend: Box<dyn CaptureBackend>,
    tracker: ConnTracker,
    poll: AsyncFd<Fd>,
    tx: mpsc::Sender<CaptureEvent>,
    stop: tokio::sync::oneshot::Receiver<()>,
    interval: Duration,
) {
    let mut backend = backend;
    drain_until_stopped(&mut *backend, tracker, &poll, tx, stop, interval).await;
    // Deregister the fd from epoll before the backend closes it.
    drop(poll);
    drop(backend);
}

async fn drain_until_stopped(
    backend: &mut dyn CaptureBackend,
    mut tracker: ConnTracker,
    poll: &AsyncFd<Fd>,
    tx: mpsc::Sender<CaptureEvent>,
    mut stop: tokio::sync::oneshot::Receiver<()>,
    interval: Duration,
) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut loss = Loss::default();
    let mut malformed = 0u64;
    let mut last_loss_check = 0u64;
    let mut out = Vec::new();
    let mut stopping = false;
    loop {
        tokio::select! {
            _ = &mut stop, if !stopping => stopping = true,
            r = poll.readable() => {
                if let Ok(mut g) = r {
                    g.clear_ready();
                }
            }
            _ = tick.tick() => {}
        }
        backend.drain(&mut |bytes| match record::parse(bytes) {
            Ok(r) => tracker.on_record(&r, &mut out),
            Err(e) => {
                malformed += 1;
                log::debug!("malformed record: {e}");
            }
        });
        tracker.resolve_peers(&mut out, &mut peer_of);
        // An exited process leaves the kernel maps at once: a new process
        // reusing its pid must not be captured through stale entries.
        for ev in &out {
            if let CaptureEvent::Process(ProcessEvent::Exit { tgid, .. }) = ev {
                if let Err(e) = backend.untrack_process(*tgid) {
                    log::warn!("untracking exited process {tgid}: {e}");
                }
            }
        }
        let now = monotonic_ns();
        // Syscalls whose last record never came (lost) are flushed after 1 s.
        tracker.flush_stale(now, 1_000_000_000, &mut out);
        if stopping || now.saturating_sub(last_loss_check) > 250_000_000 {
            last_loss_check = now;
            if let Ok(mut l) = backend.loss() {
                l.malformed = malformed;
                if l != loss {
                    loss = l;
                    out.push(CaptureEvent::Loss(l));
                }
            }
        }
        if stopping {
            tracker.close_all(now, &mut out);
        }
        for ev in out.drain(..) {
            if tx.send(ev).await.is_err() {
                return;
            }
        }
        if stopping {
            return;
        }
    }
}
