//! Test executables run with their output echoed and their failing
//! tests' panic messages kept, to be printed again, last.
//!
//! Why: a lab test binary prints thousands of lines (the lab's own, the
//! failures' captured output, each panic's backtrace), and a CI log is
//! read from its end, often cut in the middle: the stop-36 CI run showed
//! which test failed and a backtrace, but not the assertion. So the
//! output is echoed as it comes, the panic messages are kept (bounded),
//! and a failed run ends with them.

use std::{
    io::{BufRead, BufReader, Read, Write},
    process::{Command, ExitStatus, Stdio},
    sync::{mpsc, Arc, Mutex},
    thread,
    time::{Duration, Instant},
};

use anyhow::{Context, Result};

/// The failures kept of one run: at most this many panic messages ...
const MAX_PANICS: usize = 20;
/// ... of at most this many lines ...
const MAX_LINES: usize = 30;
/// ... of at most this many characters each (a `{:?}` of records can be
/// a megabyte).
const MAX_LINE_CHARS: usize = 1_500;

/// Panic messages seen in test output: a block from libtest's
/// `thread 'NAME' panicked at FILE:LINE:COL:` to the line before
/// `stack backtrace:` or `note: ` (std's panic hook, library/std/src/
/// panicking.rs, `default_hook`), or the next test's output.
#[derive(Default)]
struct Panics {
    blocks: Vec<Vec<String>>,
    open: bool,
    more: usize,
}

impl Panics {
    fn line(&mut self, line: &str) {
        // `thread 'NAME' panicked at`, or with the thread's id since Rust
        // 1.90: `thread 'NAME' (7192) panicked at` (the stop-37 CI run).
        if line.starts_with("thread '") && line.contains(" panicked at ") {
            if self.blocks.len() == MAX_PANICS {
                self.more += 1;
                self.open = false;
                return;
            }
            self.blocks.push(Vec::new());
            self.open = true;
        } else if self.open
            && (line.starts_with("stack backtrace:")
                || line.starts_with("note: ")
                || line.starts_with("---- ")
                || line.starts_with("test ")
                || line.starts_with("failures:"))
        {
            self.open = false;
        }
        if !self.open {
            return;
        }
        let block = self.blocks.last_mut().expect("an open block");
        if block.len() < MAX_LINES {
            let mut l: String = line.chars().take(MAX_LINE_CHARS).collect();
            if l.len() < line.len() {
                l.push_str(" […]");
            }
            block.push(l);
        } else if block.len() == MAX_LINES {
            block.push("[…]".into());
        }
    }
}

/// Echo `from` to `to` line by line, feeding `panics`.
fn echo(from: impl Read, mut to: impl Write, panics: &Mutex<Panics>) {
    let mut r = BufReader::new(from);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match r.read_until(b'\n', &mut buf) {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                let _ = to.write_all(&buf);
                let _ = to.flush();
                let line = String::from_utf8_lossy(&buf);
                panics
                    .lock()
                    .expect("panics lock")
                    .line(line.trim_end_matches(['\n', '\r']));
            }
        }
    }
}

/// Run `cmd` (a test executable), its output echoed as it comes, its
/// tests' panic messages kept.
pub(crate) fn run(cmd: &mut Command) -> Result<Run> {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("running {}", cmd.get_program().display()))?;
    let panics = Arc::new(Mutex::new(Panics::default()));
    // Both streams in threads, and after cargo exits at most 10 s for
    // them to end: a process the tests left behind (a lab daemon) may
    // still hold the pipes, and must not hold this run.
    let (done, ended) = mpsc::channel();
    let out = child.stdout.take().expect("piped stdout");
    let err = child.stderr.take().expect("piped stderr");
    let streams: [(Box<dyn Read + Send>, bool); 2] =
        [(Box::new(out), true), (Box::new(err), false)];
    for (from, to_stdout) in streams {
        let p = Arc::clone(&panics);
        let done = done.clone();
        thread::spawn(move || {
            if to_stdout {
                echo(from, std::io::stdout(), &p);
            } else {
                echo(from, std::io::stderr(), &p);
            }
            let _ = done.send(());
        });
    }
    let status = child.wait().context("waiting for the tests")?;
    let deadline = Instant::now() + Duration::from_secs(10);
    for _ in 0..2 {
        let left = deadline.saturating_duration_since(Instant::now());
        if ended.recv_timeout(left).is_err() {
            break;
        }
    }
    let p = std::mem::take(&mut *panics.lock().expect("panics lock"));
    Ok(Run {
        status,
        panics: p.blocks,
        panics_not_kept: p.more,
    })
}

/// A finished test executable: how it ended and its panic messages.
pub(crate) struct Run {
    pub(crate) status: ExitStatus,
    pub(crate) panics: Vec<Vec<String>>,
    pub(crate) panics_not_kept: usize,
}

/// Print the failed runs' panic messages, last in the log.
pub(crate) fn print_failed(failed: &[(String, Run)]) {
    for (what, run) in failed {
        println!(
            "\n==== {what} failed ({}): {} panic message(s){} ====",
            run.status,
            run.panics.len(),
            if run.panics_not_kept > 0 {
                format!(" (and {} more not kept)", run.panics_not_kept)
            } else {
                String::new()
            }
        );
        for b in &run.panics {
            println!("{}\n", b.join("\n"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_message_without_the_backtrace() {
        let mut p = Panics::default();
        for l in [
            "lab: up in 1 s",
            "---- retry::a stdout ----",
            "thread 'retry::a' panicked at tests/tests/trace_lab/retry.rs:55:5:",
            "assertion `left == right` failed: cri-deadline-retry",
            "  left: false",
            " right: true",
            "stack backtrace:",
            "   0: rust_begin_unwind",
            "thread 'b' (7192) panicked at x.rs:1:1:",
            "boom",
            "note: run with `RUST_BACKTRACE=1`",
            "failures:",
        ] {
            p.line(l);
        }
        assert_eq!(
            p.blocks,
            vec![
                vec![
                    "thread 'retry::a' panicked at tests/tests/trace_lab/retry.rs:55:5:",
                    "assertion `left == right` failed: cri-deadline-retry",
                    "  left: false",
                    " right: true",
                ],
                vec!["thread 'b' (7192) panicked at x.rs:1:1:", "boom"],
            ]
        );
    }

    #[test]
    fn bounded() {
        let mut p = Panics::default();
        for i in 0..MAX_PANICS + 3 {
            p.line(&format!("thread 't{i}' panicked at x.rs:1:1:"));
            for _ in 0..MAX_LINES + 10 {
                p.line(&"x".repeat(MAX_LINE_CHARS * 2));
            }
        }
        assert_eq!(p.blocks.len(), MAX_PANICS);
        assert_eq!(p.more, 3);
        assert!(p.blocks.iter().all(|b| b.len() == MAX_LINES + 1));
        assert!(p.blocks[0][1].chars().count() == MAX_LINE_CHARS + " […]".chars().count());
    }
}
