//! `-o text`: the story of each pod for a person at a terminal.
//!
//! Each CRI call is one line naming its pod (from its own metadata, or
//! from the ids earlier records showed: `engine::pod_index`), with the NRI
//! hooks it caused indented under it, one line each; a finding is one line
//! where it happened; a pod gets a closing line with its totals when it is
//! removed. Records come out of
//! the engine as they settle (a long call after the short ones begun after
//! it): a small reorder buffer prints them in start order, each once the
//! engine says nothing that started before it is still to come
//! (`TraceEngine::settled_before`), or after [`HOLD_NS`] of capture time
//! (a hung call does not hold the others back), or when more than
//! [`MAX_HELD`] are held. Kernel events are
//! shown where they explain something (`engine::sandbox_rules::explains`)
//! unless `--kernel all`. A plugin shows as its registration
//! (RegisterPlugin, Configure with what it subscribed to, Synchronize) and
//! in its hooks; a plugin going gets a line (folded into the runtime's
//! when the runtime exited with it). Plugin identities and CRI
//! connections are left out (`-o json`, the TUI and `debug` show them).
//! The latency tables close the output.

use std::{
    collections::BTreeMap,
    io::{self, BufWriter, Write},
};

use super::{cri_lines, lines, nri_lines};
use crate::{
    engine::{
        correlate::{CriSpan, NoCause},
        findings::{Certainty, Violation},
        hook_latency::HookSpan,
        pod_index::{PodIndex, PodName},
        pods::PodModel,
        record::Record,
        sandbox_rules,
    },
    human::{clock, duration, duration_opt, sanitize},
    model::{cri_call::Identified, observation::Observation},
    pipeline::{Ending, Progress, Sink},
};

/// Longest a record is held (capture time) for records that started
/// before it and settle after it.
pub const HOLD_NS: u64 = 10_000_000_000;
/// Most records held at once; past it the oldest is printed.
pub const MAX_HELD: usize = 512;

/// Records as text lines on `W`.
pub struct TextSink<W: Write> {
    out: BufWriter<W>,
    /// Print the latency tables at the end.
    tables: bool,
    /// Every kernel event, not only those that explain something.
    all_kernel: bool,
    pods: PodIndex,
    /// Per-pod totals for the closing line.
    model: PodModel,
    /// The reorder buffer: (start, arrival) -> record.
    held: BTreeMap<(u64, u64), Record>,
    arrivals: u64,
    /// The latest capture time a record showed.
    latest_ns: u64,
    /// Nothing that started before this is still to come.
    settled_ns: u64,
    /// Plugins whose connection closed as the runtime exited, for its line.
    gone_with_runtime: Vec<String>,
}

impl<W: Write> TextSink<W> {
    pub fn new(w: W, tables: bool, all_kernel: bool) -> Self {
        TextSink {
            out: BufWriter::new(w),
            tables,
            all_kernel,
            pods: PodIndex::new(),
            model: PodModel::new(),
            held: BTreeMap::new(),
            arrivals: 0,
            latest_ns: 0,
            settled_ns: 0,
            gone_with_runtime: Vec::new(),
        }
    }

    /// Print the held records that started before everything still to
    /// come, or [`HOLD_NS`] before `now_ns`, and the oldest while more
    /// than [`MAX_HELD`] are held.
    fn release(&mut self, now_ns: u64) -> io::Result<()> {
        while let Some((&(start, _), _)) = self.held.first_key_value() {
            let due = start < self.settled_ns || start.saturating_add(HOLD_NS) <= now_ns;
            if !due && self.held.len() <= MAX_HELD {
                break;
            }
            let (_, r) = self.held.pop_first().expect("a first entry");
            self.print(&r)?;
        }
        Ok(())
    }

    /// Whether `r` is told by other lines or left to other outputs: a
    /// plugin's identity (its hook lines name it), a teardown hook still
    /// waiting (its hook line comes when it ends), a CRI connection; a
    /// plugin gone with the runtime (the runtime's line names it).
    fn told_elsewhere(&mut self, r: &Record) -> bool {
        match r {
            Record::Observed(
                Observation::NriPlugin { .. }
                | Observation::NriPending(_)
                | Observation::CriConnection { .. },
            ) => true,
            Record::Observed(Observation::NriPluginGone { ts, plugin, .. }) => {
                let with_runtime = self.held.values().any(|h| {
                    matches!(h, Record::Observed(Observation::RuntimeExited { ts: t, .. }) if t == ts)
                });
                if with_runtime {
                    self.gone_with_runtime.push(sanitize(&plugin.label()));
                }
                with_runtime
            }
            _ => false,
        }
    }

    fn print(&mut self, r: &Record) -> io::Result<()> {
        self.model.on_record(r);
        if self.told_elsewhere(r) {
            return Ok(());
        }
        let pod = self.pods.pod_of(r);
        match r {
            Record::CriSpan(s) => {
                self.span(s, pod.as_ref())?;
                if let Some(p) = pod {
                    if s.call.method.as_deref() == Some("RemovePodSandbox")
                        && s.call.outcome.is_ok()
                    {
                        self.closing(&p)?;
                    }
                }
                Ok(())
            }
            Record::NriUncaused(u) => {
                write!(self.out, "{}  ", when(&u.span))?;
                hook_line(&mut self.out, &u.span, pod.as_ref())?;
                match u.no_cri_cause {
                    // What the plugin said (its name, what it subscribed
                    // to, the pods it was told of).
                    NoCause::PluginLifecycle => {
                        writeln!(self.out, "  {}", sanitize(&u.span.call.summary))
                    }
                    NoCause::NoCriCallInFlight => writeln!(self.out, "  (no CRI call in flight)"),
                }
            }
            Record::Violation(v) => finding_line(&mut self.out, v),
            Record::Observed(Observation::RuntimeExited { ts, pid }) => {
                let gone = std::mem::take(&mut self.gone_with_runtime);
                write!(self.out, "{} == runtime pid {pid} exited", clock(ts))?;
                if !gone.is_empty() {
                    write!(
                        self.out,
                        " (its plugins' connections closed: {})",
                        gone.join(", ")
                    )?;
                }
                writeln!(self.out)
            }
            Record::Observed(o) => lines::observation_text(&mut self.out, o),
        }
    }

    fn span(&mut self, s: &CriSpan, pod: Option<&PodName>) -> io::Result<()> {
        let c = &s.call;
        let when = c.start.or(c.end).map(|t| clock(&t)).unwrap_or_default();
        let method = match (&c.method, &c.identified) {
            (Some(m), _) => sanitize(m),
            // Hidden by HPACK and not recovered: the candidates are in
            // `-o json`.
            (None, _) => "?".into(),
        };
        let mut subject = pod.map(|p| sanitize(&p.to_string())).unwrap_or_else(|| {
            c.sandbox_id
                .as_deref()
                .map(|id| format!("sandbox {}", short(id)))
                .unwrap_or_default()
        });
        if let Some(k) = &c.container {
            subject.push('/');
            subject.push_str(&sanitize(&k.name));
        } else if let Some(id) = &c.container_id {
            subject.push_str(&format!(" container {}", short(id)));
        }
        write!(
            self.out,
            "{when}  {method:<24} {subject:<44} {:>8}  {}",
            duration_opt(c.duration_ns),
            cri_lines::outcome(c)
        )?;
        if let Some(p) = s.nri_permille {
            write!(
                self.out,
                "  NRI {} ({}.{}%)",
                duration(s.nri_ns),
                p / 10,
                p % 10
            )?;
        }
        if c.partial {
            write!(self.out, "  [began before the trace]")?;
        }
        if let Identified::Inferred { evidence } = &c.identified {
            write!(self.out, "  [method inferred: {}]", sanitize(evidence))?;
        }
        writeln!(self.out)?;
        for h in &s.hooks {
            write!(self.out, "{:17}", "")?;
            hook_line(&mut self.out, h, None)?;
            writeln!(self.out)?;
        }
        Ok(())
    }

    /// The pod's closing line: its totals.
    fn closing(&mut self, p: &PodName) -> io::Result<()> {
        // The pod of that name seen last (a pod recreated under its name
        // is another pod).
        let Some(v) = self
            .model
            .pods()
            .filter(|v| v.namespace == p.namespace && v.name == p.name)
            .max_by_key(|v| v.last_seen.map(|t| t.mono_ns))
        else {
            return Ok(());
        };
        writeln!(
            self.out,
            "── pod {} removed: {} CRI calls, {} in CRI, {} in NRI hooks, {} findings",
            sanitize(&p.to_string()),
            v.timeline.len(),
            duration(v.cri_ns),
            duration(v.nri_ns),
            v.findings
        )
    }
}

fn short(id: &str) -> &str {
    id.get(..12).unwrap_or(id)
}

fn when(h: &HookSpan) -> String {
    h.call
        .start
        .or(h.call.end)
        .map(|t| clock(&t))
        .unwrap_or_default()
}

/// An NRI hook: `NRI HOOK PLUGIN [POD] OWN OUTCOME [queued]` (no newline).
fn hook_line(w: &mut impl Write, h: &HookSpan, pod: Option<&PodName>) -> io::Result<()> {
    let hook = if h.call.partial {
        "(response only)".to_string()
    } else {
        sanitize(h.hook.as_str())
    };
    write!(w, "NRI {hook:<26} {:<20}", sanitize(&h.call.plugin.label()))?;
    if let Some(p) = pod {
        write!(w, " {:<32}", sanitize(&p.to_string()))?;
    }
    write!(
        w,
        " {:>8}  {}",
        duration_opt(h.own_ns),
        nri_lines::outcome_text(&h.call.outcome)
    )?;
    if let Some(q) = h.queued_ns.filter(|q| *q > 0) {
        write!(w, "  [queued {}]", duration(q))?;
    }
    Ok(())
}

/// A finding on one line: severity, rule, pod, plugin, what, and why it
/// is uncertain (the evidence is in `-o json`, the report and the TUI).
fn finding_line(w: &mut impl Write, v: &Violation) -> io::Result<()> {
    write!(
        w,
        "{}  !! {:?} {} [{}",
        clock(&v.ts),
        v.severity,
        v.rule,
        sanitize(v.pod.as_deref().unwrap_or("-"))
    )?;
    if let Some(p) = &v.plugin {
        write!(w, ", {}", sanitize(p))?;
    }
    write!(w, "]: {}", sanitize(&v.message))?;
    if let Certainty::Uncertain { why } = &v.certainty {
        write!(w, " (uncertain: {})", sanitize(why))?;
    }
    writeln!(w)
}

impl<W: Write> Sink for TextSink<W> {
    fn record(&mut self, r: &Record) -> io::Result<()> {
        self.pods.learn(r);
        if let Record::Observed(Observation::Sandbox(e)) = r {
            if !self.all_kernel && !sandbox_rules::explains(e) {
                return Ok(());
            }
        }
        let start = match r {
            Record::CriSpan(s) => s.call.start.or(s.call.end),
            Record::NriUncaused(u) => u.span.call.start.or(u.span.call.end),
            _ => r.ts(),
        }
        .map_or(self.latest_ns, |t| t.mono_ns);
        if let Some(t) = r.ts() {
            self.latest_ns = self.latest_ns.max(t.mono_ns);
        }
        self.arrivals += 1;
        self.held.insert((start, self.arrivals), r.clone());
        self.release(self.latest_ns)
    }

    fn settled(&mut self, before_ns: u64) -> io::Result<()> {
        self.settled_ns = before_ns;
        self.release(self.latest_ns)
    }

    fn idle(&mut self, p: &Progress) -> io::Result<()> {
        self.release(p.now_ns.unwrap_or(0).max(self.latest_ns))?;
        self.out.flush()
    }

    fn finish(&mut self, end: &Ending) -> io::Result<()> {
        self.release(u64::MAX)?;
        if self.tables {
            writeln!(self.out)?;
            lines::summary_text(&mut self.out, &end.tables.hooks, &end.tables.methods)?;
        }
        self.out.flush()
    }
}
