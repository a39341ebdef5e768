//! Checks of nri-trace's outputs shared by the fixture tests (cli.rs) and
//! the live lab tests (lab_trace): `-o text` against the `-o json` of the
//! same run (every CRI call and every hook once, in start order per pod,
//! within the line budget of issue 19), and filters against the
//! unfiltered output.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde_json::Value;

/// The JSON lines of an output.
pub(crate) fn json_lines(bytes: &[u8]) -> Vec<Value> {
    bytes
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).expect("a JSON line"))
        .collect()
}

/// HH:MM:SS.micros of a JSON timestamp, as text output writes it.
fn clock(ts: &Value) -> Option<String> {
    let wall = ts["wall_ns"].as_u64()?;
    let secs = wall / 1_000_000_000;
    let day = secs % 86_400;
    Some(format!(
        "{:02}:{:02}:{:02}.{:06}",
        day / 3600,
        day / 60 % 60,
        day % 60,
        (wall % 1_000_000_000) / 1000
    ))
}

/// A JSON line's plugin as nri-trace labels it (`PluginId::label`).
pub(crate) fn plugin_label(p: &Value) -> String {
    match (p["index"].as_str(), p["name"].as_str()) {
        (Some(i), Some(n)) => format!("{i}-{n}"),
        (None, Some(n)) => n.to_string(),
        _ => match (p["comm"].as_str(), p["pid"].as_u64()) {
            (Some(c), Some(pid)) => format!("{c}[{pid}]"),
            (None, Some(pid)) => format!("pid {pid}"),
            _ => "?".into(),
        },
    }
}

/// What the JSON of a run holds, counted.
#[derive(Debug, Default)]
pub(crate) struct Counts {
    pub cri: usize,
    pub hooks: usize,
    pub findings: usize,
    pub pods: usize,
    pub table_rows: (usize, usize),
    /// (clock, method) of each CRI call.
    pub cri_calls: BTreeMap<(String, String), usize>,
    /// (plugin, hook) of each hook delivery.
    pub hook_calls: BTreeMap<(String, String), usize>,
    /// The CRI calls of each client (`comm[pid]`, or `pid N`).
    pub by_client: BTreeMap<String, usize>,
    /// The steady-state polls (nri-trace's sinks/polls.rs: a read-only
    /// method or ExecSync, ok, no hook), which text counts per client and
    /// method instead of a line each: (client, method) -> calls. Not in
    /// `cri_calls` nor `by_client`.
    pub polls: BTreeMap<(String, String), usize>,
}

/// Whether a `cri_span` JSON line is a poll text summarizes.
fn is_poll(l: &Value) -> bool {
    let method = l["method"]
        .as_str()
        .and_then(nri_trace::model::CriMethod::from_name);
    l["outcome"]["kind"] == "ok"
        && l["hooks"].as_array().is_none_or(Vec::is_empty)
        && method.is_some_and(|m| m.is_read_only() || m == nri_trace::model::CriMethod::ExecSync)
}

/// A CRI client as text names it (`CriClient::label`).
fn client_label(c: &Value) -> Option<String> {
    let pid = c["pid"].as_u64()?;
    Some(match c["comm"].as_str() {
        Some(comm) => format!("{comm}[{pid}]"),
        None => format!("pid {pid}"),
    })
}

pub(crate) fn counts(json: &[Value]) -> Counts {
    let mut c = Counts::default();
    let mut pods = BTreeSet::new();
    let hook = |c: &mut Counts, pods: &mut BTreeSet<(String, String)>, h: &Value| {
        c.hooks += 1;
        let name = if h["partial"] == true {
            "(response only)".to_string()
        } else {
            h["hook"].as_str().unwrap_or("?").to_string()
        };
        *c.hook_calls
            .entry((plugin_label(&h["plugin"]), name))
            .or_default() += 1;
        if let Some(n) = h["pod"]["name"].as_str() {
            pods.insert((
                h["pod"]["namespace"].as_str().unwrap_or("").to_string(),
                n.to_string(),
            ));
        }
    };
    for l in json {
        match l["type"].as_str() {
            Some("cri_span") if is_poll(l) => {
                c.cri += 1;
                let by = client_label(&l["client"]).unwrap_or_else(|| "an".into());
                let method = l["method"].as_str().unwrap_or("?").to_string();
                *c.polls.entry((by, method)).or_default() += 1;
            }
            Some("cri_span") => {
                c.cri += 1;
                let when = clock(&l["start"])
                    .or_else(|| clock(&l["end"]))
                    .unwrap_or_default();
                let method = l["method"].as_str().unwrap_or("?").to_string();
                *c.cri_calls.entry((when, method)).or_default() += 1;
                if let Some(by) = client_label(&l["client"]) {
                    *c.by_client.entry(by).or_default() += 1;
                }
                if let Some(n) = l["pod"]["name"].as_str() {
                    pods.insert((
                        l["pod"]["namespace"].as_str().unwrap_or("").to_string(),
                        n.to_string(),
                    ));
                }
                for h in l["hooks"].as_array().into_iter().flatten() {
                    hook(&mut c, &mut pods, h);
                }
            }
            Some("nri_uncaused") => hook(&mut c, &mut pods, l),
            Some("violation") => c.findings += 1,
            Some("cri_method_summary") => c.table_rows.0 += 1,
            Some("hook_summary") => c.table_rows.1 += 1,
            _ => {}
        }
    }
    c.pods = pods.len();
    c
}

/// The lines the latency tables take: a blank line, then each table's
/// header and rows (or its one "no ... seen" line), separated by a blank
/// line (sinks/lines.rs `summary_text`).
pub(crate) fn table_lines(c: &Counts) -> usize {
    let (m, h) = c.table_rows;
    1 + if m == 0 { 1 } else { 1 + m } + 1 + if h == 0 { 1 } else { 1 + h }
}

/// A line of text output starting with a capture clock.
fn starts_with_clock(l: &str) -> bool {
    let b = l.as_bytes();
    b.len() > 15
        && b[2] == b':'
        && b[5] == b':'
        && b[8] == b'.'
        && b[..2].iter().all(u8::is_ascii_digit)
}

/// What `-o text` printed, read back.
#[derive(Debug, Default)]
pub(crate) struct Text {
    pub lines: usize,
    /// Lines of events outside any CRI call: kernel events (`~~`), a
    /// plugin going (`**`), the runtime exiting or back (`==`).
    pub outside: usize,
    /// Of those, kernel lines that go on with an earlier one's retry loop
    /// (the same event, `(again N times ...)` aside) after a call's line
    /// came between them: the shim's busy unmount outlasting the
    /// StopContainer it failed, by as long as the machine was slow.
    pub loops_continued: usize,
    pub cri_calls: BTreeMap<(String, String), usize>,
    pub hook_calls: BTreeMap<(String, String), usize>,
    /// The CRI call lines of each client (`  by comm[pid]`).
    pub by_client: BTreeMap<String, usize>,
    /// Per pod (the subject's namespace/name), the clocks of its CRI calls
    /// in the order printed.
    pub per_pod: HashMap<String, Vec<String>>,
    /// The poll summary lines (`..`) and what they count: (client,
    /// method) -> calls.
    pub poll_lines: usize,
    pub polls: BTreeMap<(String, String), usize>,
}

/// The client text names after `by ` (`comm[pid]` or `pid N`, then the
/// unit or cgroup in parentheses), as [`client_label`] has it.
fn text_client(after_by: &str) -> String {
    match after_by.strip_prefix("pid ") {
        Some(pid) => format!("pid {}", pid.split_whitespace().next().unwrap_or("")),
        None => after_by.split_whitespace().next().unwrap_or("").to_string(),
    }
}

pub(crate) fn read_text(text: &str) -> Text {
    let mut t = Text::default();
    let mut kernel_seen: BTreeSet<String> = BTreeSet::new();
    for l in text.lines() {
        t.lines += 1;
        let hook_fields = if let Some(rest) = l.strip_prefix(&" ".repeat(17)) {
            rest.strip_prefix("NRI ")
        } else if starts_with_clock(l) {
            l[15..].trim_start().strip_prefix("NRI ")
        } else {
            None
        };
        if let Some(rest) = hook_fields {
            let mut w = rest.split_whitespace();
            let hook = w.next().unwrap_or("");
            let (hook, plugin) = if hook == "(response" {
                w.next();
                ("(response only)".to_string(), w.next().unwrap_or(""))
            } else {
                (hook.to_string(), w.next().unwrap_or(""))
            };
            *t.hook_calls.entry((plugin.to_string(), hook)).or_default() += 1;
            continue;
        }
        if !starts_with_clock(l) {
            continue;
        }
        let mut w = l.split_whitespace();
        let when = w.next().unwrap_or("").to_string();
        let method = w.next().unwrap_or("");
        // `CLOCK  .. N polls since CLOCK by CLIENT [(UNIT)]: M n, M n
        // (slowest D)`.
        if method == ".." {
            t.poll_lines += 1;
            let (head, list) = l.split_once("): ").map_or_else(
                || l.split_once(": ").unwrap_or((l, "")),
                |(h, rest)| (h, rest),
            );
            let by = text_client(head.split_once(" by ").map_or("", |(_, b)| b));
            let list = list.rsplit_once(" (slowest ").map_or(list, |(a, _)| a);
            for item in list.split(", ") {
                if let Some((m, n)) = item.rsplit_once(' ') {
                    *t.polls.entry((by.clone(), m.to_string())).or_default() +=
                        n.parse::<usize>().unwrap_or(0);
                }
            }
            continue;
        }
        if matches!(method, "**" | "~~" | "==") {
            t.outside += 1;
            if method == "~~" {
                let event = l.split_once(" ~~ ").map_or("", |(_, e)| e);
                let event = event.split(" (again ").next().unwrap_or(event);
                if !kernel_seen.insert(event.to_string()) {
                    t.loops_continued += 1;
                }
            }
            continue;
        }
        // Not a CRI call either: findings, uncaused hooks.
        if matches!(method, "!!" | "NRI") {
            continue;
        }
        *t.cri_calls
            .entry((when.clone(), method.to_string()))
            .or_default() += 1;
        // `  by comm[pid]` (then the unit or cgroup, in parentheses), after
        // the outcome and before the kernel events.
        if let Some((_, rest)) = l.split_once("  by ") {
            *t.by_client.entry(text_client(rest)).or_default() += 1;
        }
        // A call settled only when its connection closed (it never ended,
        // or its end was lost with bytes of the capture), or still open
        // when the capture ended, is printed then, after calls that started
        // later (a faults_lab run under load: nri-trace s's CreateContainer
        // whose response a hole took at the end of its capture).
        let at_close = l.contains("CONNECTION CLOSED before the end")
            || l.contains("END LOST (capture loss)")
            || l.contains("no response yet (capture ended)");
        if let Some(subject) = w.next().filter(|_| !at_close) {
            let mut parts = subject.split('/');
            if let (Some(ns), Some(name)) = (parts.next(), parts.next()) {
                t.per_pod
                    .entry(format!("{ns}/{name}"))
                    .or_default()
                    .push(when);
            }
        }
    }
    t
}

/// `-o text` of a run against its `-o json`: every CRI call and every hook
/// once, each pod's calls in start order, and at most (CRI calls + hook
/// deliveries + findings + 2 per pod + the tables) lines, plus the lines of
/// events outside any CRI call (kernel events a hung call could not hold,
/// plugins going, the runtime exiting), of which there are at most 3 per
/// pod, 1 per plugin and 2 per runtime restart, and a line for each time
/// a kernel retry loop goes on after a call's line (docs/trace.md: where
/// and why). The counts, for the docs.
pub(crate) fn check_text(what: &str, text: &str, json: &[Value]) -> (Text, Counts) {
    let c = counts(json);
    let t = read_text(text);
    assert_eq!(
        t.cri_calls, c.cri_calls,
        "{what}: CRI calls in text vs json\n{text}"
    );
    assert_eq!(
        t.hook_calls, c.hook_calls,
        "{what}: hooks in text vs json\n{text}"
    );
    assert_eq!(
        t.by_client, c.by_client,
        "{what}: CRI calls by client in text vs json\n{text}"
    );
    assert_eq!(
        t.polls, c.polls,
        "{what}: polls by client and method in text vs json\n{text}"
    );
    let polls: usize = c.polls.values().sum();
    assert!(
        t.poll_lines <= polls,
        "{what}: {} poll lines for {polls} polls\n{text}",
        t.poll_lines
    );
    for (pod, clocks) in &t.per_pod {
        let mut sorted = clocks.clone();
        sorted.sort();
        assert_eq!(
            clocks, &sorted,
            "{what}: {pod}'s calls out of start order\n{text}"
        );
    }
    let budget = c.cri - polls + t.poll_lines + c.hooks + c.findings + 2 * c.pods + table_lines(&c);
    assert!(
        t.lines <= budget + t.outside,
        "{what}: {} lines of text, over the budget of {budget} ({} CRI calls, {} hooks, {} \
         findings, {} pods, {} table lines) and {} lines outside any call\n{text}",
        t.lines,
        c.cri,
        c.hooks,
        c.findings,
        c.pods,
        table_lines(&c),
        t.outside
    );
    let plugins: BTreeSet<&String> = c.hook_calls.keys().map(|(p, _)| p).collect();
    let restarts = text.matches("(runtime restarted)").count();
    assert!(
        t.outside <= 3 * c.pods + plugins.len() + 2 * restarts + t.loops_continued,
        "{what}: {} lines outside any call ({} of them a retry loop going on), for {} pods \
         and {} plugins\n{text}",
        t.outside,
        t.loops_continued,
        c.pods,
        plugins.len()
    );
    (t, c)
}
