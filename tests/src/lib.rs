//! Shared between the traced helper process (`src/bin/unix-peer.rs`) and
//! the tests that check what nri-trace captured from it: the deterministic
//! byte streams the peer sends, so both sides compute them from one source.
//! Also where the tests find the workspace's binaries ([`workspace_bin`]).

use std::path::PathBuf;

/// A binary of the workspace (built by `cargo test --workspace`), found
/// beside the running test executable (`target/<profile>/deps/..`).
pub fn workspace_bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    let dir = exe.parent().expect("exe dir");
    let dir = if dir.ends_with("deps") {
        dir.parent().unwrap_or(dir)
    } else {
        dir
    };
    dir.join(name)
}

const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// FNV-1a offset basis: the starting state of [`fnv1a`].
pub const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// FNV-1a over `data`, continuing from `h`.
pub fn fnv1a(mut h: u64, data: &[u8]) -> u64 {
    for &b in data {
        h ^= u64::from(b);
        h = h.wrapping_mul(FNV_PRIME);
    }
    h
}

/// A 64-bit finalizer (MurmurHash3's fmix64).
fn mix64(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^= x >> 33;
    x
}

/// Byte `j` of a deterministic stream named by `key`.
pub fn pattern_byte(key: u64, j: u64) -> u8 {
    (mix64(key ^ j.wrapping_mul(0x9e37_79b9_7f4a_7c15)) >> 29) as u8
}

/// `len` bytes of the deterministic stream `key`.
pub fn pattern(key: u64, len: usize) -> Vec<u8> {
    (0..len as u64).map(|j| pattern_byte(key, j)).collect()
}

/// A writer into a buffer the test keeps a handle to (for writers the
/// code under test owns, e.g. the pipeline's `--save` file).
#[derive(Clone, Default)]
pub struct SharedBuf(pub std::rc::Rc<std::cell::RefCell<Vec<u8>>>);

impl SharedBuf {
    /// What was written so far.
    pub fn bytes(&self) -> Vec<u8> {
        self.0.borrow().clone()
    }
}

impl std::io::Write for SharedBuf {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.borrow_mut().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A plain HTTP/1.0 GET of `path` on `addr` (host:port): the body of a
/// 200 answer (nri-trace's metrics, Prometheus' API).
pub fn http_get(addr: &str, path: &str) -> std::io::Result<String> {
    use std::io::{Error, Read, Write};
    let mut s = std::net::TcpStream::connect(addr)?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(5)))?;
    // One write: a server may answer as soon as it has the head.
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())?;
    let mut resp = String::new();
    s.read_to_string(&mut resp)?;
    let (head, body) = resp
        .split_once("\r\n\r\n")
        .ok_or_else(|| Error::other(format!("GET {path}: no HTTP header end")))?;
    if !head.starts_with("HTTP/1.0 200") {
        return Err(Error::other(format!("GET {path}: {head}")));
    }
    Ok(body.to_string())
}

/// Wait until the file `stderr`, where `child` writes, holds every one of
/// `lines` (`nri-trace: ready`...). An error naming `what`, with the file,
/// when it exits first or `within` passes: a bound on the wait, not a
/// timed assertion.
pub fn wait_for_lines(
    child: &mut std::process::Child,
    stderr: &std::path::Path,
    lines: &[&str],
    within: std::time::Duration,
    what: &str,
) -> std::io::Result<()> {
    use std::io::Error;
    let t0 = std::time::Instant::now();
    loop {
        let log = std::fs::read_to_string(stderr).unwrap_or_default();
        if lines.iter().all(|l| log.contains(l)) {
            return Ok(());
        }
        if let Some(st) = child.try_wait()? {
            return Err(Error::other(format!(
                "{what} exited ({st}) before it was ready:\n{log}"
            )));
        }
        if t0.elapsed() > within {
            return Err(Error::other(format!(
                "{what} not ready after {within:?}:\n{log}"
            )));
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// Send `signal` to `child` and wait up to `within` for it to exit: its
/// status; past it, it is killed and reaped and the error names `what`.
pub fn stop_child(
    child: &mut std::process::Child,
    signal: i32,
    within: std::time::Duration,
    what: &str,
) -> std::io::Result<std::process::ExitStatus> {
    unsafe { libc::kill(child.id() as i32, signal) };
    let t0 = std::time::Instant::now();
    loop {
        if let Some(st) = child.try_wait()? {
            return Ok(st);
        }
        if t0.elapsed() > within {
            let _ = child.kill();
            let _ = child.wait();
            return Err(std::io::Error::other(format!(
                "{what} did not stop within {within:?} of signal {signal}"
            )));
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}
