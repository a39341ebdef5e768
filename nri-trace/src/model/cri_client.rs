//! Who makes a CRI call: the process at the client end of its connection
//! (kubelet, crictl, a test driver), as the capture found it when it first
//! saw the connection ([`Peer`]: SO_PEERCRED's pid, then /proc), with the
//! systemd unit its cgroup path names.
//!
//! A connection has one client for its life: gRPC clients dial once and
//! keep the connection (kubelet's for as long as it runs; crictl one per
//! invocation, `k8s.io/cri-client` `RemoteRuntimeServiceBuilder.Build`),
//! so the client read at the connection's first sight is every call's.
//! What the capture could not read (a process that exited before it was
//! looked at, one in a PID namespace nri-trace cannot see: pid 0) stays
//! unknown; nothing is guessed.

use serde::{Deserialize, Serialize};

use crate::capture::Peer;

/// The client of a CRI connection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CriClient {
    /// Its pid in nri-trace's PID namespace (0: not visible there).
    pub pid: u32,
    /// Its comm (`/proc/PID/comm`, at most 15 bytes, set by the process
    /// itself), when read.
    pub comm: Option<String>,
    /// Its cgroup path (`capture::discovery::process_cgroup`), when read.
    pub cgroup: Option<String>,
    /// The systemd unit that path names ([`unit_of_cgroup`]), if any.
    pub unit: Option<String>,
}

impl CriClient {
    /// The client a connection's peer is.
    pub fn of_peer(p: &Peer) -> Self {
        CriClient {
            pid: p.pid,
            comm: p.comm.clone(),
            cgroup: p.cgroup.clone(),
            unit: p
                .cgroup
                .as_deref()
                .and_then(unit_of_cgroup)
                .map(str::to_owned),
        }
    }

    /// `comm[pid]` (`pid N` without a comm): how the outputs name it, the
    /// same label `cri_connection`'s `client` has always had.
    pub fn label(&self) -> String {
        match &self.comm {
            Some(c) => format!("{c}[{}]", self.pid),
            None => format!("pid {}", self.pid),
        }
    }

    /// The comm of a [`CriClient::label`] (`kubelet` of `kubelet[812]`);
    /// `None` for a label without one (`pid N`). Record files older than
    /// the client process carry only the label.
    pub(crate) fn comm_of_label(label: &str) -> Option<&str> {
        label.rsplit_once('[').map(|(comm, _)| comm)
    }

    /// Whether `--client NAME` names it: its comm, its unit, or its unit
    /// without the `.service` / `.scope` suffix (`kubelet` for
    /// `kubelet.service`).
    pub fn is_named(&self, name: &str) -> bool {
        self.comm.as_deref() == Some(name)
            || self.unit.as_deref().is_some_and(|u| {
                u == name
                    || UNIT_SUFFIXES
                        .iter()
                        .any(|s| u.strip_suffix(s) == Some(name))
            })
    }
}

/// The unit types a process can be in: systemd places processes only in
/// services and scopes (systemd.service(5), systemd.scope(5)); slices
/// hold units, not processes (systemd.slice(5)).
const UNIT_SUFFIXES: [&str; 2] = [".service", ".scope"];

/// The systemd unit a cgroup path names: its innermost component that is a
/// service or a scope (`/system.slice/kubelet.service` -> `kubelet.service`;
/// `/user.slice/user-0.slice/session-3.scope` -> `session-3.scope`; a
/// process of a user's manager, `/user.slice/user-0.slice/user@0.service/
/// init.scope` -> `init.scope`; a container's `cri-containerd-<id>.scope`
/// too). Only what the path says: systemd names a unit's cgroup after the
/// unit, escaped (systemd.unit(5), "String Escaping"), and nri-trace does
/// not ask systemd. `None` for a path with no such component (cgroupfs
/// drivers, the root).
pub(crate) fn unit_of_cgroup(cgroup: &str) -> Option<&str> {
    cgroup.rsplit('/').find(|c| {
        UNIT_SUFFIXES
            .iter()
            .any(|s| c.len() > s.len() && c.ends_with(s))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_are_what_the_path_names() {
        assert_eq!(
            unit_of_cgroup("/system.slice/kubelet.service"),
            Some("kubelet.service")
        );
        assert_eq!(
            unit_of_cgroup("/user.slice/user-0.slice/session-3.scope"),
            Some("session-3.scope")
        );
        assert_eq!(
            unit_of_cgroup("/user.slice/user-0.slice/user@0.service/init.scope"),
            Some("init.scope")
        );
        assert_eq!(
            unit_of_cgroup("/user.slice/user-0.slice/user@0.service"),
            Some("user@0.service")
        );
        // A delegated subtree below a unit (containerd's own cgroups under
        // its service): the unit it is in.
        assert_eq!(
            unit_of_cgroup("/system.slice/containerd.service/sub"),
            Some("containerd.service")
        );
        // Seen from another cgroup namespace.
        assert_eq!(
            unit_of_cgroup("/../../system.slice/kubelet.service"),
            Some("kubelet.service")
        );
        assert_eq!(unit_of_cgroup("/"), None);
        assert_eq!(unit_of_cgroup("/kubepods/besteffort/pod1/abc"), None);
        assert_eq!(unit_of_cgroup("/machine.slice"), None);
        assert_eq!(unit_of_cgroup("/x/.service"), None);
    }

    fn peer(comm: Option<&str>, cgroup: Option<&str>) -> Peer {
        Peer {
            pid: 42,
            uid: 0,
            comm: comm.map(Into::into),
            cmdline: vec![],
            env: Default::default(),
            cgroup: cgroup.map(Into::into),
        }
    }

    #[test]
    fn a_client_is_named_by_comm_or_unit() {
        let kubelet = CriClient::of_peer(&peer(
            Some("kubelet"),
            Some("/system.slice/kubelet.service"),
        ));
        assert_eq!(kubelet.unit.as_deref(), Some("kubelet.service"));
        assert_eq!(kubelet.label(), "kubelet[42]");
        for name in ["kubelet", "kubelet.service"] {
            assert!(kubelet.is_named(name), "{name}");
        }
        assert!(!kubelet.is_named("kube"));
        assert!(!kubelet.is_named("crictl"));
        let sre = CriClient::of_peer(&peer(
            Some("crictl"),
            Some("/user.slice/user-0.slice/session-3.scope"),
        ));
        for name in ["crictl", "session-3", "session-3.scope"] {
            assert!(sre.is_named(name), "{name}");
        }
        assert!(!sre.is_named("kubelet"));
        // Nothing read: only a label by pid, and no name matches.
        let gone = CriClient::of_peer(&peer(None, None));
        assert_eq!(gone.label(), "pid 42");
        assert_eq!(gone.unit, None);
        assert!(!gone.is_named(""));
        assert!(!gone.is_named("42"));
    }
}
