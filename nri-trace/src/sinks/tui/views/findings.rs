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
    engine::{
        contract,
        findings::{Certainty, Severity},
    },
    sinks::finding_message::evidence_words,
    sinks::tui::{
        app::{App, View},
        state::{Finding, TuiState},
    },
};

pub(crate) fn severity_name(s: Severity) -> &'static str {
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
pub(crate) fn rows<'a>(app: &App, st: &'a TuiState) -> Vec<&'a Finding> {
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

pub(crate) fn render(f: &mut Frame<'_>, area: Rect, app: &App, st: &TuiState, th: Theme) {
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
                Span::styled(sev, severity_style(v.severity, th)),
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
        render_detail(f, d, st, fd, th);
    }
}

fn render_detail(f: &mut Frame<'_>, area: Rect, st: &TuiState, fd: &Finding, th: Theme) {
    let v = &fd.violation;
    let rule = contract::rule(v.rule);
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
    // What the rule means for whoever reads the finding (docs/contract.md);
    // a rule this build does not know (a record file from a newer one)
    // shows its id alone.
    if let Some(r) = rule {
        // The statement as a sentence: docs/contract.md's table cell starts
        // lowercase and ends without a stop.
        let mut statement = r.statement.to_string();
        if let Some(first) = statement.get_mut(..1) {
            first.make_ascii_uppercase();
        }
        statement.push('.');
        lines.push(Line::from(statement));
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
