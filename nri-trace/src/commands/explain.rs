//! `nri-trace explain POD FILE`: the pod's teardown in a saved file, and
//! what this node still holds of it.

use std::io::Write;

use anyhow::{bail, Result};
use nri_trace::{
    capture::session,
    engine::{contract::ContractConfig, teardown::Verdict},
    pipeline::{replay, source, Pipeline},
    sinks::explain::{self, TeardownSink},
};

use crate::cli::{args::LineOutput, ExplainArgs};

pub(crate) fn run(a: ExplainArgs) -> Result<()> {
    let src = source::open(&super::record::input(a.file)?)?;
    let name = src.name().to_string();
    let mut p = Pipeline::new(src.session(), ContractConfig::default());
    let (sink, log) = TeardownSink::new();
    p.add_sink(Box::new(sink));
    let r = replay::run(src, p)?;
    super::replay::warn(&name, &r);
    let log = log.borrow();
    let inspect = !a.no_proc;
    // On the node, "now" is now (waits run up to this moment), when the
    // recording is from this boot: the same wall-minus-monotonic offset.
    let (last, offset) = log.last_seen();
    let now = session::monotonic_ns();
    let same_boot = (offset - session::wall_offset_ns()).abs() < 1_000_000_000;
    let at = if inspect && same_boot && now >= last {
        now
    } else {
        0
    };
    let Some(e) = log.explain(&a.pod, at) else {
        let known = log.pods();
        let listed = if known.is_empty() {
            String::new()
        } else {
            format!(
                ": {}",
                known
                    .iter()
                    .take(10)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        };
        bail!(
            "no call of pod {:?} in {name} ({} pods seen{listed}): give namespace/name, the \
             name, or the sandbox id",
            a.pod,
            known.len()
        );
    };
    let facts = (inspect && e.verdict != Verdict::Gone).then(|| explain::node_facts(&e));
    let mut w = std::io::BufWriter::new(std::io::stdout().lock());
    match a.output {
        LineOutput::Text => explain::text(&mut w, &e, facts.as_deref())?,
        LineOutput::Json => explain::json(&mut w, &e, facts.as_deref())?,
    }
    w.flush()?;
    Ok(())
}
