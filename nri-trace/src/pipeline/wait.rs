//! Waiting for the runtime: a live run started before it (a DaemonSet
//! starting at node boot, before containerd or CRI-O serves its sockets)
//! waits and attaches when it comes, instead of exiting.
//!
//! Two ways, by what the command line gives:
//! - the sockets (`--cri-socket` and `--nri-socket`): the capture session
//!   starts at once and the kernel tracks whoever binds them from the bind
//!   on, as it does for a runtime that restarts (capture/session/reattach.rs,
//!   `SessionConfig::wait_for_listeners`): nothing the runtime says is
//!   missed. [`Announce`] says what is awaited until it is served.
//! - nothing: the runtime is looked for as `watch` looks for it
//!   ([`Target::find`]) every [`POLL`] until one serves its CRI and NRI
//!   sockets ([`find_target`]); connections made in between are traced
//!   from where they are (docs/trace.md, "Started before the runtime").
//!
//! Either way the waiting is said on standard error once, then every
//! [`SAY_AGAIN`], naming the sockets and how to stop; a stop (a signal,
//! `--duration`) ends the wait.

use std::{
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use super::{
    live::Stage,
    target::{self, Target, TargetError},
    PipelineError, Stop,
};
use crate::capture::{CaptureEvent, ProcessEvent};

/// How often the runtime is looked for while none serves its sockets
/// (one read of /proc per look).
pub(crate) const POLL: Duration = Duration::from_millis(250);
/// How often a wait is said again.
pub(crate) const SAY_AGAIN: Duration = Duration::from_secs(30);
/// How long a runtime that serves its CRI socket is given to serve its NRI
/// socket too: containerd serves nri.sock a few ms after containerd.sock
/// (capture/session/reattach.rs, REATTACH_FAST_NS), so a runtime without one after
/// this has NRI disabled, which is the user's to fix.
pub(crate) const NRI_GRACE: Duration = Duration::from_secs(10);

/// How to stop waiting, at the end of every notice.
const HOW_TO_STOP: &str = "Ctrl-C stops; with --no-wait nri-trace exits instead of waiting";

/// What to say of `path` beside its name: its directory missing (a
/// runtime creates it when it starts; a wrong path stays missing).
fn directory_note(path: &Path) -> String {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() && !dir.exists() => format!(
            " (its directory {} does not exist yet: the runtime makes it when it starts; check \
             the path if it never comes)",
            dir.display()
        ),
        _ => String::new(),
    }
}

/// Whether a notice is due: the first at once, then every [`SAY_AGAIN`].
fn due(said: Option<Instant>, now: Instant) -> bool {
    said.is_none_or(|t| now.duration_since(t) >= SAY_AGAIN)
}

/// "still waiting (90 s): " after the first notice.
fn prefix(since: Instant, now: Instant, first: bool) -> String {
    if first {
        String::new()
    } else {
        format!(
            "still waiting ({} s): ",
            now.duration_since(since).as_secs()
        )
    }
}

/// The runtime found as [`Target::find`] finds it, waiting while none
/// runs (or the one starting serves its sockets not yet); `None` when
/// `stop` came first. Errors that waiting does not fix (several runtimes,
/// /proc unreadable, NRI still off after [`NRI_GRACE`]) are returned.
pub async fn find_target(
    cri: Option<PathBuf>,
    nri: Option<PathBuf>,
    stop: &Stop,
    say: &mut dyn FnMut(&str),
) -> Result<Option<Target>, TargetError> {
    let since = Instant::now();
    let mut said: Option<Instant> = None;
    let mut nri_missing_since: Option<Instant> = None;
    loop {
        if stop.requested() {
            return Ok(None);
        }
        let now = Instant::now();
        let e = match Target::find(cri.clone(), nri.clone()) {
            Ok(t) => {
                if said.is_some() {
                    say(&format!(
                        "nri-trace: the runtime came after {:.1} s",
                        since.elapsed().as_secs_f64()
                    ));
                }
                return Ok(Some(t));
            }
            Err(e) => e,
        };
        let what = match &e {
            TargetError::NoRuntime => "no containerd or CRI-O process runs yet: waiting for one \
                 to serve its CRI and NRI sockets (found as they are served; give --cri-socket \
                 and --nri-socket to trace them from their bind)"
                .to_string(),
            TargetError::NoCriSocket(r) => format!(
                "{} (pid {}) is starting: waiting for its CRI socket",
                target::runtime_name(r.kind),
                r.pid
            ),
            TargetError::NoNriSocket(r) => {
                let missing = *nri_missing_since.get_or_insert(now);
                if now.duration_since(missing) >= NRI_GRACE {
                    return Err(e);
                }
                format!(
                    "{} (pid {}) serves CRI {}: waiting up to {} s for its NRI socket",
                    target::runtime_name(r.kind),
                    r.pid,
                    r.cri_socket
                        .as_deref()
                        .map_or_else(String::new, |p| p.display().to_string()),
                    NRI_GRACE.as_secs()
                )
            }
            _ => return Err(e),
        };
        if due(said, now) {
            say(&format!(
                "nri-trace: {}{what}; {HOW_TO_STOP}",
                prefix(since, now, said.is_none())
            ));
            said = Some(now);
        }
        tokio::select! {
            () = stop.wait() => return Ok(None),
            () = tokio::time::sleep(POLL) => {}
        }
    }
}

/// A socket a live session waits for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Awaited {
    /// "CRI", "NRI", or "socket".
    pub what: &'static str,
    pub path: PathBuf,
}

impl Awaited {
    /// The sockets of `unserved` (a session's, see
    /// `capture::session::AttachState::unserved`) named as `target` names
    /// them.
    pub fn of(unserved: &[PathBuf], target: Option<&Target>) -> Vec<Awaited> {
        unserved
            .iter()
            .map(|p| Awaited {
                what: match target {
                    Some(t) if t.cri == *p => "CRI",
                    Some(t) if t.nri == *p => "NRI",
                    _ => "socket",
                },
                path: p.clone(),
            })
            .collect()
    }
}

/// What runs on a stage once every awaited socket is served.
pub type OnServed<S> = Box<dyn FnOnce(&mut S)>;

/// A [`Stage`] that says, while its session waits for sockets nothing
/// serves yet, what it waits for (at once, then every [`SAY_AGAIN`]), and
/// when each is served; once all are, `on_served` runs on the stage (the
/// TUI opens then, so these notices do not write over it).
pub struct Announce<S: Stage> {
    inner: S,
    pending: Vec<Awaited>,
    since: Instant,
    said: Option<Instant>,
    say: Box<dyn FnMut(&str)>,
    on_served: Option<OnServed<S>>,
}

impl<S: Stage> Announce<S> {
    /// `inner`, waiting for `pending` (said now, when any).
    pub fn new(inner: S, pending: Vec<Awaited>, say: Box<dyn FnMut(&str)>) -> Self {
        let mut a = Announce {
            inner,
            pending,
            since: Instant::now(),
            said: None,
            say,
            on_served: None,
        };
        a.say_waiting(a.since);
        a
    }

    /// Run `f` on the stage once every awaited socket is served (at once
    /// when none is awaited).
    #[must_use]
    pub fn on_served(mut self, f: OnServed<S>) -> Self {
        if self.pending.is_empty() {
            f(&mut self.inner);
        } else {
            self.on_served = Some(f);
        }
        self
    }

    /// Whether a socket is still awaited.
    pub fn waiting(&self) -> bool {
        !self.pending.is_empty()
    }

    fn say_waiting(&mut self, now: Instant) {
        if self.pending.is_empty() || !due(self.said, now) {
            return;
        }
        let list = self
            .pending
            .iter()
            .map(|a| format!("{} {}", a.what, a.path.display()))
            .collect::<Vec<_>>()
            .join(" and ");
        // Each missing directory once (both sockets are often in one).
        let mut notes: Vec<String> = self
            .pending
            .iter()
            .map(|a| directory_note(&a.path))
            .filter(|n| !n.is_empty())
            .collect();
        notes.dedup();
        let list = format!("{list}{}", notes.concat());
        let first = self.said.is_none();
        (self.say)(&format!(
            "nri-trace: {}waiting for the runtime to serve {list} (traced from its bind); \
             {HOW_TO_STOP}",
            prefix(self.since, now, first)
        ));
        self.said = Some(now);
    }
}

impl<S: Stage> Stage for Announce<S> {
    type Output = S::Output;

    fn on_capture(&mut self, ev: &CaptureEvent) -> Result<(), PipelineError> {
        if let CaptureEvent::Process(ProcessEvent::Listening { tgid, path, .. }) = ev {
            if let Some(i) = self.pending.iter().position(|a| a.path == *path) {
                let a = self.pending.remove(i);
                (self.say)(&format!(
                    "nri-trace: {} {} is served by pid {tgid} after {:.1} s: tracing it",
                    a.what,
                    a.path.display(),
                    self.since.elapsed().as_secs_f64()
                ));
                if self.pending.is_empty() {
                    if let Some(f) = self.on_served.take() {
                        f(&mut self.inner);
                    }
                }
            }
        }
        self.inner.on_capture(ev)
    }

    fn idle(&mut self) -> Result<(), PipelineError> {
        self.say_waiting(Instant::now());
        self.inner.idle()
    }

    fn finish(self) -> Result<S::Output, PipelineError> {
        self.inner.finish()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::basic_types::Timestamp;

    /// Counts what it is given.
    #[derive(Default)]
    struct Count {
        events: usize,
        served: bool,
    }

    impl Stage for Count {
        type Output = (usize, bool);
        fn on_capture(&mut self, _: &CaptureEvent) -> Result<(), PipelineError> {
            self.events += 1;
            Ok(())
        }
        fn idle(&mut self) -> Result<(), PipelineError> {
            Ok(())
        }
        fn finish(self) -> Result<(usize, bool), PipelineError> {
            Ok((self.events, self.served))
        }
    }

    fn listening(path: &str) -> CaptureEvent {
        CaptureEvent::Process(ProcessEvent::Listening {
            ts: Timestamp {
                mono_ns: 1,
                wall_ns: 1,
            },
            tgid: 42,
            path: path.into(),
        })
    }

    #[test]
    fn says_what_it_waits_for_and_when_each_is_served() {
        let said = Arc::new(Mutex::new(Vec::<String>::new()));
        let log = Arc::clone(&said);
        let pending = vec![
            Awaited {
                what: "CRI",
                path: "/nonexistent-dir-nri-trace/containerd.sock".into(),
            },
            Awaited {
                what: "NRI",
                path: "/run/nri.sock".into(),
            },
        ];
        let a = Announce::new(
            Count::default(),
            pending,
            Box::new(move |s| log.lock().unwrap().push(s.to_string())),
        )
        .on_served(Box::new(|c: &mut Count| c.served = true));
        let mut a = a;
        {
            let said = said.lock().unwrap();
            assert_eq!(said.len(), 1, "{said:?}");
            assert!(said[0].contains("CRI /nonexistent-dir-nri-trace/containerd.sock"));
            assert!(said[0].contains("its directory /nonexistent-dir-nri-trace does not exist"));
            assert!(said[0].contains("NRI /run/nri.sock"));
            assert!(said[0].contains("--no-wait"));
        }
        // Not said again before SAY_AGAIN.
        a.idle().unwrap();
        assert_eq!(said.lock().unwrap().len(), 1);
        a.on_capture(&listening("/run/other.sock")).unwrap();
        a.on_capture(&listening("/run/nri.sock")).unwrap();
        assert!(a.waiting());
        a.on_capture(&listening("/nonexistent-dir-nri-trace/containerd.sock"))
            .unwrap();
        assert!(!a.waiting());
        let (events, served) = a.finish().unwrap();
        assert_eq!(events, 3, "every event still reaches the stage");
        assert!(served, "on_served ran once both were served");
        let said = said.lock().unwrap();
        assert_eq!(said.len(), 3, "{said:?}");
        assert!(said[1].starts_with("nri-trace: NRI /run/nri.sock is served by pid 42"));
        assert!(said[2].starts_with("nri-trace: CRI /nonexistent-dir-nri-trace/containerd.sock"));
    }

    #[test]
    fn a_missing_directory_is_named_once() {
        let said = Arc::new(Mutex::new(Vec::<String>::new()));
        let log = Arc::clone(&said);
        let pending = ["containerd.sock", "nri.sock"]
            .map(|n| Awaited {
                what: "socket",
                path: Path::new("/nonexistent-dir-nri-trace/run").join(n),
            })
            .to_vec();
        let _a = Announce::new(
            Count::default(),
            pending,
            Box::new(move |s| log.lock().unwrap().push(s.to_string())),
        );
        let said = said.lock().unwrap();
        assert_eq!(said[0].matches("does not exist yet").count(), 1, "{said:?}");
    }

    #[test]
    fn nothing_awaited_says_nothing_and_serves_at_once() {
        let said = Arc::new(Mutex::new(0));
        let n = Arc::clone(&said);
        let a = Announce::new(
            Count::default(),
            vec![],
            Box::new(move |_| *n.lock().unwrap() += 1),
        )
        .on_served(Box::new(|c: &mut Count| c.served = true));
        assert!(!a.waiting());
        assert_eq!(a.finish().unwrap(), (0, true));
        assert_eq!(*said.lock().unwrap(), 0);
    }

    #[test]
    fn notices_are_due_at_once_then_every_say_again() {
        let t = Instant::now();
        assert!(due(None, t));
        assert!(!due(Some(t), t + SAY_AGAIN / 2));
        assert!(due(Some(t), t + SAY_AGAIN));
        assert_eq!(prefix(t, t + Duration::from_secs(61), true), "");
        assert_eq!(
            prefix(t, t + Duration::from_secs(61), false),
            "still waiting (61 s): "
        );
    }
}
