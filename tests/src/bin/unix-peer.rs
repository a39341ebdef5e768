//! unix-peer: the process the nri-trace integration tests TRACE.
//!
//! It moves bytes on unix sockets with exactly the syscalls a test asks for,
//! so that the test can check what the eBPF capture saw against what really
//! happened. std + libc only; every data syscall is a direct libc call.
//!
//! Modes:
//!
//! ```text
//! unix-peer serve PATH SCRIPT [--count N] [--threads] [--high-fds [--fcntl-dup]]
//! unix-peer socketpair [MSG_LEN [REPLY_LEN]] [--child-waits]
//! unix-peer pair-exec SCRIPT KEY [--decoy] [NAME=VALUE...]
//! unix-peer mirror FD SCRIPT KEY
//! unix-peer connect PATH SCRIPT KEY
//! ```
//!
//! `serve` binds and listens on PATH, prints `ready`, accepts N connections
//! (default 1; one at a time, or each in its own thread with `--threads`)
//! and runs SCRIPT on each, then closes it with close(2). After the last
//! connection it prints `done` and exits 0 (non-zero on any error).
//! With `--high-fds` the listener moves to fd `HIGH_LISTEN_FD` before
//! `ready`, and each accepted connection to fd `HIGH_CONN_FD + i` with
//! dup2(2) (the accepted fd then closed) before its script runs: fds above
//! those nri-trace keeps in its `FD_TABLE` array, which live in its `FDS`
//! hash instead. With `--fcntl-dup` each connection moves with
//! fcntl(F_DUPFD_CLOEXEC) instead, as Go's `net.FileConn` dups an fd.
//!
//! SCRIPT is a comma list of steps:
//! - `read:N`, `readv:N`, `recvfrom:N`, `recvmsg:N`: receive exactly N bytes,
//!   looping with that same syscall until they arrived (readv/recvmsg use 3
//!   iovecs of uneven sizes, the first one empty for tiny reads);
//! - `write:N`, `writev:N`, `sendto:N`, `sendmsg:N`: send N bytes with that
//!   syscall, looping until all were sent (writev/sendmsg: 3 iovecs);
//! - `OP:N*R`: the step repeated R times;
//! - `wait`: print `waiting`, then block until a line arrives on stdin.
//!
//! The bytes sent are deterministic: byte j of the connection's outgoing
//! stream is `pattern_byte(key, j)`, where `key` is the FNV-1a hash of every
//! byte received on the connection before the step started. The tests carry
//! the same two functions (tests/common/mod.rs) and recompute the stream.
//!
//! `socketpair` waits for the line `go` on stdin (so the capture is attached
//! first), creates an AF_UNIX stream socketpair, prints `socketpair A B`
//! (the two fds) and forks. The child writes MSG_LEN bytes (`pattern_byte(1,
//! j)`, default 100 KiB) to B with write(2), reads REPLY_LEN bytes
//! (`pattern_byte(2, j)`, default 30000) with read(2), checks them, closes B
//! and exits. The parent closes B, reads the child's message from A with
//! read(2), checks it, writes the reply with write(2), closes A, waits for
//! the child, prints `child PID` and `done`. With `--child-waits` the parent
//! prints `child PID` right after the fork instead, and the child waits for
//! a line on stdin (which it shares with the parent) before it writes, so a
//! test can make sure it is traced first.
//!
//! `pair-exec` launches a "plugin" the way containerd launches a
//! pre-installed NRI plugin: it creates a socketpair with SOCK_CLOEXEC and
//! execs `unix-peer mirror 3 SCRIPT KEY` with the other end as fd 3 and the
//! NAME=VALUE variables added to its environment (e.g. NRI_PLUGIN_SOCKET=3),
//! then closes that end. With `--decoy` it does the same once more without
//! the variables and without traffic. It prints `pair FD PID` (its end and
//! the plugin's pid) and, with `--decoy`, `decoy FD PID`, runs SCRIPT on its
//! end like `serve` does on a connection (so a `wait` step lets a test attach
//! to a pair that already exists), closes the decoy, waits for the children
//! and prints `done`.
//!
//! `mirror` is the other side of SCRIPT on fd FD: where the script reads N
//! bytes it writes the next N bytes of `pattern(KEY)` with write(2); where
//! the script writes N bytes it reads them with read(2) and checks them
//! against what the script's side sends (see above). It then expects end of
//! stream and exits 0. `wait` steps are skipped.
//!
//! `connect` is `mirror` as a client: it connects to PATH, prints
//! `connected FD`, and plays the other side of SCRIPT on that connection;
//! there `wait` steps count: it prints `waiting` and blocks until a line
//! arrives on stdin (so the server's script is the same without them). At
//! the end of stream it closes the socket and prints `done`.

use std::{
    io::{BufRead, Write},
    os::{
        fd::IntoRawFd,
        unix::{
            net::{UnixListener, UnixStream},
            process::CommandExt,
        },
    },
    process::{exit, Child, Command, Stdio},
};

use nri_trace_tests::{fnv1a, pattern_byte, FNV_OFFSET};

// ------------------------------------------------ script

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Read,
    Readv,
    Recvfrom,
    Recvmsg,
    Write,
    Writev,
    Sendto,
    Sendmsg,
}

impl Op {
    fn parse(s: &str) -> Option<Op> {
        Some(match s {
            "read" => Op::Read,
            "readv" => Op::Readv,
            "recvfrom" => Op::Recvfrom,
            "recvmsg" => Op::Recvmsg,
            "write" => Op::Write,
            "writev" => Op::Writev,
            "sendto" => Op::Sendto,
            "sendmsg" => Op::Sendmsg,
            _ => return None,
        })
    }

    fn inbound(self) -> bool {
        matches!(self, Op::Read | Op::Readv | Op::Recvfrom | Op::Recvmsg)
    }
}

#[derive(Clone, Copy, Debug)]
enum Step {
    Io(Op, usize),
    Wait,
}

fn parse_script(s: &str) -> Result<Vec<Step>, String> {
    let mut steps = Vec::new();
    for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        if item == "wait" {
            steps.push(Step::Wait);
            continue;
        }
        let (op, n) = item
            .split_once(':')
            .ok_or_else(|| format!("bad step {item:?}: want OP:N"))?;
        let op = Op::parse(op).ok_or_else(|| format!("unknown syscall {op:?} in {item:?}"))?;
        let (n, repeat) = match n.split_once('*') {
            Some((n, r)) => (n, r.parse::<usize>().map_err(|e| format!("{item:?}: {e}"))?),
            None => (n, 1),
        };
        let n = n.parse::<usize>().map_err(|e| format!("{item:?}: {e}"))?;
        if n == 0 {
            return Err(format!("{item:?}: zero-byte steps are not supported"));
        }
        steps.extend(std::iter::repeat_n(Step::Io(op, n), repeat));
    }
    Ok(steps)
}

// ------------------------------------------------ syscalls

fn errno() -> std::io::Error {
    std::io::Error::last_os_error()
}

/// Three uneven iovecs covering `len` bytes at `base`: len/7, len/3, rest
/// (the first ones are empty for tiny lengths, which the capture must skip).
fn iovecs(base: *mut u8, len: usize) -> [libc::iovec; 3] {
    let a = len / 7;
    let b = len / 3;
    let c = len - a - b;
    unsafe {
        [
            libc::iovec {
                iov_base: base.cast::<libc::c_void>(),
                iov_len: a,
            },
            libc::iovec {
                iov_base: base.add(a).cast::<libc::c_void>(),
                iov_len: b,
            },
            libc::iovec {
                iov_base: base.add(a + b).cast::<libc::c_void>(),
                iov_len: c,
            },
        ]
    }
}

fn msghdr(iov: &mut [libc::iovec; 3]) -> libc::msghdr {
    let mut m: libc::msghdr = unsafe { std::mem::zeroed() };
    m.msg_iov = iov.as_mut_ptr();
    // usize here; c_int on musl, hence the cast.
    #[allow(trivial_numeric_casts, reason = "the field's type differs by libc")]
    {
        m.msg_iovlen = iov.len() as _;
    }
    m
}

/// Receive exactly `buf.len()` bytes with `op`, looping with the same syscall.
fn recv_exact(fd: i32, op: Op, buf: &mut [u8]) -> Result<(), String> {
    let mut got = 0;
    while got < buf.len() {
        let want = buf.len() - got;
        let p = unsafe { buf.as_mut_ptr().add(got) };
        let r = unsafe {
            match op {
                Op::Read => libc::read(fd, p.cast::<libc::c_void>(), want),
                Op::Recvfrom => libc::recvfrom(
                    fd,
                    p.cast::<libc::c_void>(),
                    want,
                    0,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                ),
                Op::Readv => {
                    let iov = iovecs(p, want);
                    libc::readv(fd, iov.as_ptr(), iov.len() as i32)
                }
                Op::Recvmsg => {
                    let mut iov = iovecs(p, want);
                    let mut m = msghdr(&mut iov);
                    libc::recvmsg(fd, &raw mut m, 0)
                }
                _ => unreachable!("{op:?} is not a receive"),
            }
        };
        if r < 0 {
            let e = errno();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(format!("{op:?} on fd {fd}: {e}"));
        }
        if r == 0 {
            return Err(format!(
                "{op:?} on fd {fd}: end of stream after {got} of {} bytes",
                buf.len()
            ));
        }
        got += r as usize;
    }
    Ok(())
}

/// Send all of `buf` with `op`, looping with the same syscall.
fn send_all(fd: i32, op: Op, buf: &[u8]) -> Result<(), String> {
    let mut sent = 0;
    while sent < buf.len() {
        let left = buf.len() - sent;
        let p = unsafe { buf.as_ptr().add(sent) };
        let r = unsafe {
            match op {
                Op::Write => libc::write(fd, p.cast::<libc::c_void>(), left),
                Op::Sendto => libc::sendto(
                    fd,
                    p.cast::<libc::c_void>(),
                    left,
                    libc::MSG_NOSIGNAL,
                    std::ptr::null(),
                    0,
                ),
                Op::Writev => {
                    let iov = iovecs(p.cast_mut(), left);
                    libc::writev(fd, iov.as_ptr(), iov.len() as i32)
                }
                Op::Sendmsg => {
                    let mut iov = iovecs(p.cast_mut(), left);
                    let m = msghdr(&mut iov);
                    libc::sendmsg(fd, &raw const m, libc::MSG_NOSIGNAL)
                }
                _ => unreachable!("{op:?} is not a send"),
            }
        };
        if r < 0 {
            let e = errno();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(format!("{op:?} on fd {fd}: {e}"));
        }
        sent += r as usize;
    }
    Ok(())
}

fn close(fd: i32) -> Result<(), String> {
    if unsafe { libc::close(fd) } != 0 {
        return Err(format!("close({fd}): {}", errno()));
    }
    Ok(())
}

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// One line from fd 0 read byte by byte with read(2): for a forked child,
/// which must not use the stdin buffer it shares (as a copy) with its parent.
fn read_fd0_line() -> Result<(), String> {
    let mut b = [0u8; 1];
    loop {
        let r = unsafe { libc::read(0, b.as_mut_ptr().cast::<libc::c_void>(), 1) };
        match r {
            1 if b[0] == b'\n' => return Ok(()),
            1 => {}
            0 => return Err("stdin closed while waiting for a line".into()),
            _ if errno().kind() == std::io::ErrorKind::Interrupted => {}
            _ => return Err(format!("stdin: {}", errno())),
        }
    }
}

fn read_stdin_line() -> Result<String, String> {
    let mut line = String::new();
    match std::io::stdin().lock().read_line(&mut line) {
        Ok(0) => Err("stdin closed while waiting for a line".into()),
        Ok(_) => Ok(line.trim_end().to_string()),
        Err(e) => Err(format!("stdin: {e}")),
    }
}

// ------------------------------------------------ modes

fn run_script(fd: i32, steps: &[Step]) -> Result<(), String> {
    let mut received = FNV_OFFSET;
    let mut out_off = 0u64;
    let mut buf = Vec::new();
    for step in steps {
        match *step {
            Step::Wait => {
                say("waiting");
                read_stdin_line()?;
            }
            Step::Io(op, n) if op.inbound() => {
                buf.clear();
                buf.resize(n, 0);
                recv_exact(fd, op, &mut buf)?;
                received = fnv1a(received, &buf);
            }
            Step::Io(op, n) => {
                buf.clear();
                buf.extend((0..n as u64).map(|j| pattern_byte(received, out_off + j)));
                send_all(fd, op, &buf)?;
                out_off += n as u64;
            }
        }
    }
    close(fd)
}

/// `serve --high-fds`: the listener's fd, and the first connection's.
/// Above nri-trace-common's FD_TABLE_FDS (4096; the capture test that uses
/// them checks it).
const HIGH_LISTEN_FD: i32 = 6000;
const HIGH_CONN_FD: i32 = 5000;

/// dup2 `fd` onto `to` (or, `with_fcntl`, fcntl(F_DUPFD_CLOEXEC) to the
/// lowest free fd from `to`) and close `fd`.
fn move_fd(fd: i32, to: i32, with_fcntl: bool) -> Result<i32, String> {
    let got = if with_fcntl {
        unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, to) }
    } else {
        unsafe { libc::dup2(fd, to) }
    };
    if got != to {
        return Err(format!(
            "{}({fd}, {to}): {got}: {}",
            if with_fcntl {
                "fcntl F_DUPFD_CLOEXEC"
            } else {
                "dup2"
            },
            errno()
        ));
    }
    close(fd)?;
    Ok(to)
}

fn serve(args: &[String]) -> Result<(), String> {
    let [path, script, rest @ ..] = args else {
        return Err(
            "usage: unix-peer serve PATH SCRIPT [--count N] [--threads] [--high-fds \
             [--fcntl-dup]]"
                .into(),
        );
    };
    let steps = parse_script(script)?;
    let mut count = 1usize;
    let mut threads = false;
    let mut high_fds = false;
    let mut fcntl_dup = false;
    let mut it = rest.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--count" => {
                count = it
                    .next()
                    .and_then(|n| n.parse().ok())
                    .ok_or("--count wants a number")?
            }
            "--threads" => threads = true,
            "--high-fds" => high_fds = true,
            "--fcntl-dup" => fcntl_dup = true,
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    let mut listener = UnixListener::bind(path).map_err(|e| format!("bind {path}: {e}"))?;
    if high_fds {
        let lim = libc::rlimit {
            rlim_cur: 8192,
            rlim_max: 8192,
        };
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raw const lim) } != 0 {
            return Err(format!("setrlimit(RLIMIT_NOFILE, 8192): {}", errno()));
        }
        let fd = move_fd(listener.into_raw_fd(), HIGH_LISTEN_FD, false)?;
        // SAFETY: fd is the listening socket just moved, owned by no one else.
        listener = unsafe { <UnixListener as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    }
    say("ready");
    let mut handles = Vec::new();
    for i in 0..count {
        let (stream, _) = listener.accept().map_err(|e| format!("accept: {e}"))?;
        let mut fd = stream.into_raw_fd();
        if high_fds {
            fd = move_fd(fd, HIGH_CONN_FD + i as i32, fcntl_dup)?;
        }
        if threads {
            let steps = steps.clone();
            handles.push(std::thread::spawn(move || run_script(fd, &steps)));
        } else {
            run_script(fd, &steps)?;
        }
    }
    for h in handles {
        h.join().map_err(|_panic| "connection thread panicked")??;
    }
    drop(listener);
    say("done");
    Ok(())
}

fn socketpair(args: &[String]) -> Result<(), String> {
    let child_waits = args.iter().any(|a| a == "--child-waits");
    let args: Vec<String> = args
        .iter()
        .filter(|a| *a != "--child-waits")
        .cloned()
        .collect();
    let msg_len: usize = args
        .first()
        .map_or(Ok(100 * 1024), |a| a.parse())
        .map_err(|e| format!("MSG_LEN: {e}"))?;
    let reply_len: usize = args
        .get(1)
        .map_or(Ok(30_000), |a| a.parse())
        .map_err(|e| format!("REPLY_LEN: {e}"))?;
    let msg: Vec<u8> = (0..msg_len as u64).map(|j| pattern_byte(1, j)).collect();
    let reply: Vec<u8> = (0..reply_len as u64).map(|j| pattern_byte(2, j)).collect();
    let mut buf = vec![0u8; msg_len.max(reply_len)];

    let go = read_stdin_line()?;
    if go != "go" {
        return Err(format!("expected \"go\" on stdin, got {go:?}"));
    }
    let mut sv = [0i32; 2];
    if unsafe { libc::socketpair(libc::AF_UNIX, libc::SOCK_STREAM, 0, sv.as_mut_ptr()) } != 0 {
        return Err(format!("socketpair: {}", errno()));
    }
    let [a, b] = sv;
    say(&format!("socketpair {a} {b}"));
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(format!("fork: {}", errno()));
    }
    if pid == 0 {
        // Child: single-threaded copy of us; buffers were prepared before fork.
        let r = (|| {
            close(a)?;
            if child_waits {
                read_fd0_line()?;
            }
            send_all(b, Op::Write, &msg)?;
            recv_exact(b, Op::Read, &mut buf[..reply_len])?;
            if buf[..reply_len] != reply[..] {
                return Err("child: the reply differs from the expected pattern".to_string());
            }
            close(b)
        })();
        let code = match r {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("unix-peer child: {e}");
                1
            }
        };
        unsafe { libc::_exit(code) };
    }
    if child_waits {
        say(&format!("child {pid}"));
    }
    close(b)?;
    recv_exact(a, Op::Read, &mut buf[..msg_len])?;
    if buf[..msg_len] != msg[..] {
        return Err("parent: the child's message differs from the expected pattern".into());
    }
    send_all(a, Op::Write, &reply)?;
    close(a)?;
    let mut status = 0;
    if unsafe { libc::waitpid(pid, &raw mut status, 0) } != pid {
        return Err(format!("waitpid: {}", errno()));
    }
    if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        return Err(format!("child {pid} failed (wait status {status:#x})"));
    }
    if !child_waits {
        say(&format!("child {pid}"));
    }
    say("done");
    Ok(())
}

/// Spawns `unix-peer ARGS` with `fd` as its fd 3 and `env` added to its
/// environment, as containerd passes a plugin its end of the socketpair
/// (Go's cmd.ExtraFiles). stdout is /dev/null, so that only this process
/// talks to the test.
fn spawn_with_fd3(fd: i32, args: &[&str], env: &[(&str, &str)]) -> Result<Child, String> {
    // std's exec-status pipe is opened after fd 3 is taken, so dup2 onto fd
    // 3 in the child cannot close it. Check that fd 3 really is in use.
    if unsafe { libc::fcntl(3, libc::F_GETFD) } < 0 {
        return Err("fd 3 is not open before spawning the plugin".into());
    }
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let mut cmd = Command::new(exe);
    cmd.args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    // SAFETY: dup2/fcntl are async-signal-safe and touch no memory.
    unsafe {
        cmd.pre_exec(move || {
            // dup2 clears FD_CLOEXEC on the copy; an end that already is fd
            // 3 has it cleared by hand.
            let ok = if fd == 3 {
                libc::fcntl(3, libc::F_SETFD, 0) == 0
            } else {
                libc::dup2(fd, 3) == 3
            };
            if ok {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
    cmd.spawn()
        .map_err(|e| format!("spawn unix-peer {args:?}: {e}"))
}

/// A SOCK_STREAM socketpair with SOCK_CLOEXEC on both ends (as containerd
/// creates it), so that neither end leaks into other children.
fn cloexec_pair() -> Result<(i32, i32), String> {
    let mut sv = [0i32; 2];
    let ty = libc::SOCK_STREAM | libc::SOCK_CLOEXEC;
    if unsafe { libc::socketpair(libc::AF_UNIX, ty, 0, sv.as_mut_ptr()) } != 0 {
        return Err(format!("socketpair: {}", errno()));
    }
    Ok((sv[0], sv[1]))
}

fn wait_child(what: &str, mut child: Child) -> Result<(), String> {
    let status = child
        .wait()
        .map_err(|e| format!("waiting for the {what}: {e}"))?;
    if !status.success() {
        return Err(format!("the {what} (pid {}) failed: {status}", child.id()));
    }
    Ok(())
}

fn pair_exec(args: &[String]) -> Result<(), String> {
    let [script, key, rest @ ..] = args else {
        return Err("usage: unix-peer pair-exec SCRIPT KEY [--decoy] [NAME=VALUE...]".into());
    };
    let steps = parse_script(script)?;
    key.parse::<u64>().map_err(|e| format!("KEY: {e}"))?;
    let mut decoy = false;
    let mut env = Vec::new();
    for a in rest {
        match a.split_once('=') {
            _ if a == "--decoy" => decoy = true,
            Some((name, value)) if !name.is_empty() => env.push((name, value)),
            _ => {
                return Err(format!(
                    "unknown argument {a:?}: want --decoy or NAME=VALUE"
                ))
            }
        }
    }
    let (ours, theirs) = cloexec_pair()?;
    let plugin = spawn_with_fd3(theirs, &["mirror", "3", script, key], &env)?;
    close(theirs)?;
    say(&format!("pair {ours} {}", plugin.id()));
    let decoy = if decoy {
        let (ours, theirs) = cloexec_pair()?;
        // An empty script: it only waits for the end of stream.
        let child = spawn_with_fd3(theirs, &["mirror", "3", "", "0"], &[])?;
        close(theirs)?;
        say(&format!("decoy {ours} {}", child.id()));
        Some((ours, child))
    } else {
        None
    };
    run_script(ours, &steps)?;
    if let Some((fd, child)) = decoy {
        close(fd)?;
        wait_child("decoy", child)?;
    }
    wait_child("plugin", plugin)?;
    say("done");
    Ok(())
}

fn mirror(args: &[String]) -> Result<(), String> {
    let [fd, script, key] = args else {
        return Err("usage: unix-peer mirror FD SCRIPT KEY".into());
    };
    let fd: i32 = fd.parse().map_err(|e| format!("FD: {e}"))?;
    let key: u64 = key.parse().map_err(|e| format!("KEY: {e}"))?;
    let steps = parse_script(script)?;
    run_mirror(fd, &steps, key, false)
}

fn connect(args: &[String]) -> Result<(), String> {
    let [path, script, key] = args else {
        return Err("usage: unix-peer connect PATH SCRIPT KEY".into());
    };
    let key: u64 = key.parse().map_err(|e| format!("KEY: {e}"))?;
    let steps = parse_script(script)?;
    let fd = UnixStream::connect(path)
        .map_err(|e| format!("connect {path}: {e}"))?
        .into_raw_fd();
    say(&format!("connected {fd}"));
    run_mirror(fd, &steps, key, true)?;
    say("done");
    Ok(())
}

/// The other side of `steps` on `fd` (see `mirror`), then end of stream and
/// close. `waits`: honour `wait` steps (else skip them).
fn run_mirror(fd: i32, steps: &[Step], key: u64, waits: bool) -> Result<(), String> {
    // What the script's side has received (= what we sent) and sent so far.
    let (mut sent_hash, mut sent, mut received) = (FNV_OFFSET, 0u64, 0u64);
    let mut buf = Vec::new();
    for &step in steps {
        let Step::Io(op, n) = step else {
            if waits {
                say("waiting");
                read_stdin_line()?;
            }
            continue;
        };
        if op.inbound() {
            buf.clear();
            buf.extend((0..n as u64).map(|j| pattern_byte(key, sent + j)));
            send_all(fd, Op::Write, &buf)?;
            sent_hash = fnv1a(sent_hash, &buf);
            sent += n as u64;
        } else {
            buf.clear();
            buf.resize(n, 0);
            recv_exact(fd, Op::Read, &mut buf)?;
            let bad = (0..n).find(|&j| buf[j] != pattern_byte(sent_hash, received + j as u64));
            if let Some(j) = bad {
                return Err(format!(
                    "mirror: byte {} of the stream differs from the script's",
                    received + j as u64
                ));
            }
            received += n as u64;
        }
    }
    let mut b = [0u8; 1];
    let r = unsafe { libc::read(fd, b.as_mut_ptr().cast::<libc::c_void>(), 1) };
    if r != 0 {
        return Err(format!(
            "mirror: expected end of stream, read returned {r} ({})",
            errno()
        ));
    }
    close(fd)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let r = match args.first().map(String::as_str) {
        Some("serve") => serve(&args[1..]),
        Some("socketpair") => socketpair(&args[1..]),
        Some("pair-exec") => pair_exec(&args[1..]),
        Some("mirror") => mirror(&args[1..]),
        Some("connect") => connect(&args[1..]),
        _ => Err(
            "usage: unix-peer serve PATH SCRIPT [--count N] [--threads] [--high-fds] \
             | socketpair [MSG_LEN [REPLY_LEN]] [--child-waits] \
             | pair-exec SCRIPT KEY [--decoy] [NAME=VALUE...] | mirror FD SCRIPT KEY \
             | connect PATH SCRIPT KEY"
                .into(),
        ),
    };
    if let Err(e) = r {
        eprintln!("unix-peer: {e}");
        exit(1);
    }
}
