//! A kubelet-like CRI client for the lab's private containerd.
//!
//! [`Driver`] talks `runtime.v1.RuntimeService` (and, for ImageStatus,
//! ListImages and ImageFsInfo, `runtime.v1.ImageService`, on the same
//! connection) over the CRI unix socket with the `k8s-cri` crate's tonic
//! client, the way kubelet does:
//!
//! - every call has a deadline: the runtime request timeout (kubelet's
//!   `--runtime-request-timeout`, 2 min by default), twice that for
//!   RunPodSandbox, and timeout + grace period for StopContainer. The
//!   deadline travels to the runtime in the `grpc-timeout` header (as
//!   grpc-go sends it) and is enforced on the client as well;
//! - a RunPodSandbox or CreateContainer whose deadline expired is retried
//!   with the SAME request (same name, same attempt: kubelet does not bump
//!   the attempt for a timeout) with backoff, until it succeeds or the
//!   [`RetryPolicy`] budget runs out. Errors that follow a timeout (the
//!   runtime answering "failed to reserve sandbox name ...") are retried
//!   as well; an error on a first try is not;
//! - a sandbox that an earlier, timed-out try did create (the runtime
//!   then answers "name ... is reserved for <id>" forever) is adopted once
//!   ListPodSandbox shows it READY with the same name and attempt, as
//!   kubelet adopts the sandboxes its relist finds for a pod uid.
//!
//! Every call writes exactly one [`Truth::Cri`] record when it ends (one
//! per try for retried calls), with CLOCK_MONOTONIC start/end, the wall
//! clock start, the deadline, the outcome and the retry number.
//!
//! Its parts: what kubelet sends for a pod and its containers
//! ([`PodSpec`], [`ContainerSpec`], [`MountSpec`]: cri/spec.rs); when a
//! timed-out call is tried again and how a failed call's outcome reads
//! ([`RetryPolicy`], [`RetryLoop`], [`classify`]: cri/retry.rs); how a
//! call fails ([`DriverError`]: cri/error.rs); what the driver keeps of
//! its calls ([`CallRecord`], [`Summary`]: cri/stats.rs); the [`Driver`]
//! itself, its connection and how it makes and records one call
//! (cri/driver.rs), with its calls under cri/driver/ (node-level, the
//! sandbox, the containers). This file holds the lab's images, the labels
//! kubelet sets, the lab's CRI socket and pod uids.
//!
//! [`Truth::Cri`]: crate::truth::Truth::Cri

use std::{io::Read, path::PathBuf, time::Duration};

use crate::truth;

mod driver;
mod error;
mod retry;
mod spec;
mod stats;

pub use driver::{short, Driver};
pub use error::{DriverError, Result};
pub use retry::{classify, describe, reserved_for, RetryLoop, RetryPolicy};
pub use spec::{ContainerSpec, MountSpec, PodSpec};
pub use stats::{CallRecord, MethodStats, Summary};

pub use k8s_cri::v1 as api;

/// The lab's sandbox image (`sandbox_image` in its containerd config).
pub const PAUSE_IMAGE: &str = "localhost/nri-trace/pause:lab";
/// The lab's workload image.
pub const BUSYBOX_IMAGE: &str = "localhost/nri-trace/busybox:lab";
/// kubelet's default `--runtime-request-timeout`.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_mins(2);
/// The lab directory when `NRI_TRACE_LAB_DIR` is not set.
pub const DEFAULT_LAB_DIR: &str = "/var/lib/nri-trace-lab";

/// Labels kubelet puts on every sandbox and container.
pub const LABEL_POD_NAME: &str = "io.kubernetes.pod.name";
pub const LABEL_POD_NAMESPACE: &str = "io.kubernetes.pod.namespace";
pub const LABEL_POD_UID: &str = "io.kubernetes.pod.uid";
pub const LABEL_CONTAINER_NAME: &str = "io.kubernetes.container.name";

/// The lab's CRI socket: `$NRI_TRACE_LAB_DIR/run/crio.sock` when the lab
/// runs CRI-O (`$LAB/runtime`, written at `up`) or is asked to
/// (`NRI_TRACE_LAB_RUNTIME=crio`) and none runs, else
/// `run/containerd.sock`.
pub fn default_socket() -> PathBuf {
    let lab = std::env::var_os("NRI_TRACE_LAB_DIR")
        .filter(|v| !v.is_empty())
        .map_or_else(|| PathBuf::from(DEFAULT_LAB_DIR), PathBuf::from);
    let running = std::fs::read_to_string(lab.join("runtime")).ok();
    let wanted = std::env::var(crate::labctl::Runtime::ENV).ok();
    lab.join("run")
        .join(socket_name(running.as_deref(), wanted.as_deref()))
}

/// The CRI socket's name for the runtime that runs, else the one asked for.
fn socket_name(running: Option<&str>, wanted: Option<&str>) -> &'static str {
    let name = running.map(str::trim).filter(|r| !r.is_empty()).or(wanted);
    let runtime = name
        .and_then(|n| crate::labctl::Runtime::parse(n).ok())
        .unwrap_or(crate::labctl::Runtime::Containerd23);
    runtime.cri_socket_name()
}

/// A random RFC 4122 version 4 UUID, as the API server gives pods.
pub fn new_uid() -> String {
    let mut b = [0u8; 16];
    let filled = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut b));
    if filled.is_err() {
        // Unique enough for a lab pod: time and pid.
        let t = truth::wall_ns() ^ truth::mono_ns().rotate_left(17);
        b[..8].copy_from_slice(&t.to_le_bytes());
        b[8..12].copy_from_slice(&std::process::id().to_le_bytes());
    }
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().fold(String::new(), |mut h, x| {
        use std::fmt::Write as _;
        let _ = write!(h, "{x:02x}");
        h
    });
    dashed_uuid(&h)
}

/// 32 hex digits in the 8-4-4-4-12 form of a pod uid (RFC 4122's text
/// form, as kubelet's pod uids are written).
pub fn dashed_uuid(h: &str) -> String {
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uids_are_v4_and_distinct() {
        let a = new_uid();
        let b = new_uid();
        assert_ne!(a, b);
        assert_eq!(a.len(), 36);
        assert_eq!(&a[14..15], "4");
        assert!(matches!(&a[19..20], "8" | "9" | "a" | "b"));
    }

    #[test]
    fn socket_name_follows_the_runtime() {
        assert_eq!(socket_name(None, None), "containerd.sock");
        assert_eq!(socket_name(None, Some("crio")), "crio.sock");
        assert_eq!(socket_name(Some("crio\n"), None), "crio.sock");
        // The one that runs wins over the one asked for.
        assert_eq!(
            socket_name(Some("containerd-2.1"), Some("crio")),
            "containerd.sock"
        );
        assert_eq!(
            socket_name(Some("crio"), Some("containerd-1.7")),
            "crio.sock"
        );
    }

    #[test]
    fn default_socket_follows_lab_dir() {
        // Only reads the variable; other tests do not set it.
        let s = default_socket();
        assert!(s.ends_with("run/containerd.sock") || s.ends_with("run/crio.sock"));
    }
}
