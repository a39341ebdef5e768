//! The pods a cluster test makes through the API: the lab's busybox image
//! (imported by lab.sh, never pulled), one container running a shell
//! script.

/// The namespace of the test's pods.
const NAMESPACE: &str = "default";
/// The lab's busybox image, imported into the runtime by lab.sh.
const IMAGE: &str = "localhost/nri-trace/busybox:lab";

pub(crate) struct TestPod {
    pub(crate) namespace: String,
    pub(crate) name: String,
    script: String,
    grace_secs: u32,
    finalizer: Option<String>,
    /// Volumes and where the container mounts them.
    volumes: Vec<(serde_json::Value, String)>,
}

impl TestPod {
    pub(crate) fn new(name: &str, script: &str) -> Self {
        TestPod {
            namespace: NAMESPACE.into(),
            name: name.into(),
            script: script.into(),
            grace_secs: 30,
            finalizer: None,
            volumes: Vec::new(),
        }
    }

    /// terminationGracePeriodSeconds.
    pub(crate) fn grace(mut self, secs: u32) -> Self {
        self.grace_secs = secs;
        self
    }

    pub(crate) fn finalizer(mut self, f: &str) -> Self {
        self.finalizer = Some(f.into());
        self
    }

    /// An emptyDir of medium Memory: a tmpfs kubelet mounts under the
    /// pod's directory, at /NAME in the container.
    pub(crate) fn memory_volume(mut self, name: &str) -> Self {
        self.volumes.push((
            serde_json::json!({"name": name, "emptyDir": {"medium": "Memory"}}),
            format!("/{name}"),
        ));
        self
    }

    /// A hostPath directory at `at` in the container.
    pub(crate) fn host_path(mut self, name: &str, path: &std::path::Path, at: &str) -> Self {
        self.volumes.push((
            serde_json::json!({"name": name, "hostPath": {"path": path, "type": "Directory"}}),
            at.into(),
        ));
        self
    }

    /// The manifest, for `kubectl apply -f -`. JSON is YAML: serde_json
    /// quotes the script.
    pub(crate) fn yaml(&self) -> String {
        let mut meta = serde_json::json!({"name": self.name, "namespace": self.namespace});
        if let Some(f) = &self.finalizer {
            meta["finalizers"] = serde_json::json!([f]);
        }
        let mounts: Vec<serde_json::Value> = self
            .volumes
            .iter()
            .map(|(v, at)| serde_json::json!({"name": v["name"], "mountPath": at}))
            .collect();
        let volumes: Vec<&serde_json::Value> = self.volumes.iter().map(|(v, _)| v).collect();
        serde_json::json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": meta,
            "spec": {
                "terminationGracePeriodSeconds": self.grace_secs,
                "volumes": volumes,
                "containers": [{
                    "name": "main",
                    "image": IMAGE,
                    "imagePullPolicy": "Never",
                    "command": ["sh", "-c", self.script],
                    "volumeMounts": mounts,
                }],
            },
        })
        .to_string()
    }
}
