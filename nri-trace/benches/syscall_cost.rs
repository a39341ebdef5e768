//! What nri-trace's probes cost, seen from a process's syscalls.
//!
//! Driven by `cargo xtask bench`, which attaches the program sets (or
//! nothing) around runs of this executable, pins it with taskset, and reads
//! criterion's estimates; see docs/benchmarks.md. Nothing here is pinned and
//! nothing here asserts on time.
//!
//! - `untraced/*`: syscalls of a process nri-trace does not track: the cost
//!   every other process on the node pays for the probes.
//! - `traced/unix_write/{64,4096,65536}`: write(2) on the server end of a
//!   unix stream connection that nri-trace captures; this process is the
//!   traced one. Runs only when `NRI_TRACE_BENCH_SOCK` (a socket path this
//!   process listens on) and `NRI_TRACE_BENCH_READY` (a file the xtask
//!   creates once the capture is attached, or at once for the baseline) are
//!   set; the untraced group is then skipped. `traced/write_devnull_64`
//!   is the traced process writing to an fd that nri-trace does not track.
//! - `NRI_TRACE_BENCH_MODE=throughput`: not a criterion run: write as fast
//!   as possible (or at `NRI_TRACE_BENCH_RATE` bytes/s) on such a captured
//!   connection for `NRI_TRACE_BENCH_SECONDS`, with writes of
//!   `NRI_TRACE_BENCH_WRITE_SIZE` bytes, and print what was written.

use std::{
    env,
    ffi::OsString,
    fs::File,
    hint::black_box,
    io::Read,
    os::{
        fd::{AsRawFd, RawFd},
        unix::net::{UnixListener, UnixStream},
    },
    path::Path,
    sync::atomic::{AtomicU64, Ordering::Relaxed},
    thread,
    time::{Duration, Instant},
};

use criterion::{BenchmarkId, Criterion, Throughput};

/// Sizes of the traced write benchmarks: one record, one page, and a
/// syscall that the kernel program splits into four 16 KiB records.
const TRACED_SIZES: [usize; 3] = [64, 4096, 65536];

fn main() {
    if env::var("NRI_TRACE_BENCH_MODE").as_deref() == Ok("throughput") {
        throughput();
        return;
    }
    // Short but stable; `cargo xtask bench --quick` shortens them further
    // from the command line (criterion's flags override these).
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(100)
        .configure_from_args();
    match traced_connection() {
        Some(conn) => {
            let writes = traced(&mut c, &conn);
            eprintln!(
                "nri-trace-bench: writes={writes} reader reads={}",
                READS.load(Relaxed)
            );
        }
        None => untraced(&mut c),
    }
    c.final_summary();
}

// ------------------------------------------------------------- untraced

fn untraced(c: &mut Criterion) {
    let mut g = c.benchmark_group("untraced");
    let null = File::options()
        .write(true)
        .open("/dev/null")
        .expect("open /dev/null");
    let fd = null.as_raw_fd();
    let buf = [0x5au8; 64];
    g.bench_function("write_devnull_64", |b| {
        b.iter(|| write_once(fd, black_box(&buf)))
    });
    // The raw syscall: glibc's getppid() is a plain syscall today, but the
    // point is to measure a syscall that no nri-trace program probes.
    g.bench_function("getppid", |b| {
        b.iter(|| unsafe { libc::syscall(libc::SYS_getppid) })
    });
    // A syscall the sandbox probes do probe (a path syscall of any process
    // pays their tracepoint and one hash lookup): unlinkat of an absolute
    // path that does not exist (ENOENT, nothing changes).
    let missing = c"/nonexistent-nri-trace-bench/x";
    g.bench_function("unlinkat_enoent", |b| {
        b.iter(|| unsafe { libc::unlinkat(libc::AT_FDCWD, black_box(missing.as_ptr()), 0) })
    });
    g.finish();
}

// --------------------------------------------------------------- traced

/// The server end of a captured connection; a thread drains the client end.
struct TracedConn {
    server: UnixStream,
    // Kept so that the listening fd (tracked as such) stays open.
    _listener: UnixListener,
}

/// Listen on `NRI_TRACE_BENCH_SOCK`, wait for `NRI_TRACE_BENCH_READY`, then
/// connect to ourselves. The capture tracks the listening fd, so the kernel
/// program tracks the fd that accept returns: the connection must be made
/// after the capture is attached, hence the ready file.
fn traced_connection() -> Option<TracedConn> {
    let sock = env::var_os("NRI_TRACE_BENCH_SOCK")?;
    let ready = env::var_os("NRI_TRACE_BENCH_READY")?;
    Some(connect_when_ready(&sock, &ready))
}

fn connect_when_ready(sock: &OsString, ready: &OsString) -> TracedConn {
    let _ = std::fs::remove_file(sock);
    let listener = UnixListener::bind(sock)
        .unwrap_or_else(|e| panic!("bind {}: {e}", Path::new(sock).display()));
    // The xtask starts the capture once it sees this line.
    eprintln!(
        "nri-trace-bench: listening on {}",
        Path::new(sock).display()
    );
    let deadline = Instant::now() + Duration::from_mins(2);
    while !Path::new(ready).exists() {
        assert!(
            Instant::now() < deadline,
            "{} did not appear within 120 s",
            Path::new(ready).display()
        );
        thread::sleep(Duration::from_millis(5));
    }
    let client = UnixStream::connect(sock).expect("connect to our own listener");
    let (server, _) = listener.accept().expect("accept");
    thread::spawn(move || drain(client));
    eprintln!("nri-trace-bench: connected");
    TracedConn {
        server,
        _listener: listener,
    }
}

/// Reads done by the reader thread: they are syscalls of the traced
/// process too (on an fd nri-trace does not track), printed at the end so
/// the xtask can tell how many fall on each captured write.
static READS: AtomicU64 = AtomicU64::new(0);

/// Read and discard everything the server end writes, in large reads so
/// that the reader costs as few syscalls as possible. With
/// NRI_TRACE_BENCH_READER_CPU=N the reader runs on CPU N: on the writer's
/// CPU, every slower write also changes how often the reader is woken and
/// switched to, which the measurement then bills to the probe.
fn drain(mut client: UnixStream) {
    if let Some(cpu) = env::var("NRI_TRACE_BENCH_READER_CPU")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
    {
        // SAFETY: a zeroed cpu_set_t is valid; CPU_SET writes inside it.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &raw const set);
        }
    }
    let mut buf = vec![0u8; 1 << 20];
    // NRI_TRACE_BENCH_READER_POLL_US=N: read without blocking every N us
    // instead of sleeping in read(2). No reader waits on the socket, so a
    // write wakes nobody, and the writer's time in write(2) no longer
    // includes a switch to the reader and the reader's own (probed) read
    // whenever the woken reader preempts it on the way out of the syscall.
    if let Some(us) = env::var("NRI_TRACE_BENCH_READER_POLL_US")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        client.set_nonblocking(true).expect("O_NONBLOCK");
        loop {
            match client.read(&mut buf) {
                Ok(0) => break,
                Ok(_) => {
                    READS.fetch_add(1, Relaxed);
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    thread::sleep(Duration::from_micros(us));
                }
                Err(_) => break,
            }
        }
        return;
    }
    while let Ok(n) = client.read(&mut buf) {
        if n == 0 {
            break;
        }
        READS.fetch_add(1, Relaxed);
    }
}

/// Returns the number of writes done on the captured connection.
fn traced(c: &mut Criterion, conn: &TracedConn) -> u64 {
    let fd = conn.server.as_raw_fd();
    let mut g = c.benchmark_group("traced");
    // A syscall nri-trace probes, by the traced process, on an fd it does
    // not track: what the traced process pays on its other fds (e.g. the
    // reader thread's reads of the client end).
    let null = File::options()
        .write(true)
        .open("/dev/null")
        .expect("open /dev/null");
    let small = [0x5au8; 64];
    g.bench_function("write_devnull_64", |b| {
        b.iter(|| write_once(null.as_raw_fd(), black_box(&small)))
    });
    // Writes done on the captured connection (warm-up included), so the
    // xtask can relate the capture's counts and the reader's reads to them.
    let mut writes: u64 = 0;
    for size in TRACED_SIZES {
        let buf = vec![0x5au8; size];
        g.throughput(Throughput::Bytes(size as u64));
        g.bench_with_input(BenchmarkId::new("unix_write", size), &buf, |b, buf| {
            b.iter(|| {
                writes += 1;
                write_once(fd, black_box(buf))
            })
        });
    }
    g.finish();
    writes
}

/// One write(2) (libc, not std: std's UnixStream writes with sendto).
#[inline(always)]
fn write_once(fd: RawFd, buf: &[u8]) -> isize {
    let n = unsafe { libc::write(fd, buf.as_ptr().cast(), buf.len()) };
    assert!(n >= 0, "write: {}", std::io::Error::last_os_error());
    n
}

// ----------------------------------------------------------- throughput

fn env_num(name: &str, default: f64) -> f64 {
    match env::var(name) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|e| panic!("{name}={v:?} is not a number: {e}")),
        Err(_) => default,
    }
}

/// Write on a captured connection for a fixed time, flat out or paced to a
/// byte rate, and print one line the xtask parses.
fn throughput() {
    let conn = traced_connection()
        .expect("throughput mode needs NRI_TRACE_BENCH_SOCK and NRI_TRACE_BENCH_READY");
    let size = env_num("NRI_TRACE_BENCH_WRITE_SIZE", 65536.0) as usize;
    let seconds = env_num("NRI_TRACE_BENCH_SECONDS", 3.0);
    // Bytes per second; 0 = as fast as possible.
    let rate = env_num("NRI_TRACE_BENCH_RATE", 0.0);
    let fd = conn.server.as_raw_fd();
    if env::var_os("NRI_TRACE_BENCH_READER_POLL_US").is_some() {
        // A polling reader leaves data queued between polls (and its sleeps
        // run late by the timer slack): give the socket room for many
        // writes, so that a write never blocks on a full buffer.
        let bytes: libc::c_int = 16 << 20;
        // SAFETY: setsockopt reads `bytes` for size_of::<c_int>() bytes.
        let rc = unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_SNDBUFFORCE,
                (&raw const bytes).cast(),
                size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        assert_eq!(rc, 0, "SO_SNDBUFFORCE: {}", std::io::Error::last_os_error());
    }
    let buf = vec![0x5au8; size];
    let run_for = Duration::from_secs_f64(seconds);
    let mut writes: u64 = 0;
    let mut bytes: u64 = 0;
    // Time spent inside write(2) (plus two clock reads, ~50 ns): the
    // per-write cost at a paced rate, where criterion cannot go.
    let mut in_write = Duration::ZERO;
    let start = Instant::now();
    loop {
        let now = Instant::now();
        if now - start >= run_for {
            break;
        }
        if rate > 0.0 {
            // Pace against the absolute schedule, so sleep granularity does
            // not lower the average rate.
            let due = start + Duration::from_secs_f64(bytes as f64 / rate);
            if due > now {
                thread::sleep(due - now);
                continue;
            }
        }
        let t0 = Instant::now();
        bytes += write_once(fd, &buf) as u64;
        in_write += t0.elapsed();
        writes += 1;
    }
    let elapsed = start.elapsed().as_secs_f64();
    let write_ns = in_write.as_nanos() as f64 / writes.max(1) as f64;
    println!(
        "nri-trace-bench: throughput writes={writes} bytes={bytes} seconds={elapsed:.6} \
         write_ns={write_ns:.1} reads={}",
        READS.load(Relaxed)
    );
}
