//! The `kernels` part: what a write(2) of a process nri-trace does not
//! trace costs on each backend, in qemu on Debian's kernels (issue 34).
//! Each VM runs `nri-trace write-cost` with no probes, the tracepoint
//! backend and the fentry backend in turn, `rounds` times, so every figure
//! has its no-probe baseline in the same guest and the same run
//! (xtask/src/kernels.rs). qemu emulates the CPU here (tcg: /dev/kvm lacks
//! vmx/svm), which inflates every absolute time several times over; the
//! differences are what compare.

use std::collections::BTreeMap;

use anyhow::Result;

use super::rounds::{median, paired_diffs};
use crate::kernels::{boot_all, KernelRun};

/// The figures of one kernel: per (target, probes), ns per write in each
/// round, in round order.
pub(crate) struct KernelWriteCost {
    pub(crate) kernel: String,
    pub(crate) uname: String,
    pub(crate) ns: BTreeMap<(String, String), Vec<f64>>,
}

/// Boot every kernel with `rounds` rounds of write-cost.
pub(crate) fn write_cost(rounds: u32) -> Result<Vec<KernelWriteCost>> {
    let bin = crate::dist::run_dist()?;
    let runs = boot_all("all", &bin, false, rounds)?;
    Ok(runs.iter().map(figures).collect())
}

fn figures(r: &KernelRun) -> KernelWriteCost {
    let mut ns: BTreeMap<(String, String), Vec<f64>> = BTreeMap::new();
    for line in &r.write_cost {
        let (Some(target), Some(probes), Some(v)) = (
            line["target"].as_str(),
            line["probes"].as_str(),
            line["ns_per_write"].as_f64(),
        ) else {
            continue;
        };
        ns.entry((target.to_owned(), probes.to_owned()))
            .or_default()
            .push(v);
    }
    KernelWriteCost {
        kernel: r.kernel.clone(),
        uname: r.uname.clone(),
        ns,
    }
}

pub(crate) fn write_cost_section(runs: &[KernelWriteCost], rounds: u32) -> String {
    let mut s = format!(
        "## Kernels: what an untraced write(2) pays per backend (qemu)\n\n\
         `nri-trace write-cost` in each VM of `cargo xtask kernels` (static binary, one \
         vCPU, tcg): one-byte writes by a process nri-trace does not trace, timed in \
         batches (drains between them untimed), 50,000 per target, with no probes, then \
         the capture on the tracepoint backend, then on the fentry backend; {rounds} rounds \
         in that order, medians of the per-round differences against the same round's \
         no-probe figure. **qemu emulates the CPU (tcg): absolute times are several times \
         a real machine's; compare the differences.** 5.10 has no fentry backend (no \
         bpf_loop): its fentry column is empty.\n\n\
         | kernel | target | no probes (ns/write) | tracepoint: added ns | fentry: added ns |\n\
         | --- | --- | ---: | ---: | ---: |\n"
    );
    for k in runs {
        let targets: Vec<&String> = {
            let mut t: Vec<&String> = k.ns.keys().map(|(t, _)| t).collect();
            t.dedup();
            t
        };
        for target in targets {
            let get = |p: &str| k.ns.get(&(target.clone(), p.to_owned()));
            let Some(none) = get("none") else { continue };
            let added = |p: &str| {
                get(p).map_or_else(
                    || "-".to_owned(),
                    |v| format!("{:+.0}", median(&paired_diffs(v, none))),
                )
            };
            s += &format!(
                "| {} ({}) | {target} | {:.0} | {} | {} |\n",
                k.kernel,
                k.uname,
                median(none),
                added("tracepoint"),
                added("fentry"),
            );
        }
    }
    s
}
