//! The mix part: the system-wide syscall mix, and what each design would
//! cost over it (with the break-even share of probed syscalls, from the
//! probe part).

use std::{
    fs,
    os::unix::process::CommandExt,
    process::{Command, Stdio},
    time::Duration,
};

use anyhow::{bail, Result};

use super::{
    child::{signal, Proc},
    probe::{ProbeCost, State},
};

// ------------------------------------------------------- part d: the mix

/// x86_64 numbers of the syscalls nri-trace probes.
const PROBED: &[(u64, &str)] = &[
    (0, "read"),
    (1, "write"),
    (3, "close"),
    (19, "readv"),
    (20, "writev"),
    (32, "dup"),
    (33, "dup2"),
    (42, "connect"),
    (43, "accept"),
    (44, "sendto"),
    (45, "recvfrom"),
    (46, "sendmsg"),
    (47, "recvmsg"),
    (53, "socketpair"),
    (288, "accept4"),
    (292, "dup3"),
];

pub(super) struct Mix {
    seconds: u64,
    /// (syscall number, count), most frequent first.
    counts: Vec<(u64, u64)>,
}

impl Mix {
    fn total(&self) -> u64 {
        self.counts.iter().map(|c| c.1).sum()
    }
    fn probed(&self) -> u64 {
        self.counts
            .iter()
            .filter(|(nr, _)| PROBED.iter().any(|p| p.0 == *nr))
            .map(|c| c.1)
            .sum()
    }
    fn probed_share(&self) -> f64 {
        self.probed() as f64 / self.total().max(1) as f64
    }
}

/// Count syscalls by number, system-wide, for `seconds` (while `workload`
/// runs, if given).
pub(super) fn syscall_mix(seconds: u64, workload: Option<&str>) -> Result<Mix> {
    let prog = format!(
        "tracepoint:raw_syscalls:sys_enter {{ @[args->id] = count(); }} \
         interval:s:{seconds} {{ exit(); }}"
    );
    let mut bt = Proc::spawn(
        "bpftrace syscall count",
        Command::new("bpftrace").args(["-e", &prog]),
    )?;
    bt.wait_for("Attaching", Duration::from_mins(1))?;
    // Its own process group, so that the whole workload can be stopped.
    let mut load = match workload {
        Some(w) => Some(Proc::spawn(
            "mix workload",
            Command::new("sh").args(["-c", w]).process_group(0),
        )?),
        None => None,
    };
    eprintln!("bench: counting syscalls for {seconds} s");
    let st = bt.wait_exit(Duration::from_secs(seconds + 60));
    if let Some(l) = load.as_mut() {
        signal(l.pid(), "TERM");
        // The negative pid names the process group.
        let _ = Command::new("kill")
            .args(["-TERM", "--", &format!("-{}", l.pid())])
            .stderr(Stdio::null())
            .status();
        let _ = l.wait_exit(Duration::from_secs(10));
    }
    if !st?.success() {
        bail!("bpftrace syscall count failed{}", bt.tail());
    }
    let mut counts: Vec<(u64, u64)> = bt.seen.iter().filter_map(|l| parse_map_line(l)).collect();
    counts.sort_by_key(|c| std::cmp::Reverse(c.1));
    if counts.is_empty() {
        bail!("bpftrace counted no syscalls{}", bt.tail());
    }
    Ok(Mix { seconds, counts })
}

/// x86_64 syscall names by number, from the kernel headers (linux-libc-dev)
/// when they are installed, else only the probed ones.
fn syscall_names() -> std::collections::HashMap<u64, String> {
    let mut names: std::collections::HashMap<u64, String> =
        PROBED.iter().map(|(nr, n)| (*nr, n.to_string())).collect();
    let header = fs::read_to_string("/usr/include/x86_64-linux-gnu/asm/unistd_64.h");
    for l in header.unwrap_or_default().lines() {
        let mut w = l.split_whitespace();
        if let (Some("#define"), Some(name), Some(nr)) = (w.next(), w.next(), w.next()) {
            if let (Some(name), Ok(nr)) = (name.strip_prefix("__NR_"), nr.parse()) {
                names.insert(nr, name.to_string());
            }
        }
    }
    names
}

/// "@[1]: 1234" -> (1, 1234)
fn parse_map_line(l: &str) -> Option<(u64, u64)> {
    let rest = l.strip_prefix("@[")?;
    let (nr, count) = rest.split_once("]: ")?;
    Some((nr.trim().parse().ok()?, count.trim().parse().ok()?))
}

/// Break-even share p* of probed syscalls at which the two designs cost the
/// same: classic costs p*cp + (1-p)*cu, raw p*rp + (1-p)*ru.
fn break_even(classic: (f64, f64), raw: (f64, f64)) -> Option<f64> {
    let ((cp, cu), (rp, ru)) = (classic, raw);
    let denom = (cp - cu) - (rp - ru);
    if denom.abs() < 1e-9 {
        return None;
    }
    Some((ru - cu) / denom)
}

fn expected(cost: (f64, f64), p: f64) -> f64 {
    p * cost.0 + (1.0 - p) * cost.1
}

// ---------------------------------------------------------------- report

pub(super) fn fmt_break_even(classic: (f64, f64), raw: (f64, f64)) -> String {
    match break_even(classic, raw) {
        Some(x) if (0.0..=1.0).contains(&x) => format!("p* = {:.1} %", x * 100.0),
        _ => {
            // No crossing in [0, 1]: one design is cheaper at every mix.
            let cheaper = if expected(classic, 0.5) < expected(raw, 0.5) {
                "classic"
            } else {
                "raw"
            };
            format!("no crossing in [0, 1]: {cheaper} costs less at every share")
        }
    }
}

pub(super) fn mix_section(m: &Mix, p: Option<&ProbeCost>, workload: Option<&str>) -> String {
    let share = m.probed_share();
    let mut s = format!(
        "## Syscall mix\n\n\
         Counted system-wide for {} s with bpftrace (`tracepoint:raw_syscalls:sys_enter`){}. \
         This is the mix of this machine, not of a Kubernetes node.\n\n\
         {} syscalls, {} probed: probed share p = {:.1} %.\n\n\
         | syscall nr | name | probed | count | share |\n| ---: | --- | --- | ---: | ---: |\n",
        m.seconds,
        workload.map_or_else(
            || ", with no workload of its own (whatever else ran on the machine is in it)".into(),
            |w| format!(" while `{w}` ran")
        ),
        m.total(),
        m.probed(),
        share * 100.0
    );
    let names = syscall_names();
    for (nr, n) in m.counts.iter().take(15) {
        let name = names.get(nr).map_or("", String::as_str);
        let probed = if PROBED.iter().any(|p| p.0 == *nr) {
            "yes"
        } else {
            ""
        };
        s += &format!(
            "| {nr} | {name} | {probed} | {n} | {:.1} % |\n",
            *n as f64 * 100.0 / m.total() as f64
        );
    }
    if let Some(p) = p {
        s += "\nExpected added cost per syscall of an untraced process over this mix:\n\n\
              | design | ns per syscall |\n| --- | ---: |\n";
        for st in [
            State::NriTrace,
            State::FloorClassic,
            State::FloorRaw,
            State::FloorRawFiltered,
        ] {
            s += &format!(
                "| {} | {:+.1} |\n",
                st.label(),
                expected(p.added(st), share)
            );
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn break_even_of_crossing_lines() {
        // classic: probed +300, other +45; raw: +200 everywhere.
        let p = break_even((300.0, 45.0), (200.0, 200.0)).unwrap();
        assert!((expected((300.0, 45.0), p) - 200.0).abs() < 1e-9);
    }

    #[test]
    fn parses_bpftrace_map_lines() {
        assert_eq!(parse_map_line("@[1]: 1234"), Some((1, 1234)));
        assert_eq!(parse_map_line("Attaching 2 probes..."), None);
    }
}
