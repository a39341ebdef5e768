//! What a live run traces: the runtime found on this node (or the sockets
//! given), and the capture session that follows its CRI and NRI sockets.

use std::{path::PathBuf, time::Duration};

use crate::{
    capture::{
        discovery::DiscoveryError,
        runtimes::{self, Runtime, RuntimeKind},
        session::SessionConfig,
    },
    model::nri_call::{ENV_PLUGIN_IDX, ENV_PLUGIN_NAME},
    store::record_file::SessionInfo,
};

/// Why there is nothing to trace; each message names the fix.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    #[error("looking for the container runtime: {0}")]
    Discovery(#[from] DiscoveryError),
    #[error(
        "no containerd or CRI-O process found: is the runtime running? Give its sockets with \
         --cri-socket and --nri-socket (docs/runtimes.md)"
    )]
    NoRuntime,
    #[error("{} runtimes found ({}): choose one with --cri-socket and --nri-socket", .0.len(), list(.0))]
    Several(Vec<Runtime>),
    #[error(
        "{} (pid {}) serves no CRI socket nri-trace recognizes ({:?}): give --cri-socket",
        runtime_name(.0.kind), .0.pid, .0.listening
    )]
    NoCriSocket(Runtime),
    #[error(
        "{} (pid {}) serves no NRI socket: is NRI enabled? ({}; docs/runtimes.md), or give \
         --nri-socket",
        runtime_name(.0.kind), .0.pid, enable_nri_hint(.0.kind)
    )]
    NoNriSocket(Runtime),
    #[error(
        "{what} socket {} not found: {hint} (docs/runtimes.md)",
        path.display()
    )]
    SocketMissing {
        what: &'static str,
        path: PathBuf,
        hint: &'static str,
    },
}

fn list(rs: &[Runtime]) -> String {
    rs.iter()
        .map(|r| format!("{} pid {} {:?}", runtime_name(r.kind), r.pid, r.cri_socket))
        .collect::<Vec<_>>()
        .join("; ")
}

/// The runtime's own setting that turns NRI on.
fn enable_nri_hint(kind: RuntimeKind) -> &'static str {
    match kind {
        RuntimeKind::Containerd => {
            "containerd 1.7: [plugins.\"io.containerd.nri.v1.nri\"] disable = false"
        }
        // CRI-O's config (pkg/config, [crio.nri]); on by default since 1.30.
        RuntimeKind::CriO => "CRI-O: [crio.nri] enable_nri = true",
    }
}

/// "containerd" or "cri-o", as record files name them.
pub fn runtime_name(kind: RuntimeKind) -> &'static str {
    match kind {
        RuntimeKind::Containerd => "containerd",
        RuntimeKind::CriO => "cri-o",
    }
}

/// The runtime a live run follows.
#[derive(Debug, Clone)]
pub struct Target {
    pub cri: PathBuf,
    pub nri: PathBuf,
    /// The runtime process, when found.
    pub runtime: Option<(RuntimeKind, u32)>,
}

impl Target {
    /// The sockets given, or those of the one runtime running here.
    pub fn find(cri: Option<PathBuf>, nri: Option<PathBuf>) -> Result<Target, TargetError> {
        if let (Some(cri), Some(nri)) = (&cri, &nri) {
            return Ok(Target {
                cri: cri.clone(),
                nri: nri.clone(),
                runtime: None,
            });
        }
        let found = runtimes::find_runtimes()?;
        let runtime = match found.as_slice() {
            [one] => one.clone(),
            [] => return Err(TargetError::NoRuntime),
            _ => return Err(TargetError::Several(found)),
        };
        let Some(cri) = cri.or_else(|| runtime.cri_socket.clone()) else {
            return Err(TargetError::NoCriSocket(runtime));
        };
        let Some(nri) = nri.or_else(|| runtime.nri_socket.clone()) else {
            return Err(TargetError::NoNriSocket(runtime));
        };
        Ok(Target {
            cri,
            nri,
            runtime: Some((runtime.kind, runtime.pid)),
        })
    }

    /// What the record file's (and `-o json`'s) session line says.
    pub fn session_info(&self, redacted: bool) -> SessionInfo {
        SessionInfo {
            tool: crate::TOOL.into(),
            runtime: self.runtime.map(|(k, _)| runtime_name(k).into()),
            runtime_pid: self.runtime.map(|(_, pid)| pid),
            cri_socket: self.cri.display().to_string(),
            nri_socket: self.nri.display().to_string(),
            started_unix_ns: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64),
            redacted,
        }
    }
}

/// How the capture runs (the probe options that change what is seen).
#[derive(Debug, Clone, Copy)]
pub struct Follow {
    /// Drain the ring buffer at least this often.
    pub drain: Duration,
    /// Capture the plugins' end of their connections too (their own hook
    /// time apart from the runtime's pickup delay; docs/nri.md).
    pub plugin_ends: bool,
    /// Watch the runtime's process tree (signals, exits, unmounts...;
    /// docs/explain.md).
    pub sandbox: bool,
    /// Ask the runtime for its pods and containers over its CRI socket, at
    /// start and after a restart, to name the pods made before the trace
    /// (capture/cri_state.rs; `--no-cri-state` turns it off).
    pub cri_state: bool,
    /// A socket nothing serves yet is waited for, and traced from its
    /// bind, instead of an error (`--no-wait` turns it off; docs/trace.md,
    /// "Started before the runtime").
    pub wait: bool,
}

/// The session that follows an NRI socket: external plugins' connections,
/// the pre-launched plugins' socketpairs, and their ends.
pub fn nri_session(
    socket: &std::path::Path,
    pids: Vec<u32>,
    follow: Follow,
) -> Result<SessionConfig, TargetError> {
    let listening = follow.wait || std::fs::metadata(socket).is_ok();
    if !listening && pids.is_empty() {
        return Err(TargetError::SocketMissing {
            what: "NRI",
            path: socket.to_path_buf(),
            hint: "is NRI enabled in the runtime? (containerd 1.7: \
                   [plugins.\"io.containerd.nri.v1.nri\"] disable = false; CRI-O: [crio.nri] \
                   enable_nri = true), or give the socket",
        });
    }
    Ok(SessionConfig {
        sockets: if listening {
            vec![socket.to_path_buf()]
        } else {
            vec![]
        },
        pids,
        drain_interval: follow.drain,
        // Pre-launched plugins: their socketpair with the runtime, and
        // their name and index (nri pkg/adaptation plugin.go).
        peer_env: vec![ENV_PLUGIN_NAME.into(), ENV_PLUGIN_IDX.into()],
        existing_socketpair_env: Some("NRI_PLUGIN_SOCKET".into()),
        follow_peer_ends: follow.plugin_ends,
        sandbox: follow.sandbox,
        wait_for_listeners: follow.wait,
        ..Default::default()
    })
}

/// The session that follows a CRI socket (kubelet's end is not followed:
/// it would cost kubelet and add nothing).
pub fn cri_session(socket: &std::path::Path, follow: Follow) -> Result<SessionConfig, TargetError> {
    if !follow.wait && std::fs::metadata(socket).is_err() {
        return Err(TargetError::SocketMissing {
            what: "CRI",
            path: socket.to_path_buf(),
            hint: "give the runtime's CRI socket (containerd: /run/containerd/containerd.sock, \
                   CRI-O: /var/run/crio/crio.sock)",
        });
    }
    Ok(SessionConfig {
        sockets: vec![socket.to_path_buf()],
        drain_interval: follow.drain,
        no_follow_sockets: vec![socket.to_path_buf()],
        sandbox: follow.sandbox,
        wait_for_listeners: follow.wait,
        ..Default::default()
    })
}

/// The session `watch` runs: both sockets of the runtime, and, unless
/// `--no-cri-state`, the runtime's state asked over its CRI socket (the
/// connection that asks is nri-trace's own: not traced).
pub fn runtime_session(target: &Target, follow: Follow) -> Result<SessionConfig, TargetError> {
    let cri = cri_session(&target.cri, follow)?;
    let mut cfg = nri_session(&target.nri, vec![], follow)?;
    cfg.sockets.extend(cri.sockets);
    cfg.no_follow_sockets = cri.no_follow_sockets;
    if follow.cri_state {
        cfg.cri_state = Some(target.cri.clone());
        cfg.ignore_peer_pids = vec![std::process::id()];
    }
    Ok(cfg)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The error names the setting of the runtime that was found.
    #[test]
    fn no_nri_socket_names_the_runtimes_own_setting() {
        let crio = runtimes::runtime_from(9, RuntimeKind::CriO, &["/run/crio/crio.sock".into()]);
        let msg = TargetError::NoNriSocket(crio).to_string();
        assert!(
            msg.starts_with("cri-o (pid 9) serves no NRI socket"),
            "{msg}"
        );
        assert!(msg.contains("[crio.nri] enable_nri = true"), "{msg}");
        let ctrd = runtimes::runtime_from(
            7,
            RuntimeKind::Containerd,
            &["/run/containerd/containerd.sock".into()],
        );
        let msg = TargetError::NoNriSocket(ctrd).to_string();
        assert!(msg.contains("io.containerd.nri.v1.nri"), "{msg}");
        assert!(!msg.contains("crio"), "{msg}");
    }
}
