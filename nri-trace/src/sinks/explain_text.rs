//! `nri-trace explain` output: the blocker in one sentence, then the
//! evidence, the expected next step, the teardown steps, the findings and
//! what this node's /proc shows of the pod's containers.

use std::io::{self, Write};

use serde::Serialize;

use crate::{
    capture::holders::Holder,
    engine::teardown::{Explanation, Verdict},
    output::sanitize,
};

/// What the node shows of one container of the pod.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ContainerFacts {
    pub id: String,
    pub name: String,
    /// Its rootfs mount points still mounted.
    pub rootfs: Vec<String>,
    /// Host processes holding the rootfs (cwd, root, open files).
    pub holders: Vec<Holder>,
    /// Its cgroup directory, if it still exists.
    pub cgroup: Option<String>,
    /// Processes still in that cgroup.
    pub processes: Vec<Holder>,
    /// Its processes the kernel saw sent SIGKILL and not exit, as /proc
    /// shows them now (gone ones are left out).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub signalled: Vec<Holder>,
}

/// The explanation with the node's facts, as `--format json` prints it.
#[derive(Debug, Clone, Serialize)]
pub struct Explained<'a> {
    #[serde(flatten)]
    pub explanation: &'a Explanation,
    /// `None`: the node was not inspected (`--no-proc`, or a pod gone).
    pub node: Option<&'a [ContainerFacts]>,
}

fn human(ns: u64) -> String {
    if ns >= 1_000_000_000 {
        format!("{:.1} s", ns as f64 / 1e9)
    } else {
        format!("{:.1} ms", ns as f64 / 1e6)
    }
}

/// " waiting in <wchan>", or nothing for a running process.
fn waiting_in(p: &Holder) -> String {
    if p.wchan.is_empty() || p.wchan == "0" {
        String::new()
    } else {
        format!(" waiting in {}", sanitize(&p.wchan))
    }
}

fn short(id: &str) -> &str {
    &id[..id.len().min(12)]
}

/// The sentence, completed with what the node shows when the teardown is
/// blocked or waiting: a process holding a rootfs, or still alive in a
/// container's cgroup.
pub fn sentence(e: &Explanation, node: Option<&[ContainerFacts]>) -> String {
    let mut s = sanitize(&e.sentence);
    if e.verdict == Verdict::Gone {
        return s;
    }
    for c in node.unwrap_or_default() {
        for p in &c.signalled {
            s.push_str(&format!(
                "; on this node pid {} ({}) is in state {}{}",
                p.pid,
                sanitize(&p.comm),
                p.state,
                waiting_in(p)
            ));
        }
        if let Some(h) = c.holders.first() {
            s.push_str(&format!(
                "; on this node pid {} ({}) holds container {}'s rootfs {} (its {}, state {})",
                h.pid,
                sanitize(&h.comm),
                sanitize(&c.name),
                sanitize(c.rootfs.first().map_or(&h.path, |r| r)),
                h.what,
                h.state
            ));
        }
        if let Some(p) = c.processes.first() {
            s.push_str(&format!(
                "; container {} still has {} process(es) in its cgroup, e.g. pid {} ({}) in state {}{}",
                sanitize(&c.name),
                c.processes.len(),
                p.pid,
                sanitize(&p.comm),
                p.state,
                waiting_in(p)
            ));
        }
    }
    s
}

pub fn text(
    w: &mut impl Write,
    e: &Explanation,
    node: Option<&[ContainerFacts]>,
) -> io::Result<()> {
    writeln!(w, "{}", sentence(e, node))?;
    writeln!(
        w,
        "  verdict: {}",
        match e.verdict {
            Verdict::Gone => "gone",
            Verdict::Blocked => "blocked",
            Verdict::Waiting => "waiting",
            Verdict::NotTornDown => "not torn down",
        }
    )?;
    if let Some(n) = &e.expected_next {
        write!(w, "  next: {}", sanitize(n))?;
        if let Some(t) = e.waited_ns {
            write!(w, ", waited for {}", human(t))?;
        }
        writeln!(w)?;
    }
    if !e.evidence.is_empty() {
        writeln!(w, "  evidence:")?;
        for l in &e.evidence {
            writeln!(w, "    {}", sanitize(l))?;
        }
    }
    if !e.steps.is_empty() {
        writeln!(w, "  teardown steps:")?;
        for s in &e.steps {
            writeln!(
                w,
                "    {:<17} {:<12} {:>9}  {}",
                s.method,
                sanitize(s.container.as_deref().unwrap_or("")),
                s.duration_ns.map(human).unwrap_or_else(|| "-".into()),
                sanitize(&s.outcome)
            )?;
            for h in &s.hooks {
                writeln!(w, "      NRI {}", sanitize(h))?;
            }
        }
    }
    if !e.kernel.is_empty() {
        writeln!(w, "  kernel (signals, exits, unmounts, removals):")?;
        for l in &e.kernel {
            writeln!(w, "    {}", sanitize(l))?;
        }
    }
    if !e.findings.is_empty() {
        writeln!(w, "  findings:")?;
        for f in &e.findings {
            writeln!(w, "    {}", sanitize(f))?;
        }
    }
    match node {
        None => {}
        Some([]) => writeln!(w, "  on this node: no container of the pod known")?,
        Some(cs) => {
            writeln!(w, "  on this node:")?;
            for c in cs {
                let mounted = if c.rootfs.is_empty() {
                    "rootfs not mounted".to_string()
                } else {
                    format!("rootfs {}", sanitize(&c.rootfs.join(", ")))
                };
                let cgroup = match &c.cgroup {
                    Some(g) => format!("cgroup {} ({} processes)", sanitize(g), c.processes.len()),
                    None => "no cgroup".into(),
                };
                writeln!(
                    w,
                    "    container {} ({}): {mounted}; {cgroup}",
                    sanitize(&c.name),
                    short(&c.id)
                )?;
                for h in c.signalled.iter().chain(&c.holders).chain(&c.processes) {
                    writeln!(
                        w,
                        "      pid {} ({}) {} {} state {} wchan {}",
                        h.pid,
                        sanitize(&h.comm),
                        h.what,
                        sanitize(&h.path),
                        h.state,
                        sanitize(&h.wchan)
                    )?;
                }
            }
        }
    }
    Ok(())
}
