//! The real `nri-trace` binary in a pseudo-terminal: `nri-trace replay`
//! of a committed lab recording opens the TUI; the test switches views,
//! filters, opens a finding's evidence, quits, and checks the screen (as
//! a terminal emulator, the vt100 crate, shows it) and that the terminal
//! is restored (alternate screen left, cursor shown, cooked mode back).
//!
//! Needs the workspace's binaries (`cargo test --workspace`, as CI runs);
//! no root.

use crate::lab_trace;

use std::{
    io::{Read, Write},
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    path::Path,
    process::{Command, Stdio},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

const COLS: u16 = 120;
const ROWS: u16 = 36;

struct Pty {
    master: std::fs::File,
    slave: OwnedFd,
}

fn open_pty() -> Pty {
    let (mut m, mut s) = (0, 0);
    let ws = libc::winsize {
        ws_row: ROWS,
        ws_col: COLS,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    let rc = unsafe {
        libc::openpty(
            &raw mut m,
            &raw mut s,
            std::ptr::null_mut(),
            std::ptr::null(),
            &raw const ws,
        )
    };
    assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
    Pty {
        master: unsafe { std::fs::File::from_raw_fd(m) },
        slave: unsafe { OwnedFd::from_raw_fd(s) },
    }
}

/// The emulated screen and every byte the program wrote.
struct Screen {
    parser: vt100::Parser,
    raw: Vec<u8>,
}

fn contents(screen: &Mutex<Screen>) -> String {
    screen.lock().unwrap().parser.screen().contents()
}

fn wait_for(screen: &Mutex<Screen>, what: &str, step: &str) {
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(15) {
        if contents(screen).contains(what) {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!(
        "{step}: {what:?} not on screen after 15 s; screen:\n{}",
        contents(screen)
    );
}

fn lflags(fd: i32) -> libc::tcflag_t {
    let mut t: libc::termios = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::tcgetattr(fd, &raw mut t) }, 0);
    t.c_lflag
}

#[test]
fn tui_in_a_pty_switches_views_filters_shows_evidence_and_restores_the_terminal() {
    let bin = lab_trace::bin("nri-trace");
    if !bin.exists() {
        let why = format!("{} not built: run `cargo test --workspace`", bin.display());
        assert!(!lab_trace::ci(), "{why}");
        eprintln!("skipping: {why}");
        return;
    }
    let recording = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/trace/teardown-error/recording.ndjson.gz");
    let pty = open_pty();
    let cooked = lflags(pty.slave.as_raw_fd());
    assert!(cooked & libc::ICANON != 0 && cooked & libc::ECHO != 0);
    let slave = || Stdio::from(pty.slave.try_clone().unwrap());
    let mut cmd = Command::new(&bin);
    cmd.arg("replay")
        .arg(&recording)
        .env("TERM", "xterm-256color")
        .env_remove("NO_COLOR")
        .current_dir(env!("CARGO_TARGET_TMPDIR"))
        .stdin(slave())
        .stdout(slave())
        .stderr(slave());
    // Its own session with the pty as controlling terminal, as a shell
    // would start it.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(|| {
            if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().expect("starting nri-trace replay");
    // The command holds copies of the slave end: the master sees the end
    // of output only once they are closed.
    drop(cmd);
    let screen = Arc::new(Mutex::new(Screen {
        parser: vt100::Parser::new(ROWS, COLS, 0),
        raw: Vec::new(),
    }));
    let mut master_in = pty.master.try_clone().unwrap();
    let reader = {
        let screen = Arc::clone(&screen);
        std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            // Ends with EIO once every slave end is closed.
            while let Ok(n) = master_in.read(&mut buf) {
                if n == 0 {
                    break;
                }
                let mut s = screen.lock().unwrap();
                s.parser.process(&buf[..n]);
                s.raw.extend_from_slice(&buf[..n]);
            }
        })
    };
    let mut keys = pty.master.try_clone().unwrap();
    let mut press = |k: &[u8]| {
        keys.write_all(k).unwrap();
        std::thread::sleep(Duration::from_millis(300));
    };

    // The Pods view first: the pod of the recording, removed.
    wait_for(&screen, "1 Pods", "start");
    wait_for(&screen, "nri-trace/tderr-0", "pods view");
    assert!(
        contents(&screen).contains("removed"),
        "{}",
        contents(&screen)
    );
    // The raw mode is on while the TUI runs.
    assert_eq!(
        lflags(pty.slave.as_raw_fd()) & libc::ICANON,
        0,
        "not in raw mode"
    );

    // Plugins: both test plugins with their hooks.
    press(b"3");
    wait_for(&screen, "05-failer", "plugins view");
    wait_for(&screen, "50-observer", "plugins view");

    // Findings, then the first one's evidence and its rule with its source.
    press(b"4");
    wait_for(&screen, "teardown-hook-failed", "findings view");
    press(b"\r");
    wait_for(&screen, "Evidence", "evidence");
    wait_for(&screen, "later plugins not called: 50-observer", "evidence");
    wait_for(&screen, "source: containerd/nri PR 286", "rule source");
    press(b"\x1b");

    // Pods filtered: a filter that matches nothing empties the table, one
    // that matches brings the pod back.
    press(b"1");
    press(b"/");
    for k in b"nomatch" {
        press(&[*k]);
    }
    press(b"\r");
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !contents(&screen).contains("nri-trace/tderr-0"),
        "filter 'nomatch' still shows the pod:\n{}",
        contents(&screen)
    );
    press(b"/");
    press(b"\x1b");
    press(b"/");
    for k in b"tderr" {
        press(&[*k]);
    }
    press(b"\r");
    wait_for(&screen, "nri-trace/tderr-0", "filter 'tderr'");

    // The help, then quit.
    press(b"?");
    wait_for(&screen, "quit", "help");
    press(b"\x1b");
    press(b"q");
    let t0 = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "nri-trace did not quit on q"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(status.success(), "nri-trace exited with {status}");

    // Restored: cooked mode, alternate screen left, cursor shown.
    let after = lflags(pty.slave.as_raw_fd());
    assert!(
        after & libc::ICANON != 0 && after & libc::ECHO != 0,
        "terminal left in raw mode"
    );
    drop(pty.slave);
    drop(keys);
    // The reader ends once the output is drained (EIO on the master).
    let t0 = Instant::now();
    while !reader.is_finished() && t0.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let raw = screen.lock().unwrap().raw.clone();
    let find = |seq: &[u8]| raw.windows(seq.len()).rposition(|w| w == seq);
    let entered = find(b"\x1b[?1049h").expect("never entered the alternate screen");
    let left = find(b"\x1b[?1049l").expect("alternate screen not left");
    assert!(left > entered);
    let shown = find(b"\x1b[?25h").expect("cursor not shown again");
    assert!(shown > entered);
}
