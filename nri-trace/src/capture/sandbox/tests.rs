use super::*;

#[test]
fn an_object_cgroup_is_named_by_its_id() {
    let id = "a0b79316cb2c5c3e1535116a362c55b5525f813cdc006b3bfef8bb1ba41cee27";
    assert!(names_an_object(&format!("/k8s.io/{id}")));
    assert!(names_an_object(&format!(
        "/kubepods.slice/kubepods-pod1.slice/cri-containerd-{id}.scope"
    )));
    assert!(names_an_object(&format!("/kubepods/pod1/crio-{id}.scope")));
    assert!(!names_an_object("/system.slice/containerd.service"));
    assert!(!names_an_object(&format!("/k8s.io/{id}/sub")));
    assert!(!names_an_object(&format!("/k8s.io/{id}0")));
    assert!(!names_an_object(&format!(
        "/kubepods/pod1/crio-conmon-{id}"
    )));
}
use nri_trace_common::{EntryHeader, EntryKind, SandboxRecord};
use std::mem::offset_of;

#[test]
fn pod_uids_in_kubelet_paths_and_cgroups() {
    let uid = "0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b";
    let volume = format!("/var/lib/kubelet/pods/{uid}/volumes/kubernetes.io~empty-dir/data");
    assert_eq!(pod_uids_in(&volume).collect::<Vec<_>>(), [uid]);
    let systemd = format!(
        "/sys/fs/cgroup/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{}.slice",
        uid.replace('-', "_")
    );
    assert_eq!(pod_uids_in(&systemd).collect::<Vec<_>>(), [uid]);
    let cgroupfs = format!("/sys/fs/cgroup/kubepods/besteffort/pod{uid}");
    assert_eq!(pod_uids_in(&cgroupfs).collect::<Vec<_>>(), [uid]);
    // A runtime id is not a uid; neither is a longer hex run.
    assert_eq!(pod_uids_in(&"a".repeat(64)).count(), 0);
    assert_eq!(pod_uids_in(&format!("{uid}0")).count(), 0);
    assert_eq!(pod_uids_in("").count(), 0);
    assert_eq!(pod_uids_in("/pods/short").count(), 0);
}

#[test]
fn offsets_match_repr_c() {
    assert_eq!(offset_of!(SandboxRecord, cgroup_id), 0);
    assert_eq!(offset_of!(SandboxRecord, arg), 8);
    assert_eq!(offset_of!(SandboxRecord, target), 16);
    assert_eq!(offset_of!(SandboxRecord, aux), 20);
    assert_eq!(offset_of!(SandboxRecord, comm), 24);
    assert_eq!(offset_of!(SandboxRecord, flags), 40);
    assert_eq!(offset_of!(SandboxRecord, path), 48);
    assert_eq!(offset_of!(SandboxRecord, path2), 48 + SANDBOX_PATH_LEN);
}

fn payload(arg: u64, target: u32, flags: u32, path: &[u8], path2: &[u8]) -> Vec<u8> {
    let mut p = vec![0u8; SANDBOX_RECORD_LEN];
    p[0..8].copy_from_slice(&77u64.to_ne_bytes());
    p[8..16].copy_from_slice(&arg.to_ne_bytes());
    p[16..20].copy_from_slice(&target.to_ne_bytes());
    p[24..30].copy_from_slice(b"runc\0\0");
    p[40..44].copy_from_slice(&flags.to_ne_bytes());
    p[48..48 + path.len()].copy_from_slice(path);
    let o = 48 + SANDBOX_PATH_LEN;
    p[o..o + path2.len()].copy_from_slice(path2);
    p
}

fn parse(sc: Syscall, ret: i64, p: &[u8]) -> Option<SandboxEvent> {
    let h = EntryHeader {
        kind: EntryKind::Sandbox as u16,
        syscall: sc as u16,
        flags: 0,
        ts_ns: 5,
        tgid: 10,
        tid: 11,
        fd: -1,
        aux: 0,
        ret,
        offset: 0,
        len: p.len() as u32,
    };
    let bytes = super::super::ring_entry::encode(&h, p);
    let r = super::super::ring_entry::parse(&bytes).unwrap();
    from_record(
        &r,
        Timestamp {
            mono_ns: 5,
            wall_ns: 6,
        },
    )
}

#[test]
fn records_parse_into_events() {
    let e = parse(
        Syscall::Umount2,
        -16,
        &payload(2, 0, 0, b"/run/x/rootfs\0", b""),
    )
    .unwrap();
    assert_eq!(
        e.op,
        SandboxOp::Umount {
            path: "/run/x/rootfs".into(),
            flags: 2,
            errno: 16
        }
    );
    assert_eq!((e.tgid, e.comm.as_str(), e.cgroup_id), (10, "runc", 77));
    let e = parse(Syscall::Signal, 0, &payload(9, 42, 0, b"", b"")).unwrap();
    assert!(matches!(
        e.op,
        SandboxOp::Signal {
            sig: 9,
            target: 42,
            result: 0,
            ..
        }
    ));
    let e = parse(Syscall::Exit, 0, &payload(9, 42, 0, b"", b"")).unwrap();
    assert_eq!(e.op, SandboxOp::Exit { status: Some(9) });
    let e = parse(Syscall::Exit, 0, &payload(0, 42, SANDBOX_NO_CODE, b"", b"")).unwrap();
    assert_eq!(e.op, SandboxOp::Exit { status: None });
    let e = parse(Syscall::Unlinkat, 0, &payload(0x200, 0, 0, b"/a\0", b"")).unwrap();
    assert!(matches!(
        e.op,
        SandboxOp::Unlink {
            dir: true,
            errno: 0,
            ..
        }
    ));
    let e = parse(
        Syscall::Mount,
        0,
        &payload(
            4096,
            0,
            SANDBOX_PATH2_CUT,
            b"/run/netns/cni-1\0",
            b"/proc/1/ns/net\0",
        ),
    )
    .unwrap();
    assert!(e.truncated);
    assert!(matches!(&e.op, SandboxOp::NsBind { source, .. } if source == "/proc/1/ns/net"));
}

/// A netns bound under a symlinked directory: the bind names the path
/// as given, the runtime unmounts and removes the resolved one
/// (containerd's `unmountNS`), which the bind's event carries.
#[test]
fn a_netns_bind_under_a_symlink_carries_its_resolved_path() {
    let dir = std::env::temp_dir().join(format!("nri-trace-ns-bind-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("real/netns")).unwrap();
    std::os::unix::fs::symlink(dir.join("real"), dir.join("link")).unwrap();
    std::fs::write(dir.join("real/netns/cni-1"), b"").unwrap();
    // `dir` itself may sit under a symlink (a node's /tmp): compare
    // with what the kernel would resolve it to.
    let real = std::fs::canonicalize(&dir).unwrap();
    let p = |rel: &str| format!("{}/{rel}", dir.display());
    let want = |rel: &str| Some(format!("{}/{rel}", real.display()));
    assert_eq!(
        resolved_path(&p("link/netns/cni-1")),
        want("real/netns/cni-1")
    );
    // Gone already (read late): its directory resolved, its name kept.
    assert_eq!(
        resolved_path(&p("link/netns/cni-2")),
        want("real/netns/cni-2")
    );
    assert_eq!(resolved_path("/nonexistent-dir-nri-trace/x"), None);
    if real == dir {
        assert_eq!(resolved_path(&p("real/netns/cni-1")), None);
    }
    let mut ev = parse(
        Syscall::Mount,
        0,
        &payload(
            4096,
            0,
            0,
            format!("{}\0", p("link/netns/cni-1")).as_bytes(),
            b"/proc/1/task/1/ns/net\0",
        ),
    )
    .unwrap();
    assert!(SandboxContext::default().enrich(&mut ev, 5));
    assert!(
        matches!(&ev.op, SandboxOp::NsBind { resolved, .. } if *resolved == want("real/netns/cni-1")),
        "{ev:?}"
    );
    let j = serde_json::to_string(&ev).unwrap();
    assert_eq!(serde_json::from_str::<SandboxEvent>(&j).unwrap(), ev);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_records_are_refused() {
    let p = payload(0, 0, 0, b"/x\0", b"");
    assert!(parse(Syscall::Write, 0, &p).is_none());
    assert!(parse(Syscall::Umount2, 0, &p[..SANDBOX_RECORD_LEN - 1]).is_none());
    // A path without NUL (cut by the kernel) still parses.
    let full = vec![b'a'; SANDBOX_PATH_LEN];
    let e = parse(Syscall::Rmdir, -39, &payload(0, 0, 0, &full, b"")).unwrap();
    assert!(
        matches!(&e.op, SandboxOp::Unlink { path, errno: 39, .. } if path.len() == SANDBOX_PATH_LEN)
    );
}

#[test]
fn ids_in_paths() {
    let cid = "c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1c1";
    let p = format!("/kubepods.slice/cri-containerd-{cid}.scope/x{cid}y");
    assert_eq!(ids_in(&p).count(), 2);
    assert_eq!(ids_in(&cid[1..]).count(), 0);
    assert_eq!(ids_in(&format!("{cid}0")).count(), 0);
    assert_eq!(ids_in(&cid.to_uppercase()).count(), 0);
    assert_eq!(ids_in("").count(), 0);
}

#[test]
fn failures_that_hold_a_pod() {
    let um = |errno| SandboxOp::Umount {
        path: "/r".into(),
        flags: 0,
        errno,
    };
    let rm = |path: &str, errno| SandboxOp::Unlink {
        path: path.into(),
        dir: true,
        errno,
    };
    assert_eq!(um(libc::EBUSY).failure(), Some(("/r", libc::EBUSY)));
    for ok in [0, libc::EINVAL, libc::ENOENT] {
        assert_eq!(um(ok).failure(), None);
    }
    assert_eq!(rm("/d", libc::ENOTEMPTY).failure(), None);
    assert_eq!(rm("/d", libc::EISDIR).failure(), None);
    assert!(rm("/sys/fs/cgroup/x", libc::ENOTEMPTY).failure().is_some());
    assert!(rm("/d", libc::EBUSY).failure().is_some());
    assert_eq!(rm("/d", 0).path_result(), Some(("/d", 0)));
}

#[test]
fn cgroup_paths_on_v1_and_v2_nodes() {
    use procfs::FromRead;
    // /proc/PID/cgroup text, parsed by procfs as proc_cgroup has it parsed.
    let pick = |text: &str| {
        procfs::ProcessCGroups::from_read(text.as_bytes())
            .ok()
            .and_then(|g| cgroup_of(&g.0))
    };
    assert_eq!(pick("0::/k8s.io/abc\n").as_deref(), Some("/k8s.io/abc"));
    let hybrid = "9:name=systemd:/\n4:memory:/k8s.io/abc\n0::/\n";
    assert_eq!(pick(hybrid).as_deref(), Some("/k8s.io/abc"));
    assert_eq!(pick("1:cpu:/\n0::/\n").as_deref(), Some("/"));
    // A path holding ':' is kept whole.
    assert_eq!(pick("0::/a:b\n").as_deref(), Some("/a:b"));
    assert_eq!(pick("garbage"), None);
    assert_eq!(pick(""), None);
    // Our own: whatever the node, a path that starts at a root.
    let me = proc_cgroup(std::process::id()).expect("own cgroup");
    assert!(me.starts_with('/'), "{me}");
    assert_eq!(proc_cgroup(u32::MAX), None);
}

#[test]
fn events_round_trip_as_json() {
    let e = parse(Syscall::Signal, 0, &payload(15, 42, 0, b"", b"")).unwrap();
    let j = serde_json::to_string(&e).unwrap();
    assert!(j.contains(r#""op":"signal""#), "{j}");
    assert_eq!(serde_json::from_str::<SandboxEvent>(&j).unwrap(), e);
}

#[test]
fn runtime_tree_holds_roots_and_their_children() {
    let me = std::process::id();
    let tree = runtime_tree(&[me]);
    assert!(tree.contains(&me));
    let mut child = std::process::Command::new("sleep")
        .arg("5")
        .spawn()
        .unwrap();
    let tree = runtime_tree(&[me]);
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        tree.contains(&child.id()),
        "child {} not in {tree:?}",
        child.id()
    );
}
