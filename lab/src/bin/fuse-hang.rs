//! fuse-hang: a minimal FUSE file system whose one file can never be read.
//!
//! It speaks the kernel's FUSE protocol directly over `/dev/fuse` (no
//! libfuse): it mounts itself on MOUNTPOINT, answers INIT, LOOKUP, GETATTR,
//! OPEN/OPENDIR, READDIR, FLUSH, RELEASE/RELEASEDIR, STATFS and DESTROY,
//! and holds every READ of the file `hang` without ever answering it.
//!
//! Why: a task whose FUSE request the daemon has *read* (the request is
//! FR_SENT) waits in `request_wait_answer` (Linux fs/fuse/dev.c). A signal
//! first ends the interruptible wait and queues an INTERRUPT (which this
//! server ignores); with a fatal signal pending the killable wait returns
//! at once too; since the request is no longer pending (it is in user
//! space) the task then waits in `wait_event(req->waitq, ...)`:
//! uninterruptibly, state D, with its SIGKILL pending, until the daemon
//! answers or the connection is aborted. A reader here is therefore in
//! state S while it waits and in state D once it has been sent SIGKILL:
//! a container process that a StopContainer's SIGKILL cannot end.
//!
//! Reads go straight to the server: OPEN answers FOPEN_DIRECT_IO and INIT
//! does not offer FUSE_ASYNC_READ, so a read(2) is one synchronous READ
//! request of the reader itself (no page-cache readahead in the background,
//! where the reader would wait on a page lock, killably).
//!
//! ```text
//! fuse-hang MOUNTPOINT
//! ```
//!
//! MOUNTPOINT is created if missing. stdout gets one JSON line per event:
//! `{"mounted": MOUNTPOINT, "pid": N}` once mounted; `{"held": "READ",
//! "unique": U, "pid": P, "nodeid": 2}` per READ held (P: the reader's pid
//! in fuse-hang's PID namespace, from the request header); `{"interrupt":
//! U}` per INTERRUPT of request U; `{"unmounted": MOUNTPOINT, "reason": ..}`
//! at the end. On SIGTERM, SIGINT or SIGHUP it closes `/dev/fuse` first,
//! which aborts the connection: every held request ends with ECONNABORTED
//! and the stuck readers get to die; then it detaches the mount
//! (umount2 MNT_DETACH). If it is killed instead, the kernel closes the
//! descriptor just the same (the readers are freed) but the mount stays
//! ("Transport endpoint is not connected") until someone unmounts it.
//!
//! Struct layouts and opcodes: include/uapi/linux/fuse.h (protocol 7.31 is
//! negotiated; the layouts used here are unchanged up to 7.45).

use std::{
    ffi::CString,
    io::Write,
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    path::{Path, PathBuf},
    process::ExitCode,
};

// ------------------------------------------------------------------ protocol

/// FUSE_KERNEL_VERSION.
const KERNEL_MAJOR: u32 = 7;
/// The minor version we speak: 7.31 (fuse_init_out has its 64-byte form
/// since 7.23; nothing here needs a later one).
const OUR_MINOR: u32 = 31;

// enum fuse_opcode.
const FUSE_LOOKUP: u32 = 1;
const FUSE_FORGET: u32 = 2; // no reply
const FUSE_GETATTR: u32 = 3;
const FUSE_OPEN: u32 = 14;
const FUSE_READ: u32 = 15;
const FUSE_STATFS: u32 = 17;
const FUSE_RELEASE: u32 = 18;
const FUSE_FSYNC: u32 = 20;
const FUSE_FLUSH: u32 = 25;
const FUSE_INIT: u32 = 26;
const FUSE_OPENDIR: u32 = 27;
const FUSE_READDIR: u32 = 28;
const FUSE_RELEASEDIR: u32 = 29;
const FUSE_FSYNCDIR: u32 = 30;
const FUSE_INTERRUPT: u32 = 36; // no reply (we ignore it)
const FUSE_DESTROY: u32 = 38;
const FUSE_NOTIFY_REPLY: u32 = 41; // no reply
const FUSE_BATCH_FORGET: u32 = 42; // no reply

/// FOPEN_DIRECT_IO: bypass the page cache for this open file.
const FOPEN_DIRECT_IO: u32 = 1 << 0;
/// FUSE_COMPAT_22_INIT_OUT_SIZE: the fuse_init_out size before 7.23.
const COMPAT_22_INIT_OUT_SIZE: usize = 24;

/// sizeof(struct fuse_in_header): len u32, opcode u32, unique u64,
/// nodeid u64, uid u32, gid u32, pid u32, total_extlen u16, padding u16.
const IN_HEADER_LEN: usize = 40;
/// sizeof(struct fuse_out_header): len u32, error i32, unique u64.
const OUT_HEADER_LEN: usize = 16;
/// sizeof(struct fuse_attr).
#[cfg(test)]
const ATTR_LEN: usize = 88;
/// sizeof(struct fuse_init_out) (7.23+).
const INIT_OUT_LEN: usize = 64;
/// FUSE_NAME_OFFSET: offsetof(struct fuse_dirent, name).
const DIRENT_NAME_OFFSET: usize = 24;

/// FUSE_ROOT_ID.
const ROOT_ID: u64 = 1;
/// The one file: `hang`.
const FILE_ID: u64 = 2;
const FILE_NAME: &[u8] = b"hang";
/// What the file would hold (its size; nobody ever gets to read it).
const FILE_DATA: &[u8] = b"fuse-hang: this read is never answered\n";

/// The read buffer: the kernel's largest request is 128 KiB of data plus
/// the header (FUSE_MAX_MAX_PAGES is larger, but we never raise max_pages);
/// at least FUSE_MIN_READ_BUFFER (8192).
const BUF_LEN: usize = 1 << 20;

/// struct fuse_in_header, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct InHeader {
    len: u32,
    opcode: u32,
    unique: u64,
    nodeid: u64,
    uid: u32,
    gid: u32,
    pid: u32,
}

fn u32_at(b: &[u8], off: usize) -> Option<u32> {
    b.get(off..off + 4)
        .map(|s| u32::from_ne_bytes(s.try_into().expect("4 bytes")))
}

fn u64_at(b: &[u8], off: usize) -> Option<u64> {
    b.get(off..off + 8)
        .map(|s| u64::from_ne_bytes(s.try_into().expect("8 bytes")))
}

impl InHeader {
    fn parse(b: &[u8]) -> Option<Self> {
        Some(Self {
            len: u32_at(b, 0)?,
            opcode: u32_at(b, 4)?,
            unique: u64_at(b, 8)?,
            nodeid: u64_at(b, 16)?,
            uid: u32_at(b, 24)?,
            gid: u32_at(b, 28)?,
            pid: u32_at(b, 32)?,
        })
    }
}

/// Little builder of native-endian protocol structs.
#[derive(Default)]
struct Out(Vec<u8>);

impl Out {
    fn u16(mut self, v: u16) -> Self {
        self.0.extend_from_slice(&v.to_ne_bytes());
        self
    }
    fn u32(mut self, v: u32) -> Self {
        self.0.extend_from_slice(&v.to_ne_bytes());
        self
    }
    fn u64(mut self, v: u64) -> Self {
        self.0.extend_from_slice(&v.to_ne_bytes());
        self
    }
    fn zeros(mut self, n: usize) -> Self {
        self.0.resize(self.0.len() + n, 0);
        self
    }
    fn bytes(mut self, b: &[u8]) -> Self {
        self.0.extend_from_slice(b);
        self
    }
}

/// A reply: struct fuse_out_header + payload. `error` is 0 or -errno
/// (errors carry no payload).
fn reply(unique: u64, error: i32, payload: &[u8]) -> Vec<u8> {
    let len = (OUT_HEADER_LEN + payload.len()) as u32;
    Out::default()
        .u32(len)
        .u32(error as u32)
        .u64(unique)
        .bytes(payload)
        .0
}

fn reply_err(unique: u64, errno: i32) -> Vec<u8> {
    reply(unique, -errno, &[])
}

/// struct fuse_attr of node `id`.
fn attr(id: u64, time: u64) -> Out {
    let (mode, nlink, size, blocks) = if id == ROOT_ID {
        (libc::S_IFDIR | 0o755, 2, 0, 0)
    } else {
        (libc::S_IFREG | 0o444, 1, FILE_DATA.len() as u64, 1)
    };
    Out::default()
        .u64(id) // ino
        .u64(size)
        .u64(blocks)
        .u64(time) // atime
        .u64(time) // mtime
        .u64(time) // ctime
        .u32(0) // atimensec
        .u32(0) // mtimensec
        .u32(0) // ctimensec
        .u32(mode)
        .u32(nlink)
        .u32(0) // uid
        .u32(0) // gid
        .u32(0) // rdev
        .u32(4096) // blksize
        .u32(0) // flags
}

/// How long the kernel may cache names and attributes (seconds).
const VALID_SECS: u64 = 1;

/// struct fuse_entry_out for node `id`.
fn entry_out(id: u64, time: u64) -> Vec<u8> {
    Out::default()
        .u64(id) // nodeid
        .u64(1) // generation
        .u64(VALID_SECS) // entry_valid
        .u64(VALID_SECS) // attr_valid
        .u32(0) // entry_valid_nsec
        .u32(0) // attr_valid_nsec
        .bytes(&attr(id, time).0)
        .0
}

/// struct fuse_attr_out for node `id`.
fn attr_out(id: u64, time: u64) -> Vec<u8> {
    Out::default()
        .u64(VALID_SECS) // attr_valid
        .u32(0) // attr_valid_nsec
        .u32(0) // dummy
        .bytes(&attr(id, time).0)
        .0
}

/// struct fuse_open_out.
fn open_out(fh: u64, open_flags: u32) -> Vec<u8> {
    Out::default().u64(fh).u32(open_flags).u32(0).0
}

/// struct fuse_statfs_out { struct fuse_kstatfs st; }.
fn statfs_out() -> Vec<u8> {
    Out::default()
        .u64(1) // blocks
        .u64(0) // bfree
        .u64(0) // bavail
        .u64(2) // files
        .u64(0) // ffree
        .u32(4096) // bsize
        .u32(255) // namelen
        .u32(4096) // frsize
        .u32(0) // padding
        .zeros(6 * 4) // spare[6]
        .0
}

/// The directory's entries: (name, node, DT_ type).
const DIR: [(&[u8], u64, u32); 3] = [
    (b".", ROOT_ID, libc::DT_DIR as u32),
    (b"..", ROOT_ID, libc::DT_DIR as u32),
    (FILE_NAME, FILE_ID, libc::DT_REG as u32),
];

/// READDIR: struct fuse_dirent records (each FUSE_DIRENT_ALIGN'ed to 8
/// bytes) from entry index `offset` on, as many as fit in `size` bytes.
/// A dirent's `off` is the index of the entry after it.
fn readdir_out(offset: u64, size: u32) -> Vec<u8> {
    let mut out = Out::default();
    for (i, (name, ino, typ)) in DIR.iter().enumerate().skip(offset as usize) {
        let rec = (DIRENT_NAME_OFFSET + name.len()).div_ceil(8) * 8;
        if out.0.len() + rec > size as usize {
            break;
        }
        out = out
            .u64(*ino)
            .u64(i as u64 + 1)
            .u32(name.len() as u32)
            .u32(*typ)
            .bytes(name)
            .zeros(rec - DIRENT_NAME_OFFSET - name.len());
    }
    out.0
}

/// What to do with one request.
#[derive(Debug, PartialEq, Eq)]
enum Handled {
    /// Write this reply.
    Reply(Vec<u8>),
    /// No reply is due (FORGET, BATCH_FORGET, NOTIFY_REPLY).
    Nothing,
    /// A READ of the file: never answered.
    Held(InHeader),
    /// INTERRUPT of request `0`: ignored (no reply), so the interrupted
    /// request stays held.
    Interrupt(u64),
    /// DESTROY (answered): the kernel is done with us.
    Destroy(Vec<u8>),
    /// Not a well-formed request (too short, inconsistent length).
    Malformed(String),
}

/// The file system's state.
struct Fs {
    /// Attribute times (seconds since the epoch): when we started.
    time: u64,
    next_fh: u64,
    /// The negotiated minor version (after INIT).
    minor: Option<u32>,
}

impl Fs {
    fn new(time: u64) -> Self {
        Self {
            time,
            next_fh: 1,
            minor: None,
        }
    }

    fn fh(&mut self) -> u64 {
        let fh = self.next_fh;
        self.next_fh += 1;
        fh
    }

    /// Handle one request as read from /dev/fuse (one read = one request).
    fn handle(&mut self, buf: &[u8]) -> Handled {
        let Some(h) = InHeader::parse(buf) else {
            return Handled::Malformed(format!("short request ({} bytes)", buf.len()));
        };
        let len = h.len as usize;
        if len < IN_HEADER_LEN || len > buf.len() {
            return Handled::Malformed(format!(
                "request length {len} but {} bytes read (opcode {}, unique {})",
                buf.len(),
                h.opcode,
                h.unique
            ));
        }
        let body = &buf[IN_HEADER_LEN..len];
        let u = h.unique;
        let ok = |payload: Vec<u8>| Handled::Reply(reply(u, 0, &payload));
        let err = |errno: i32| Handled::Reply(reply_err(u, errno));
        match h.opcode {
            FUSE_INIT => {
                // struct fuse_init_in: major, minor, max_readahead, flags.
                let (Some(major), Some(minor), Some(max_readahead)) =
                    (u32_at(body, 0), u32_at(body, 4), u32_at(body, 8))
                else {
                    return err(libc::EINVAL);
                };
                if major < KERNEL_MAJOR {
                    return err(libc::EPROTO);
                }
                if major > KERNEL_MAJOR {
                    // The kernel sends INIT again with our major.
                    return ok(Out::default().u32(KERNEL_MAJOR).u32(0).0);
                }
                let minor = minor.min(OUR_MINOR);
                self.minor = Some(minor);
                // struct fuse_init_out. flags 0: no FUSE_ASYNC_READ (reads
                // stay synchronous requests of the reader), nothing else.
                let out = Out::default()
                    .u32(KERNEL_MAJOR)
                    .u32(minor)
                    .u32(max_readahead)
                    .u32(0) // flags
                    .u16(0) // max_background: the kernel's default
                    .u16(0) // congestion_threshold: the kernel's default
                    .u32(4096) // max_write (the kernel's minimum)
                    .u32(1) // time_gran (ns)
                    .u16(0) // max_pages (only with FUSE_MAX_PAGES)
                    .u16(0) // map_alignment
                    .u32(0) // flags2
                    .zeros(7 * 4); // unused[7]
                debug_assert_eq!(out.0.len(), INIT_OUT_LEN);
                let mut payload = out.0;
                if minor < 23 {
                    payload.truncate(COMPAT_22_INIT_OUT_SIZE);
                }
                ok(payload)
            }
            FUSE_LOOKUP => {
                // The name, NUL-terminated.
                let name = body.split(|&c| c == 0).next().unwrap_or_default();
                if h.nodeid == ROOT_ID && name == FILE_NAME {
                    ok(entry_out(FILE_ID, self.time))
                } else if h.nodeid == ROOT_ID && (name == b"." || name == b"..") {
                    ok(entry_out(ROOT_ID, self.time))
                } else {
                    err(libc::ENOENT)
                }
            }
            FUSE_GETATTR => match h.nodeid {
                ROOT_ID | FILE_ID => ok(attr_out(h.nodeid, self.time)),
                _ => err(libc::ENOENT),
            },
            FUSE_OPEN => {
                // struct fuse_open_in: flags, open_flags.
                let flags = u32_at(body, 0).unwrap_or(0) as i32;
                match h.nodeid {
                    FILE_ID if flags & libc::O_ACCMODE == libc::O_RDONLY => {
                        let fh = self.fh();
                        ok(open_out(fh, FOPEN_DIRECT_IO))
                    }
                    FILE_ID => err(libc::EACCES),
                    ROOT_ID => err(libc::EISDIR),
                    _ => err(libc::ENOENT),
                }
            }
            FUSE_OPENDIR => match h.nodeid {
                ROOT_ID => {
                    let fh = self.fh();
                    ok(open_out(fh, 0))
                }
                _ => err(libc::ENOTDIR),
            },
            FUSE_READDIR => {
                // struct fuse_read_in: fh u64, offset u64, size u32, ...
                let (Some(offset), Some(size)) = (u64_at(body, 8), u32_at(body, 16)) else {
                    return err(libc::EINVAL);
                };
                if h.nodeid != ROOT_ID {
                    return err(libc::ENOTDIR);
                }
                ok(readdir_out(offset, size))
            }
            FUSE_READ if h.nodeid == FILE_ID => Handled::Held(h),
            FUSE_READ => err(libc::EISDIR),
            FUSE_FLUSH | FUSE_RELEASE | FUSE_RELEASEDIR | FUSE_FSYNC | FUSE_FSYNCDIR => ok(vec![]),
            FUSE_STATFS => ok(statfs_out()),
            FUSE_INTERRUPT => match u64_at(body, 0) {
                // struct fuse_interrupt_in: unique.
                Some(target) => Handled::Interrupt(target),
                None => Handled::Malformed("INTERRUPT without its unique".into()),
            },
            FUSE_FORGET | FUSE_BATCH_FORGET | FUSE_NOTIFY_REPLY => Handled::Nothing,
            FUSE_DESTROY => Handled::Destroy(reply(u, 0, &[])),
            // GETXATTR, LISTXATTR, ACCESS, SETATTR, WRITE, ...: the kernel
            // remembers ENOSYS for most and stops asking.
            _ => err(libc::ENOSYS),
        }
    }
}

// ------------------------------------------------------------------ main

fn say(v: serde_json::Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{v}");
    let _ = out.flush();
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn cstr(p: &Path) -> Result<CString, String> {
    CString::new(p.as_os_str().as_encoded_bytes())
        .map_err(|_nul| format!("{} contains a NUL byte", p.display()))
}

/// Block the stop signals and return a signalfd that reads them.
fn stop_signals() -> Result<OwnedFd, String> {
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&raw mut set);
        for s in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
            libc::sigaddset(&raw mut set, s);
        }
        if libc::pthread_sigmask(libc::SIG_BLOCK, &raw const set, std::ptr::null_mut()) != 0 {
            return Err("pthread_sigmask failed".into());
        }
        let fd = libc::signalfd(-1, &raw const set, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK);
        if fd < 0 {
            return Err(format!("signalfd: {}", std::io::Error::last_os_error()));
        }
        Ok(OwnedFd::from_raw_fd(fd))
    }
}

fn mount(mnt: &Path, fd: i32) -> Result<(), String> {
    let target = cstr(mnt)?;
    let data = CString::new(format!(
        "fd={fd},rootmode=40000,user_id=0,group_id=0,allow_other"
    ))
    .expect("no NUL");
    let r = unsafe {
        libc::mount(
            c"fuse-hang".as_ptr(),
            target.as_ptr(),
            c"fuse".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV,
            data.as_ptr().cast(),
        )
    };
    if r != 0 {
        return Err(format!(
            "mount fuse on {}: {}",
            mnt.display(),
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

fn unmount(mnt: &Path) {
    let Ok(target) = cstr(mnt) else { return };
    if unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) } != 0 && errno() != libc::EINVAL {
        eprintln!(
            "fuse-hang: umount2 {}: {}",
            mnt.display(),
            std::io::Error::last_os_error()
        );
    }
}

/// Serve until a stop signal or the end of the connection; returns why.
fn serve(fuse: &OwnedFd, sig: &OwnedFd, fs: &mut Fs) -> Result<String, String> {
    let mut buf = vec![0u8; BUF_LEN];
    let mut held = 0usize;
    loop {
        let mut fds = [
            libc::pollfd {
                fd: fuse.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: sig.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        if unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) } < 0 {
            if errno() == libc::EINTR {
                continue;
            }
            return Err(format!("poll: {}", std::io::Error::last_os_error()));
        }
        if fds[1].revents != 0 {
            let mut si: libc::signalfd_siginfo = unsafe { std::mem::zeroed() };
            let n = unsafe {
                libc::read(
                    sig.as_raw_fd(),
                    (&raw mut si).cast(),
                    size_of::<libc::signalfd_siginfo>(),
                )
            };
            if n > 0 {
                return Ok(format!("signal {}", si.ssi_signo));
            }
            continue;
        }
        if fds[0].revents == 0 {
            continue;
        }
        let n = unsafe { libc::read(fuse.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            match errno() {
                // Nothing queued after all, or the request was interrupted
                // or aborted before we got it.
                libc::EINTR | libc::EAGAIN | libc::ENOENT => continue,
                // Unmounted (or aborted through fusectl).
                libc::ENODEV => return Ok("connection ended (unmounted or aborted)".into()),
                _ => {
                    return Err(format!(
                        "read /dev/fuse: {}",
                        std::io::Error::last_os_error()
                    ))
                }
            }
        }
        let out = match fs.handle(&buf[..n as usize]) {
            Handled::Reply(r) => Some(r),
            Handled::Nothing => None,
            Handled::Held(h) => {
                held += 1;
                say(
                    serde_json::json!({"held": "READ", "unique": h.unique, "pid": h.pid,
                    "uid": h.uid, "gid": h.gid, "nodeid": h.nodeid, "held_total": held}),
                );
                None
            }
            Handled::Interrupt(u) => {
                say(serde_json::json!({"interrupt": u}));
                None
            }
            Handled::Destroy(r) => {
                let _ = write_reply(fuse, &r);
                return Ok("DESTROY".into());
            }
            Handled::Malformed(why) => {
                eprintln!("fuse-hang: ignoring a malformed request: {why}");
                None
            }
        };
        if let Some(r) = out {
            if let Err(e) = write_reply(fuse, &r) {
                eprintln!("fuse-hang: writing a reply: {e}");
            }
        }
    }
}

fn write_reply(fuse: &OwnedFd, r: &[u8]) -> Result<(), String> {
    let n = unsafe { libc::write(fuse.as_raw_fd(), r.as_ptr().cast(), r.len()) };
    if n < 0 {
        // ENOENT: the request was interrupted or aborted meanwhile.
        if errno() == libc::ENOENT {
            return Ok(());
        }
        return Err(std::io::Error::last_os_error().to_string());
    }
    Ok(())
}

fn run(mnt: PathBuf) -> Result<String, String> {
    std::fs::create_dir_all(&mnt).map_err(|e| format!("creating {}: {e}", mnt.display()))?;
    let mnt = mnt
        .canonicalize()
        .map_err(|e| format!("{}: {e}", mnt.display()))?;
    let sig = stop_signals()?;
    let fd = unsafe {
        libc::open(
            c"/dev/fuse".as_ptr(),
            libc::O_RDWR | libc::O_CLOEXEC | libc::O_NONBLOCK,
        )
    };
    if fd < 0 {
        return Err(format!(
            "open /dev/fuse: {}",
            std::io::Error::last_os_error()
        ));
    }
    let fuse = unsafe { OwnedFd::from_raw_fd(fd) };
    mount(&mnt, fd)?;
    say(serde_json::json!({"mounted": mnt, "pid": std::process::id()}));
    let time = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut fs = Fs::new(time);
    let res = serve(&fuse, &sig, &mut fs);
    // Closing the only descriptor aborts the connection: held requests end
    // with ECONNABORTED, their readers return (or die of their SIGKILL).
    drop(fuse);
    unmount(&mnt);
    let reason = match &res {
        Ok(r) => r.clone(),
        Err(e) => format!("error: {e}"),
    };
    say(serde_json::json!({"unmounted": mnt, "reason": reason}));
    res
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mnt = match args.as_slice() {
        [h] if h == "-h" || h == "--help" => {
            println!("usage: fuse-hang MOUNTPOINT\n\nMounts a FUSE file system with one file, `hang`, whose reads are never answered; runs until SIGTERM/SIGINT/SIGHUP.");
            return ExitCode::SUCCESS;
        }
        [m] if !m.starts_with('-') => PathBuf::from(m),
        _ => {
            eprintln!("usage: fuse-hang MOUNTPOINT");
            return ExitCode::from(2);
        }
    };
    match run(mnt) {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fuse-hang: error: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(opcode: u32, unique: u64, nodeid: u64, body: &[u8]) -> Vec<u8> {
        Out::default()
            .u32((IN_HEADER_LEN + body.len()) as u32)
            .u32(opcode)
            .u64(unique)
            .u64(nodeid)
            .u32(0) // uid
            .u32(0) // gid
            .u32(4242) // pid
            .u16(0) // total_extlen
            .u16(0) // padding
            .bytes(body)
            .0
    }

    fn reply_of(h: Handled) -> Vec<u8> {
        match h {
            Handled::Reply(r) => r,
            other => panic!("expected a reply, got {other:?}"),
        }
    }

    /// (len, error, unique, payload) of a reply.
    fn parse_reply(r: &[u8]) -> (u32, i32, u64, &[u8]) {
        (
            u32_at(r, 0).unwrap(),
            u32_at(r, 4).unwrap() as i32,
            u64_at(r, 8).unwrap(),
            &r[OUT_HEADER_LEN..],
        )
    }

    fn init_in(major: u32, minor: u32) -> Vec<u8> {
        Out::default()
            .u32(major)
            .u32(minor)
            .u32(131072)
            .u32(0xffff_ffff)
            .zeros(48)
            .0
    }

    #[test]
    fn struct_sizes() {
        assert_eq!(attr(FILE_ID, 0).0.len(), ATTR_LEN);
        assert_eq!(entry_out(FILE_ID, 0).len(), 40 + ATTR_LEN);
        assert_eq!(attr_out(ROOT_ID, 0).len(), 16 + ATTR_LEN);
        assert_eq!(open_out(1, 0).len(), 16);
        assert_eq!(statfs_out().len(), 80);
        assert_eq!(request(FUSE_GETATTR, 1, 1, &[]).len(), IN_HEADER_LEN);
    }

    #[test]
    fn init_negotiates_our_minor() {
        let mut fs = Fs::new(0);
        let r = reply_of(fs.handle(&request(FUSE_INIT, 7, 0, &init_in(7, 45))));
        let (len, error, unique, p) = parse_reply(&r);
        assert_eq!((len as usize, error, unique), (OUT_HEADER_LEN + 64, 0, 7));
        assert_eq!(u32_at(p, 0), Some(7));
        assert_eq!(u32_at(p, 4), Some(OUR_MINOR));
        assert_eq!(u32_at(p, 8), Some(131072), "max_readahead echoed");
        assert_eq!(u32_at(p, 12), Some(0), "no flags: no async read");
        assert_eq!(u32_at(p, 20), Some(4096), "max_write");
        // An older kernel: its minor, the compat size.
        let r = reply_of(fs.handle(&request(FUSE_INIT, 8, 0, &init_in(7, 22))));
        let (len, _, _, p) = parse_reply(&r);
        assert_eq!(len as usize, OUT_HEADER_LEN + COMPAT_22_INIT_OUT_SIZE);
        assert_eq!(u32_at(p, 4), Some(22));
        // Too old a major; a truncated init_in.
        let r = reply_of(fs.handle(&request(FUSE_INIT, 9, 0, &init_in(6, 0))));
        assert_eq!(parse_reply(&r).1, -libc::EPROTO);
        let r = reply_of(fs.handle(&request(FUSE_INIT, 10, 0, &[7, 0, 0])));
        assert_eq!(parse_reply(&r).1, -libc::EINVAL);
    }

    #[test]
    fn lookup_getattr_open() {
        let mut fs = Fs::new(1_700_000_000);
        let r = reply_of(fs.handle(&request(FUSE_LOOKUP, 2, ROOT_ID, b"hang\0")));
        let (_, error, _, p) = parse_reply(&r);
        assert_eq!(error, 0);
        assert_eq!(u64_at(p, 0), Some(FILE_ID));
        // attr.size and attr.mode inside fuse_entry_out (attr at 40).
        assert_eq!(u64_at(p, 40 + 8), Some(FILE_DATA.len() as u64));
        assert_eq!(u32_at(p, 40 + 60), Some(libc::S_IFREG | 0o444));
        let r = reply_of(fs.handle(&request(FUSE_LOOKUP, 3, ROOT_ID, b"nope\0")));
        assert_eq!(parse_reply(&r).1, -libc::ENOENT);
        let r = reply_of(fs.handle(&request(FUSE_GETATTR, 4, ROOT_ID, &[0; 16])));
        let (_, error, _, p) = parse_reply(&r);
        assert_eq!(error, 0);
        assert_eq!(u32_at(p, 16 + 60), Some(libc::S_IFDIR | 0o755));
        assert_eq!(u64_at(p, 16 + 24), Some(1_700_000_000), "atime");
        let open_in = Out::default().u32(libc::O_RDONLY as u32).u32(0).0;
        let r = reply_of(fs.handle(&request(FUSE_OPEN, 5, FILE_ID, &open_in)));
        let (_, error, _, p) = parse_reply(&r);
        assert_eq!(error, 0);
        assert_eq!(u32_at(p, 8), Some(FOPEN_DIRECT_IO));
        let open_rw = Out::default().u32(libc::O_RDWR as u32).u32(0).0;
        let r = reply_of(fs.handle(&request(FUSE_OPEN, 6, FILE_ID, &open_rw)));
        assert_eq!(parse_reply(&r).1, -libc::EACCES);
    }

    #[test]
    fn reads_are_held_and_interrupts_ignored() {
        let mut fs = Fs::new(0);
        let read_in = Out::default().u64(1).u64(0).u32(4096).zeros(20).0;
        match fs.handle(&request(FUSE_READ, 11, FILE_ID, &read_in)) {
            Handled::Held(h) => {
                assert_eq!((h.unique, h.pid, h.nodeid), (11, 4242, FILE_ID));
            }
            other => panic!("{other:?}"),
        }
        let intr = Out::default().u64(11).0;
        assert_eq!(
            fs.handle(&request(FUSE_INTERRUPT, 12, 0, &intr)),
            Handled::Interrupt(11)
        );
        assert_eq!(
            fs.handle(&request(FUSE_FORGET, 13, FILE_ID, &[0; 8])),
            Handled::Nothing
        );
    }

    #[test]
    fn others_and_malformed() {
        let mut fs = Fs::new(0);
        // GETXATTR (22) and anything unknown: ENOSYS.
        for op in [22, 23, 34, 9999] {
            let r = reply_of(fs.handle(&request(op, 20, ROOT_ID, b"user.x\0")));
            assert_eq!(parse_reply(&r).1, -libc::ENOSYS, "opcode {op}");
        }
        let r = reply_of(fs.handle(&request(FUSE_FLUSH, 21, FILE_ID, &[0; 24])));
        assert_eq!(parse_reply(&r), (16, 0, 21, &[][..]));
        let r = reply_of(fs.handle(&request(FUSE_STATFS, 22, ROOT_ID, &[])));
        assert_eq!(parse_reply(&r).3.len(), 80);
        // Short reads and lying lengths never panic.
        for n in 0..IN_HEADER_LEN {
            assert!(matches!(
                fs.handle(&request(FUSE_GETATTR, 1, 1, &[])[..n]),
                Handled::Malformed(_)
            ));
        }
        let mut lie = request(FUSE_LOOKUP, 1, 1, b"hang\0");
        lie[0..4].copy_from_slice(&1000u32.to_ne_bytes());
        assert!(matches!(fs.handle(&lie), Handled::Malformed(_)));
        lie[0..4].copy_from_slice(&3u32.to_ne_bytes());
        assert!(matches!(fs.handle(&lie), Handled::Malformed(_)));
        // Bodies too short for their struct: an error reply, no panic.
        let r = reply_of(fs.handle(&request(FUSE_READDIR, 2, ROOT_ID, &[0; 4])));
        assert_eq!(parse_reply(&r).1, -libc::EINVAL);
        let r = reply_of(fs.handle(&request(FUSE_OPEN, 3, FILE_ID, &[])));
        assert_eq!(parse_reply(&r).1, 0, "no flags: read-only");
        assert!(matches!(
            fs.handle(&request(FUSE_INTERRUPT, 4, 0, &[1, 2])),
            Handled::Malformed(_)
        ));
        assert!(matches!(
            fs.handle(&request(FUSE_DESTROY, 5, 0, &[])),
            Handled::Destroy(_)
        ));
    }

    #[test]
    fn readdir_pages() {
        let all = readdir_out(0, 4096);
        // ".", ".." (24 + 1 or 2, aligned: 32 each) and "hang" (24 + 4 -> 32).
        assert_eq!(all.len(), 96);
        assert_eq!(u64_at(&all, 64), Some(FILE_ID));
        assert_eq!(u64_at(&all, 72), Some(3), "off of the last entry");
        assert_eq!(u32_at(&all, 80), Some(4));
        assert_eq!(&all[88..92], b"hang");
        // Resuming after the second entry; a buffer that fits one entry.
        assert_eq!(readdir_out(2, 4096), all[64..].to_vec());
        assert_eq!(readdir_out(0, 40), all[..32].to_vec());
        assert!(readdir_out(3, 4096).is_empty());
        assert!(readdir_out(u64::MAX, 4096).is_empty());
    }
}
