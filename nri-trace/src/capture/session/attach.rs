//! Registering the connections /proc shows when a socket's listeners are
//! tracked (at start, or once a restarted runtime serves it again), and
//! the socketpairs whose peer has a given environment variable.

use std::path::Path;

use nri_trace_common::{FD_CONN, FD_LISTEN};

use super::{
    clock::monotonic_ns,
    follower::ToFollow,
    peers::{peer_of, peer_process},
    SessionError,
};
use crate::capture::{
    backend::CaptureBackend,
    discovery::{self, EnvPeerSocket, Listener},
    tracker::ConnTracker,
    CaptureEvent,
};

/// Track the processes listening on `path` and register the connections
/// they hold (to be followed if `follow`); the listeners.
pub(super) fn attach_listeners(
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
pub(super) fn attach_socketpairs(
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
