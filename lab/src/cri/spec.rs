//! What the driver sends for a pod and its containers, as kubelet
//! describes them: [`PodSpec`] (RunPodSandbox's PodSandboxConfig, sent
//! again with CreateContainer), [`ContainerSpec`] (CreateContainer's
//! ContainerConfig) and [`MountSpec`] (a hostPath volume).

use std::{
    collections::{BTreeMap, HashMap},
    path::{Path, PathBuf},
};

use k8s_cri::v1 as cri;

use super::{
    new_uid, Result, BUSYBOX_IMAGE, LABEL_CONTAINER_NAME, LABEL_POD_NAME, LABEL_POD_NAMESPACE,
    LABEL_POD_UID,
};
use crate::truth::{ContainerRef, PodRef};

// ------------------------------------------------------------------ specs

/// A pod as kubelet describes it to RunPodSandbox.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodSpec {
    pub name: String,
    pub namespace: String,
    pub uid: String,
    /// Sandbox attempt (kubelet bumps it only when it recreates a sandbox,
    /// never for a retry after a timeout).
    pub attempt: u32,
    /// Network namespace NODE (host network) instead of POD (own netns on
    /// the lab's bridge CNI network).
    pub host_network: bool,
    /// PID namespace POD (the pause process is PID 1 and workloads are not)
    /// instead of kubelet's default CONTAINER.
    pub share_pid: bool,
    /// PID namespace NODE (`hostPID: true`): the pod sees the host's
    /// processes, as nri-trace's DaemonSet does (deploy/daemonset.yaml).
    pub host_pid: bool,
    /// A privileged sandbox (`privileged: true` on a container of the pod,
    /// which kubelet passes to RunPodSandbox too).
    pub privileged: bool,
    /// None: kubelet's choice, the pod name for own-netns pods. Must be None
    /// for host-network pods: they share the host's UTS namespace and the
    /// runtime cannot set a hostname there.
    pub hostname: Option<String>,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    /// Pod log directory (kubelet: /var/log/pods/<ns>_<name>_<uid>). None:
    /// no container logs (containerd discards the output).
    pub log_directory: Option<PathBuf>,
}

impl PodSpec {
    pub fn new(name: impl Into<String>, namespace: impl Into<String>, host_network: bool) -> Self {
        Self {
            name: name.into(),
            namespace: namespace.into(),
            uid: new_uid(),
            attempt: 0,
            host_network,
            share_pid: false,
            host_pid: false,
            privileged: false,
            hostname: None,
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
            log_directory: None,
        }
    }

    /// Sets the log directory to `<root>/<namespace>_<name>_<uid>`, as
    /// kubelet lays out /var/log/pods.
    #[must_use]
    pub fn with_log_root(mut self, root: Option<&Path>) -> Self {
        self.log_directory =
            root.map(|r| r.join(format!("{}_{}_{}", self.namespace, self.name, self.uid)));
        self
    }

    pub fn pod_ref(&self, sandbox_id: Option<&str>) -> PodRef {
        PodRef {
            name: self.name.clone(),
            namespace: self.namespace.clone(),
            uid: self.uid.clone(),
            attempt: self.attempt,
            sandbox_id: sandbox_id.map(str::to_owned),
        }
    }

    /// Errors a runtime would otherwise report late (or not at all).
    pub fn validate(&self) -> Result<(), String> {
        if self.name.is_empty() || self.namespace.is_empty() || self.uid.is_empty() {
            return Err("pod name, namespace and uid must not be empty".into());
        }
        if self.host_network && self.hostname.as_deref().is_some_and(|h| !h.is_empty()) {
            return Err(format!(
                "pod {}: a host-network pod must leave hostname unset (it shares the host's UTS namespace)",
                self.name
            ));
        }
        Ok(())
    }

    /// The hostname sent to the runtime.
    pub fn effective_hostname(&self) -> String {
        if self.host_network {
            return String::new();
        }
        match &self.hostname {
            Some(h) => h.clone(),
            // kubelet: the pod name, truncated to 63 characters.
            None => self
                .name
                .chars()
                .take(63)
                .collect::<String>()
                .trim_end_matches(['-', '.'])
                .to_owned(),
        }
    }

    pub fn namespace_options(&self) -> cri::NamespaceOption {
        cri::NamespaceOption {
            network: if self.host_network {
                cri::NamespaceMode::Node
            } else {
                cri::NamespaceMode::Pod
            } as i32,
            pid: if self.host_pid {
                cri::NamespaceMode::Node
            } else if self.share_pid {
                cri::NamespaceMode::Pod
            } else {
                cri::NamespaceMode::Container
            } as i32,
            ipc: cri::NamespaceMode::Pod as i32,
            ..Default::default()
        }
    }

    fn kube_labels(&self) -> HashMap<String, String> {
        let mut l: HashMap<String, String> = self
            .labels
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        l.insert(LABEL_POD_NAME.into(), self.name.clone());
        l.insert(LABEL_POD_NAMESPACE.into(), self.namespace.clone());
        l.insert(LABEL_POD_UID.into(), self.uid.clone());
        l
    }

    /// The PodSandboxConfig kubelet would send (and repeat in CreateContainer).
    pub fn to_config(&self) -> cri::PodSandboxConfig {
        cri::PodSandboxConfig {
            metadata: Some(cri::PodSandboxMetadata {
                name: self.name.clone(),
                uid: self.uid.clone(),
                namespace: self.namespace.clone(),
                attempt: self.attempt,
            }),
            hostname: self.effective_hostname(),
            log_directory: self
                .log_directory
                .as_ref()
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_default(),
            dns_config: None,
            port_mappings: vec![],
            labels: self.kube_labels(),
            annotations: self
                .annotations
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            linux: Some(cri::LinuxPodSandboxConfig {
                // Empty: containerd 1.7 with cgroupfs uses /k8s.io/<id>.
                cgroup_parent: String::new(),
                security_context: Some(cri::LinuxSandboxSecurityContext {
                    namespace_options: Some(self.namespace_options()),
                    privileged: self.privileged,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            windows: None,
        }
    }
}

/// A container as kubelet describes it to CreateContainer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerSpec {
    pub name: String,
    /// The restart count; unchanged when a timed-out create is retried.
    pub attempt: u32,
    pub image: String,
    /// Entrypoint override (pod spec `command`); empty: the image's.
    pub command: Vec<String>,
    /// Pod spec `args`; empty: the image's Cmd (unless command is set).
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
    pub working_dir: String,
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    /// Host directories bind-mounted into the container (CRI `Mount`s,
    /// propagation private, read-write), in order.
    pub mounts: Vec<MountSpec>,
    /// `securityContext.privileged` (needs a privileged pod).
    pub privileged: bool,
}

/// A host path mounted into a container, as kubelet passes a hostPath
/// volume: containerd bind-mounts it recursively (`rbind`), so a mount
/// that exists on the host path at StartContainer comes along.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountSpec {
    pub host_path: String,
    pub container_path: String,
}

impl MountSpec {
    /// `HOST:CONTAINER` (both absolute).
    pub fn parse(s: &str) -> std::result::Result<Self, String> {
        let (h, c) = s
            .split_once(':')
            .ok_or_else(|| format!("expected HOST:CONTAINER, got {s:?}"))?;
        if !h.starts_with('/') || !c.starts_with('/') {
            return Err(format!("both paths must be absolute in {s:?}"));
        }
        Ok(Self {
            host_path: h.into(),
            container_path: c.into(),
        })
    }

    pub fn to_cri(&self) -> cri::Mount {
        cri::Mount {
            container_path: self.container_path.clone(),
            host_path: self.host_path.clone(),
            readonly: false,
            propagation: cri::MountPropagation::PropagationPrivate as i32,
            ..Default::default()
        }
    }
}

impl ContainerSpec {
    /// busybox `sleep 3600`.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            attempt: 0,
            image: BUSYBOX_IMAGE.into(),
            command: vec!["sleep".into(), "3600".into()],
            args: vec![],
            env: vec![],
            working_dir: String::new(),
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
            mounts: vec![],
            privileged: false,
        }
    }

    /// A container whose PID 1 ignores SIGTERM: StopContainer has to wait
    /// for the grace period and SIGKILL it.
    pub fn ignoring_sigterm(name: impl Into<String>) -> Self {
        Self {
            command: vec![
                "sh".into(),
                "-c".into(),
                "trap \"\" TERM; while true; do sleep 1; done".into(),
            ],
            ..Self::new(name)
        }
    }

    pub fn container_ref(&self, id: Option<&str>) -> ContainerRef {
        ContainerRef {
            name: self.name.clone(),
            attempt: self.attempt,
            id: id.map(str::to_owned),
        }
    }

    /// kubelet's log path relative to the pod log directory; empty when the
    /// pod has none.
    pub fn log_path(&self, pod: &PodSpec) -> String {
        if pod.log_directory.is_some() {
            format!("{}/{}.log", self.name, self.attempt)
        } else {
            String::new()
        }
    }

    pub fn to_config(&self, pod: &PodSpec) -> cri::ContainerConfig {
        let mut labels = pod.kube_labels();
        labels.extend(self.labels.iter().map(|(k, v)| (k.clone(), v.clone())));
        labels.insert(LABEL_CONTAINER_NAME.into(), self.name.clone());
        let mut annotations: HashMap<String, String> = self
            .annotations
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        annotations.insert(
            "io.kubernetes.container.restartCount".into(),
            self.attempt.to_string(),
        );
        cri::ContainerConfig {
            metadata: Some(cri::ContainerMetadata {
                name: self.name.clone(),
                attempt: self.attempt,
            }),
            image: Some(cri::ImageSpec {
                image: self.image.clone(),
                ..Default::default()
            }),
            command: self.command.clone(),
            args: self.args.clone(),
            working_dir: self.working_dir.clone(),
            envs: self
                .env
                .iter()
                .map(|(k, v)| cri::KeyValue {
                    key: k.clone(),
                    value: v.clone(),
                })
                .collect(),
            labels,
            annotations,
            mounts: self.mounts.iter().map(MountSpec::to_cri).collect(),
            log_path: self.log_path(pod),
            linux: Some(cri::LinuxContainerConfig {
                resources: None,
                security_context: Some(cri::LinuxContainerSecurityContext {
                    namespace_options: Some(pod.namespace_options()),
                    privileged: self.privileged,
                    ..Default::default()
                }),
            }),
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns_mode(m: i32) -> cri::NamespaceMode {
        cri::NamespaceMode::try_from(m).unwrap()
    }

    #[test]
    fn host_network_pod_config() {
        let mut p = PodSpec::new("web-0", "lab", true);
        p.labels.insert("app".into(), "web".into());
        p.annotations.insert("a".into(), "b".into());
        let c = p.to_config();
        let m = c.metadata.as_ref().unwrap();
        assert_eq!(
            (
                m.name.as_str(),
                m.namespace.as_str(),
                m.uid.as_str(),
                m.attempt
            ),
            ("web-0", "lab", p.uid.as_str(), 0)
        );
        assert_eq!(c.hostname, "", "host-network pods leave hostname unset");
        assert_eq!(c.log_directory, "");
        let no = c
            .linux
            .as_ref()
            .unwrap()
            .security_context
            .as_ref()
            .unwrap()
            .namespace_options
            .as_ref()
            .unwrap();
        assert_eq!(ns_mode(no.network), cri::NamespaceMode::Node);
        assert_eq!(ns_mode(no.pid), cri::NamespaceMode::Container);
        assert_eq!(ns_mode(no.ipc), cri::NamespaceMode::Pod);
        assert_eq!(c.labels[LABEL_POD_UID], p.uid);
        assert_eq!(c.labels[LABEL_POD_NAME], "web-0");
        assert_eq!(c.labels[LABEL_POD_NAMESPACE], "lab");
        assert_eq!(c.labels["app"], "web");
        assert_eq!(c.annotations["a"], "b");
        assert!(p.validate().is_ok());
        p.hostname = Some("x".into());
        assert!(p.validate().unwrap_err().contains("hostname"));
        assert_eq!(p.to_config().hostname, "", "never sent for host network");
    }

    #[test]
    fn own_netns_pod_config() {
        let mut p = PodSpec::new("db-1", "lab", false).with_log_root(Some(Path::new("/tmp/logs")));
        p.share_pid = true;
        p.attempt = 3;
        let c = p.to_config();
        assert_eq!(c.hostname, "db-1");
        assert_eq!(c.log_directory, format!("/tmp/logs/lab_db-1_{}", p.uid));
        let no = c
            .linux
            .unwrap()
            .security_context
            .unwrap()
            .namespace_options
            .unwrap();
        assert_eq!(ns_mode(no.network), cri::NamespaceMode::Pod);
        assert_eq!(ns_mode(no.pid), cri::NamespaceMode::Pod);
        assert_eq!(c.metadata.unwrap().attempt, 3);
        assert_eq!(p.pod_ref(Some("abc")).sandbox_id.as_deref(), Some("abc"));
        let long = PodSpec::new("a".repeat(70), "lab", false);
        assert_eq!(long.effective_hostname().len(), 63);
    }

    #[test]
    fn container_config() {
        let p = PodSpec::new("p", "lab", true);
        let mut c = ContainerSpec::new("main");
        c.env.push(("K".into(), "V".into()));
        c.attempt = 2;
        let cfg = c.to_config(&p);
        assert_eq!(cfg.metadata.as_ref().unwrap().name, "main");
        assert_eq!(cfg.metadata.as_ref().unwrap().attempt, 2);
        assert_eq!(cfg.image.as_ref().unwrap().image, BUSYBOX_IMAGE);
        assert_eq!(cfg.command, ["sleep", "3600"]);
        assert!(cfg.args.is_empty());
        assert_eq!(
            cfg.envs,
            [cri::KeyValue {
                key: "K".into(),
                value: "V".into()
            }]
        );
        assert_eq!(cfg.log_path, "", "no pod log directory: no log path");
        assert_eq!(cfg.labels[LABEL_CONTAINER_NAME], "main");
        assert_eq!(cfg.labels[LABEL_POD_UID], p.uid);
        let no = cfg
            .linux
            .unwrap()
            .security_context
            .unwrap()
            .namespace_options
            .unwrap();
        assert_eq!(ns_mode(no.network), cri::NamespaceMode::Node);
        let p2 = PodSpec::new("p", "lab", false).with_log_root(Some(Path::new("/l")));
        assert_eq!(c.to_config(&p2).log_path, "main/2.log");
        assert!(cfg.mounts.is_empty());
        let mut m = ContainerSpec::new("m");
        m.mounts
            .push(MountSpec::parse("/var/lib/x/fuse:/hang").unwrap());
        let mounts = m.to_config(&p).mounts;
        assert_eq!(mounts.len(), 1);
        assert_eq!(mounts[0].host_path, "/var/lib/x/fuse");
        assert_eq!(mounts[0].container_path, "/hang");
        assert_eq!(
            mounts[0].propagation,
            cri::MountPropagation::PropagationPrivate as i32
        );
        assert!(!mounts[0].readonly);
        assert!(MountSpec::parse("/a").is_err());
        assert!(MountSpec::parse("a:/b").is_err());
        let ig = ContainerSpec::ignoring_sigterm("x");
        assert_eq!(ig.command[0], "sh");
        assert!(ig.command[2].contains("trap \"\" TERM"));
    }
}
