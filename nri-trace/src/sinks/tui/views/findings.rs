//! Findings: the contract violations, newest first (rule, severity, pod,
//! plugin, age); Enter shows the selected one's evidence and what its rule
//! means.

use ratatui::{
    layout::{Constraint, Layout, Rect},
    style::Style,
    text::{Line, Span},
    widgets::{Block, Borders, Paragraph, Row, Wrap},
    Frame,
};

use super::{age, list_table, matches, window_start, Theme};
use crate::human::{clock_ms, sanitize};
use crate::{
    engine::findings::{self, Certainty, Severity},
    sinks::finding_message::evidence_words,
    sinks::tui::{
        app::{App, View},
        state::{Finding, TuiState},
    },
};

/// What rule `rule` means for whoever reads the finding (docs/contract.md);
/// empty for a rule this build does not know.
pub fn rule_explanation(rule: &str) -> &'static str {
    match rule {
        findings::POD_EVENT_ORDER => {
            "Each plugin must see a pod's RunPodSandbox, StopPodSandbox, RemovePodSandbox in that order (nri PR 286 contract item 4)."
        }
        findings::CONTAINER_EVENT_ORDER => {
            "Each plugin must see a container's Create, Start, Stop, Remove in that order (nri pkg/adaptation container lifecycle)."
        }
        findings::CONTAINER_BEFORE_POD_READY => {
            "No workload container may be created or started before the RunPodSandbox hook completes (nri PR 286 contract item 5)."
        }
        findings::CONTAINER_IN_STOPPED_POD => {
            "No container may be created or started in a pod after its StopPodSandbox (nri PR 286 contract items 2, 6)."
        }
        findings::UNSUBSCRIBED_DELIVERED => {
            "A plugin only receives the events it subscribed to in Configure (nri pkg/api Configure, events mask)."
        }
        findings::SUBSCRIBED_NOT_DELIVERED => {
            "Every connected plugin subscribed to an event receives it; one registering during an operation may miss it: the Synchronize race (nri issue 63)."
        }
        findings::POD_UNKNOWN_TO_PLUGIN => {
            "Every pod a plugin receives events for was announced to it, in Synchronize or by RunPodSandbox; checked for plugins whose Synchronize nri-trace saw. A plugin that registered while the pod's RunPodSandbox was in flight gets its teardown events without ever having been told of it (nri issue 63, the Synchronize race)."
        }
        findings::TEARDOWN_HOOK_FAILED => {
            "A plugin error or timeout on the teardown path must not block or fail the CRI operation nor stop delivery to later plugins; critical when the CRI call failed with it or later plugins were not called (nri PR 286 teardown clause; CRI-O issue 4221)."
        }
        findings::PLUGIN_TIMEOUT => {
            "A plugin that does not answer within the request timeout is disconnected by the runtime and misses what follows; a second finding at the end counts what it missed (nri pkg/adaptation plugin request timeout)."
        }
        findings::HOOK_OVER_BUDGET => {
            "A hook's own time stays under its budget: by default half the plugin request timeout the runtime sent with it (kubelet's runtime-request-timeout leaves the hooks a share of it)."
        }
        findings::NAME_RESERVATION_RETRY => {
            "A pod or container is not requested again with the same name and attempt after the client's deadline: the retry runs into the runtime's name reservation until the first request ends; the finding says how long the pod was held up (CRI-O issue 4221; containerd name reservation)."
        }
        findings::ADJUSTMENT_REJECTED => {
            "A container's adjustments must pass every validator: the runtime's built-in default validator (containerd 2.2+, CRI-O 1.34+, off unless configured) and plugins serving ValidateContainerAdjustment. A rejection fails CRI CreateContainer, so kubelet retries and the pod stays in ContainerCreating; the finding names the validator, the plugins whose adjustments it rejected and its reason (containerd/nri docs/validation-plugins.md)."
        }
        findings::UNEXPLAINED_AFTER_RESTART => {
            "After a runtime restart, plugins must still know the pods that existed before it: an event of such a pod may only reach a plugin told of it since (its Synchronize listed it, or it got the pod's RunPodSandbox), and the pod's StopPodSandbox / RemovePodSandbox must still deliver their events. containerd keeps NRI state in memory: after a restart it was seen to drop them (PROTOCOL-NOTES.md; docs/contract.md)."
        }
        other => findings::rule(other).map_or("", |r| r.statement),
    }
}

pub fn severity_name(s: Severity) -> &'static str {
    match s {
        Severity::Info => "info",
        Severity::Warning => "warning",
        Severity::Error => "error",
        Severity::Critical => "critical",
    }
}

fn severity_style(s: Severity, th: Theme) -> Style {
    match s {
        Severity::Critical | Severity::Error => th.bad(),
        Severity::Warning => th.warn(),
        Severity::Info => th.dim(),
    }
}

/// The findings shown, newest first, after the filter.
pub fn rows<'a>(app: &App, st: &'a TuiState) -> Vec<&'a Finding> {
    let filter = app.filter_of(View::Findings);
    st.findings()
        .iter()
        .rev()
        .filter(|f| {
            let v = &f.violation;
            filter.is_empty()
                || matches(v.rule, filter)
                || v.pod.as_deref().is_some_and(|p| matches(p, filter))
                || v.plugin.as_deref().is_some_and(|p| matches(p, filter))
                || matches(severity_name(v.severity), filter)
                || matches(&f.message, filter)
        })
        .collect()
}

pub fn render(f: &mut Frame<'_>, area: Rect, app: &App, st: &TuiState, th: &Theme) {
    let all = rows(app, st);
    let sel = app
        .selected_of(View::Findings)
        .min(all.len().saturating_sub(1));
    let (list_area, detail_area) = if app.finding_open && !all.is_empty() {
        let [a, b] =
            Layout::vertical([Constraint::Percentage(35), Constraint::Fill(1)]).areas(area);
        (a, Some(b))
    } else {
        (area, None)
    };
    let dropped = st.dropped().findings;
    let mut title = vec![Span::styled(
        format!(" Findings {} ", all.len()),
        th.header(),
    )];
    if dropped > 0 {
        title.push(Span::styled(
            format!("({dropped} oldest dropped) "),
            th.warn(),
        ));
    }
    let filter = app.filter_of(View::Findings);
    if !filter.is_empty() {
        title.push(Span::raw(format!("filter: {} ", sanitize(filter))));
    }
    if all.is_empty() {
        title.push(Span::styled("none: no contract rule broken ", th.good()));
    }
    // By-design clauses are tallied, not listed per pod (docs/contract.md).
    for c in st.conformance() {
        let (style, word) = if c.broken == 0 {
            (th.good(), format!("held {}/{}", c.held, c.held))
        } else {
            (
                th.warn(),
                format!("broken {}/{}", c.broken, c.held + c.broken),
            )
        };
        title.push(Span::raw(format!("│ {} ", c.clause)));
        title.push(Span::styled(format!("{word} "), style));
    }
    let wide = area.width >= 120;
    let height = list_area.height.saturating_sub(2) as usize;
    let start = window_start(sel, height);
    let body: Vec<Row<'_>> = all
        .iter()
        .skip(start)
        .take(height)
        .map(|fd| {
            let v = &fd.violation;
            let sev = match &v.certainty {
                Certainty::Certain => severity_name(v.severity).to_string(),
                Certainty::Uncertain { .. } => format!("{}?", severity_name(v.severity)),
            };
            let mut cells = vec![
                Span::styled(sev, severity_style(v.severity, *th)),
                Span::raw(v.rule),
                Span::raw(v.pod.as_deref().map_or_else(|| "-".into(), sanitize)),
                Span::styled(
                    v.plugin.as_deref().map_or_else(|| "-".into(), sanitize),
                    th.accent(),
                ),
                Span::raw(age(st.age_ns(Some(v.ts)))),
            ];
            if wide {
                cells.push(Span::raw(sanitize(&fd.message)));
            }
            Row::new(cells)
        })
        .collect();
    let mut widths = vec![
        Constraint::Length(8),
        Constraint::Length(26),
        Constraint::Fill(2),
        Constraint::Length(10),
        Constraint::Length(4),
    ];
    let mut header = vec!["SEV", "RULE", "POD", "PLUGIN", "AGE"];
    // The message needs room; narrow screens show it under Enter.
    if wide {
        widths.push(Constraint::Fill(3));
        header.push("MESSAGE");
    }
    let selected = (!all.is_empty()).then(|| sel - start);
    list_table(
        f,
        list_area,
        body,
        widths,
        Row::new(header),
        title,
        selected,
        th,
    );
    if let (Some(d), Some(fd)) = (detail_area, all.get(sel)) {
        render_detail(f, d, st, fd, *th);
    }
}

fn render_detail(f: &mut Frame<'_>, area: Rect, st: &TuiState, fd: &Finding, th: Theme) {
    let v = &fd.violation;
    let rule = findings::rule(v.rule);
    let mut lines = vec![
        Line::from(vec![
            Span::styled(v.rule, th.header()),
            Span::raw("  "),
            Span::styled(severity_name(v.severity), severity_style(v.severity, th)),
            Span::raw(match &v.certainty {
                Certainty::Certain => "  certain".to_string(),
                Certainty::Uncertain { why } => format!("  uncertain: {}", sanitize(why)),
            }),
            Span::raw(format!("  at {}", clock_ms(&v.ts))),
        ]),
        Line::from(sanitize(&fd.message)),
        Line::from(vec![
            Span::styled("pod ", th.dim()),
            Span::raw(v.pod.as_deref().map_or_else(|| "-".into(), sanitize)),
            Span::styled("  plugin ", th.dim()),
            Span::raw(v.plugin.as_deref().map_or_else(|| "-".into(), sanitize)),
            Span::styled("  age ", th.dim()),
            Span::raw(age(st.age_ns(Some(v.ts)))),
        ]),
        Line::from(Span::styled("Evidence", th.header())),
    ];
    for e in v.evidence.iter().map(evidence_words) {
        let mut spans = vec![
            Span::raw(format!(
                "  {} {} ",
                e.start.map_or_else(|| "-".repeat(12), |t| clock_ms(&t)),
                e.kind.to_uppercase()
            )),
            Span::raw(sanitize(&e.what)),
            Span::raw("  "),
            Span::styled(
                sanitize(&e.outcome),
                if e.ok { th.good() } else { th.bad() },
            ),
        ];
        if let Some((conn, stream)) = e.at {
            spans.push(Span::styled(
                format!("  [{conn} stream {stream}]"),
                th.dim(),
            ));
        }
        lines.push(Line::from(spans));
    }
    lines.push(Line::from(Span::styled("Rule", th.header())));
    lines.push(Line::from(rule_explanation(v.rule)));
    if let Some(r) = rule {
        lines.push(Line::from(Span::styled(
            format!("source: {}", r.source),
            th.dim(),
        )));
    }
    let p = Paragraph::new(lines).wrap(Wrap { trim: false }).block(
        Block::default()
            .borders(Borders::TOP)
            .title(" Evidence (Esc closes) "),
    );
    f.render_widget(p, area);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rule_has_an_explanation() {
        for r in findings::RULES {
            assert!(!rule_explanation(r.id).is_empty(), "{}", r.id);
        }
        assert_eq!(rule_explanation("no-such-rule"), "");
    }
}
