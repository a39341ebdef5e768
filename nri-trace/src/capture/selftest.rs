//! The capture self-test (`doctor`): this process, tracked by the loaded
//! programs, moves known bytes over a socketpair with every probed data
//! syscall and makes the sandbox probes fire, then reads the ring back and
//! compares. It is the proof that capture works on this kernel, beyond the
//! verifier accepting the programs (docs/kernels.md).

use std::{collections::BTreeMap, ffi::c_void, io, os::fd::AsRawFd, os::unix::net::UnixStream};

use nri_trace_common::{EntryKind, Syscall};
use thiserror::Error;

use super::{
    backend::{BackendError, CaptureBackend},
    ring_entry,
    sandbox::{self, SandboxOp},
    session,
    write_targets::{OpenTarget, WriteTarget, DRAIN_EVERY},
};

#[derive(Debug, Error)]
pub(crate) enum SelfTestError {
    #[error(transparent)]
    Backend(#[from] BackendError),
    #[error("{what}: {source}")]
    Io {
        what: &'static str,
        #[source]
        source: io::Error,
    },
}

fn io_err(what: &'static str) -> impl FnOnce(io::Error) -> SelfTestError {
    move |source| SelfTestError::Io { what, source }
}

/// What the capture self-test saw.
#[derive(Debug, Default)]
pub(crate) struct CaptureResult {
    /// Bytes written, and as captured on the writing fd.
    pub sent: Vec<u8>,
    pub captured_out: Vec<u8>,
    /// Bytes read, and as captured on the reading fd.
    pub received: Vec<u8>,
    pub captured_in: Vec<u8>,
    /// Data syscalls that carried captured bytes.
    pub syscalls: Vec<Syscall>,
    /// Data records flagged truncated or read-faulted.
    pub truncated: usize,
    /// Whether the socketpair's two fds were reported opened.
    pub opened: usize,
}

impl CaptureResult {
    /// Byte-exact in both directions, through every data syscall.
    pub(crate) fn exact(&self) -> bool {
        self.captured_out == self.sent
            && self.captured_in == self.received
            && self.truncated == 0
            && self.opened == 2
            && DATA_SYSCALLS.iter().all(|s| self.syscalls.contains(s))
    }

    /// The first difference, in words.
    pub(crate) fn problem(&self) -> String {
        let mut p = Vec::new();
        if self.opened != 2 {
            p.push(format!(
                "{} of the socketpair's 2 fds reported",
                self.opened
            ));
        }
        for (what, got, want) in [
            ("written", &self.captured_out, &self.sent),
            ("read", &self.captured_in, &self.received),
        ] {
            if got != want {
                let at = got
                    .iter()
                    .zip(want.iter())
                    .position(|(a, b)| a != b)
                    .unwrap_or_else(|| got.len().min(want.len()));
                p.push(format!(
                    "bytes {what}: captured {} of {}, first difference at byte {at}",
                    got.len(),
                    want.len()
                ));
            }
        }
        let missing: Vec<String> = DATA_SYSCALLS
            .iter()
            .filter(|s| !self.syscalls.contains(s))
            .map(|s| format!("{s:?}").to_lowercase())
            .collect();
        if !missing.is_empty() {
            p.push(format!("no bytes from {}", missing.join(", ")));
        }
        if self.truncated > 0 {
            p.push(format!("{} records truncated or faulted", self.truncated));
        }
        p.join("; ")
    }
}

/// The data syscalls the exchange uses, each probed by its own program.
pub(crate) const DATA_SYSCALLS: [Syscall; 8] = [
    Syscall::Write,
    Syscall::Writev,
    Syscall::Sendto,
    Syscall::Sendmsg,
    Syscall::Read,
    Syscall::Readv,
    Syscall::Recvfrom,
    Syscall::Recvmsg,
];

/// Known bytes: position-dependent, so a lost, repeated or reordered chunk
/// shows as a difference.
fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(31).wrapping_add(u32::from(seed)) as u8 ^ (i >> 8) as u8)
        .collect()
}

fn check(r: isize, what: &'static str) -> Result<usize, SelfTestError> {
    if r < 0 {
        return Err(io_err(what)(io::Error::last_os_error()));
    }
    Ok(r as usize)
}

fn iovec(b: &[u8]) -> libc::iovec {
    libc::iovec {
        iov_base: b.as_ptr() as *mut c_void,
        iov_len: b.len(),
    }
}

fn iovec_mut(b: &mut [u8]) -> libc::iovec {
    libc::iovec {
        iov_base: b.as_mut_ptr().cast::<c_void>(),
        iov_len: b.len(),
    }
}

/// Write `bufs` on `fd` with `sc` (one syscall) and return the bytes sent.
fn send(fd: i32, sc: Syscall, bufs: &[&[u8]]) -> Result<Vec<u8>, SelfTestError> {
    let iov: Vec<libc::iovec> = bufs.iter().map(|b| iovec(b)).collect();
    let flat: Vec<u8> = bufs.concat();
    let n = unsafe {
        match sc {
            Syscall::Write => libc::write(fd, flat.as_ptr().cast(), flat.len()),
            Syscall::Sendto => {
                libc::sendto(fd, flat.as_ptr().cast(), flat.len(), 0, std::ptr::null(), 0)
            }
            Syscall::Writev => libc::writev(fd, iov.as_ptr(), iov.len() as i32),
            _ => {
                let mut m: libc::msghdr = std::mem::zeroed();
                m.msg_iov = iov.as_ptr().cast_mut();
                m.msg_iovlen = iov.len();
                libc::sendmsg(fd, &raw const m, 0)
            }
        }
    };
    let n = check(n, "writing the socketpair")?;
    Ok(flat[..n].to_vec())
}

/// Read up to `sizes` (split over iovecs for readv/recvmsg) on `fd` with
/// `sc` (one syscall) and return the bytes read.
fn recv(fd: i32, sc: Syscall, sizes: &[usize]) -> Result<Vec<u8>, SelfTestError> {
    let mut bufs: Vec<Vec<u8>> = sizes.iter().map(|&n| vec![0u8; n]).collect();
    let total: usize = sizes.iter().sum();
    let mut flat = vec![0u8; total];
    let iov: Vec<libc::iovec> = bufs.iter_mut().map(|b| iovec_mut(b)).collect();
    let n = unsafe {
        match sc {
            Syscall::Read => libc::read(fd, flat.as_mut_ptr().cast(), total),
            Syscall::Recvfrom => libc::recvfrom(
                fd,
                flat.as_mut_ptr().cast(),
                total,
                0,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            ),
            Syscall::Readv => libc::readv(fd, iov.as_ptr(), iov.len() as i32),
            _ => {
                let mut m: libc::msghdr = std::mem::zeroed();
                m.msg_iov = iov.as_ptr().cast_mut();
                m.msg_iovlen = iov.len();
                libc::recvmsg(fd, &raw mut m, 0)
            }
        }
    };
    let n = check(n, "reading the socketpair")?;
    if matches!(sc, Syscall::Readv | Syscall::Recvmsg) {
        flat = bufs.concat();
    }
    flat.truncate(n);
    Ok(flat)
}

/// Run the exchange with `backend` loaded: track this process, make a
/// socketpair (the kernel tracks both ends at its exit), move known bytes
/// with each data syscall, and collect what the ring says.
pub(crate) fn capture(backend: &mut dyn CaptureBackend) -> Result<CaptureResult, SelfTestError> {
    let tgid = std::process::id();
    backend.track_process(tgid)?;
    let result = exchange(backend, tgid);
    let _ = backend.untrack_process(tgid);
    result
}

/// One step of the exchange: a write syscall and the buffers it sends, the
/// read syscall and the buffer sizes it reads into.
type Step = (Syscall, Vec<Vec<u8>>, Syscall, Vec<usize>);

fn exchange(backend: &mut dyn CaptureBackend, tgid: u32) -> Result<CaptureResult, SelfTestError> {
    let (a, b) = UnixStream::pair().map_err(io_err("socketpair"))?;
    let (wfd, rfd) = (a.as_raw_fd(), b.as_raw_fd());
    let mut r = CaptureResult::default();
    // Sizes that take each path of the programs: one small buffer (the
    // direct copy), a buffer over one chunk (16 KiB: the bpf_loop, or the
    // bounded loop where bpf_loop is missing), and vectors of several
    // segments (iovecs fetched one by one). Each write is read back at
    // once, so the socket buffer never fills.
    let steps: [Step; 4] = [
        (
            Syscall::Write,
            vec![pattern(300, 1)],
            Syscall::Read,
            vec![4096],
        ),
        (
            Syscall::Writev,
            vec![pattern(10, 2), pattern(5000, 3), pattern(40_000, 4)],
            Syscall::Readv,
            vec![7, 20_000, 30_000],
        ),
        (
            Syscall::Sendto,
            vec![pattern(20_000, 5)],
            Syscall::Recvfrom,
            vec![65_536],
        ),
        (
            Syscall::Sendmsg,
            vec![pattern(1, 6), pattern(2000, 7), pattern(3, 8)],
            Syscall::Recvmsg,
            vec![1000, 1004, 65_536],
        ),
    ];
    for (out_sc, bufs, in_sc, sizes) in &steps {
        let slices: Vec<&[u8]> = bufs.iter().map(Vec::as_slice).collect();
        let sent = send(wfd, *out_sc, &slices)?;
        let mut got = Vec::new();
        // One read of the first syscall kind, then plain reads for any rest
        // (a stream socket may return less than was written).
        got.extend(recv(rfd, *in_sc, sizes)?);
        while got.len() < sent.len() {
            got.extend(recv(rfd, Syscall::Read, &[65_536])?);
        }
        r.sent.extend_from_slice(&sent);
        r.received.extend_from_slice(&got);
    }
    // (seq, offset) -> payload per fd: the programs number each fd's
    // syscalls per direction (`aux`) and each chunk's offset within one.
    let mut out: BTreeMap<(i32, u32), Vec<u8>> = BTreeMap::new();
    let mut inn: BTreeMap<(i32, u32), Vec<u8>> = BTreeMap::new();
    // Everything there is: the self-test's own few records.
    backend.drain(usize::MAX, &mut |bytes| {
        let Ok(rec) = ring_entry::parse(bytes) else {
            return;
        };
        if rec.tgid != tgid {
            return;
        }
        match rec.kind {
            EntryKind::Open if rec.fd == wfd || rec.fd == rfd => r.opened += 1,
            EntryKind::Data if rec.fd == wfd || rec.fd == rfd => {
                if rec.truncated() {
                    r.truncated += 1;
                }
                if !r.syscalls.contains(&rec.syscall) && !rec.payload.is_empty() {
                    r.syscalls.push(rec.syscall);
                }
                let map = if rec.fd == wfd { &mut out } else { &mut inn };
                map.insert((rec.aux, rec.offset), rec.payload.to_vec());
            }
            _ => {}
        }
    });
    r.captured_out = out.into_values().flatten().collect();
    r.captured_in = inn.into_values().flatten().collect();
    Ok(r)
}

/// What the sandbox self-test saw of its own rmdirs, and of the child it
/// signalled and reaped.
#[derive(Debug, Default)]
pub(crate) struct SandboxResult {
    /// The failed rmdir of a file (`not_a_directory`): path and errno
    /// (ENOTDIR).
    pub rmdir: Option<(String, i32)>,
    /// The rmdir of a path that does not exist (ENOENT, a directory walk's
    /// probing): sent only with `--kernel all`, else counted in the kernel
    /// (`kernel_filtered` grew); seen or counted, not both.
    pub absent_sent: bool,
    pub absent_counted: bool,
    /// The SIGTERM sent to the child.
    pub signal: bool,
    /// The child's exit, with its wait status.
    #[allow(
        clippy::option_option,
        reason = "None: no exit seen; Some(None): seen, its status unknown (SandboxOp::Exit)"
    )]
    pub exit: Option<Option<i32>>,
}

impl SandboxResult {
    pub(crate) fn complete(&self) -> bool {
        self.rmdir
            .as_ref()
            .is_some_and(|(_, e)| *e == libc::ENOTDIR)
            && self.absent_sent != self.absent_counted
            && self.signal
            && self.exit == Some(Some(libc::SIGTERM))
    }
}

/// A file whose rmdir fails with ENOTDIR (and changes nothing): /dev/null,
/// or where a root has no /dev (doctor in an empty root holding only the
/// binary and the host's /proc, /sys and /run; tests/tests/dist.rs) the
/// binary itself. Without either the rmdir would end in ENOENT, which the
/// filtered probes count instead of sending (`removal_errno_is_benign`).
fn not_a_directory() -> String {
    let is_file = |p: &std::path::Path| std::fs::symlink_metadata(p).is_ok_and(|m| !m.is_dir());
    if is_file(std::path::Path::new("/dev/null")) {
        return "/dev/null".to_owned();
    }
    std::env::current_exe()
        .ok()
        .filter(|p| is_file(p))
        .map_or_else(
            || "/dev/null".to_owned(),
            |p| p.to_string_lossy().into_owned(),
        )
}

/// The sandbox probes on this process: an rmdir of a file (a failure the
/// probes send) and of an absolute path that does not exist (one they
/// count instead, unless they send every event), a forked child (followed
/// into the tree by `sandbox_newtask`) killed with SIGTERM and reaped.
pub(crate) fn sandbox(backend: &mut dyn CaptureBackend) -> Result<SandboxResult, SelfTestError> {
    let tgid = std::process::id();
    backend.watch_tasks(&[tgid])?;
    let filtered_before = backend.kernel_filtered()?;
    let absent = format!("/nri-trace-selftest-{tgid}-absent");
    let not_a_directory = not_a_directory();
    for path in [&not_a_directory, &absent] {
        let cpath = std::ffi::CString::new(path.as_str()).expect("no NUL");
        // Fail (ENOTDIR, ENOENT): the probe sees the attempt and its errno.
        unsafe { libc::rmdir(cpath.as_ptr()) };
    }
    let child = unsafe { libc::fork() };
    if child < 0 {
        return Err(io_err("fork")(io::Error::last_os_error()));
    }
    if child == 0 {
        // Only async-signal-safe calls after fork in a threaded process.
        loop {
            unsafe { libc::pause() };
        }
    }
    unsafe { libc::kill(child, libc::SIGTERM) };
    let mut status = 0;
    unsafe { libc::waitpid(child, &raw mut status, 0) };
    let mut r = SandboxResult {
        absent_counted: backend.kernel_filtered()? > filtered_before,
        ..SandboxResult::default()
    };
    let child = child as u32;
    // Everything there is: the self-test's own few records.
    backend.drain(usize::MAX, &mut |bytes| {
        let Ok(rec) = ring_entry::parse(bytes) else {
            return;
        };
        if rec.kind != EntryKind::Sandbox {
            return;
        }
        let Some(ev) = sandbox::from_record(&rec, session::now_timestamp()) else {
            return;
        };
        match ev.op {
            SandboxOp::Unlink {
                path: p,
                dir: true,
                errno,
            } if ev.tgid == tgid && p == not_a_directory => {
                r.rmdir = Some((p, errno));
            }
            SandboxOp::Unlink { path: p, .. } if ev.tgid == tgid && p == absent => {
                r.absent_sent = true;
            }
            SandboxOp::Signal { sig, target, .. } if target == child && sig == libc::SIGTERM => {
                r.signal = true;
            }
            SandboxOp::Exit { status } if ev.tgid == child => r.exit = Some(status),
            _ => {}
        }
    });
    Ok(r)
}

/// What `untraced_writes` measured: `per_target` one-byte writes to each
/// of a file, a pipe and a TCP loopback socket (and the reads that drained
/// the pipe and the socket), and how many times the data programs ran
/// meanwhile, by the kernel's BPF statistics.
#[derive(Debug)]
pub(crate) struct UntracedWrites {
    pub per_target: u32,
    /// Reads that drained the pipe and the socket.
    pub reads: u32,
    /// Runs of the data programs, by any process, while this one wrote.
    pub runs: u64,
}

/// Write `per_target` single bytes to a file, a pipe and a TCP loopback
/// socket, none of them a unix socket, with the kernel's BPF statistics
/// on, and count the data programs' runs: the fentry backend's run for
/// unix stream sockets only, the tracepoint backend's for every read and
/// write (issue 34's test). The statistics cost every program run two
/// clock reads while on, so they are on only for the loop (`enable_stats`'s
/// fd).
pub(crate) fn untraced_writes(
    backend: &super::EbpfBackend,
    per_target: u32,
) -> Result<UntracedWrites, SelfTestError> {
    let mut targets = Vec::new();
    for t in [WriteTarget::File, WriteTarget::Pipe, WriteTarget::Tcp] {
        targets.push(OpenTarget::open(t).map_err(|source| SelfTestError::Io {
            what: match t {
                WriteTarget::Tcp => "a TCP connection on 127.0.0.1 (is lo up?)",
                _ => "opening a file and a pipe",
            },
            source,
        })?);
    }
    let stats =
        aya::sys::enable_stats(aya::sys::Stats::RunTime).map_err(|e| SelfTestError::Io {
            what: "enabling the kernel's BPF statistics (BPF_ENABLE_STATS, Linux 5.8)",
            source: e.io_error,
        })?;
    let before = backend.data_program_runs()?;
    let mut buf = vec![0u8; DRAIN_EVERY as usize];
    let mut reads = 0;
    for i in 1..=per_target {
        for t in &targets {
            t.write_byte().map_err(io_err("write"))?;
        }
        for t in &mut targets {
            if i % t.target.drain_every() == 0 {
                reads += t.drain(&mut buf);
            }
        }
    }
    let after = backend.data_program_runs()?;
    drop(stats);
    Ok(UntracedWrites {
        per_target,
        reads,
        runs: after - before,
    })
}
