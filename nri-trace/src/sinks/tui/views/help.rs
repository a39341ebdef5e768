//! The help overlay (`?`): every key, and what the markers mean.

use ratatui::{
    layout::{Constraint, Flex, Layout, Rect},
    text::{Line, Span},
    widgets::{Block, Borders, Clear, Paragraph},
    Frame,
};

use super::Theme;

/// (keys, what they do).
pub(crate) const KEYS: &[(&str, &str)] = &[
    ("1..5 Tab S-Tab", "Pods, Timeline, Plugins, Findings, Calls"),
    ("↑↓ j k PgUp PgDn", "move the selection"),
    ("g/Home G/End", "first / last row (Calls: follow the tail)"),
    ("/", "filter the rows (Enter keeps it, Esc clears it)"),
    ("Enter", "Pods: timeline of the pod; Findings: evidence"),
    ("s r", "Pods: next sort column, reverse"),
    ("+ - ← → 0", "Timeline: zoom, scroll, reset"),
    ("c", "Calls: all, CRI, NRI, problems"),
    ("p Space", "pause / resume (records keep arriving)"),
    ("e E", "export the rows on screen / the session (NDJSON)"),
    ("Esc", "close the evidence, clear the filter"),
    ("q Ctrl-C", "quit"),
];

/// Markers and bars.
pub(crate) const LEGEND: &[(&str, &str)] = &[
    ("!", "stuck: sandbox failed or last call failed"),
    ("~", "slow: last call took 1 s or more"),
    ("█ ▓ ░", "CRI call, NRI hook, queued behind earlier plugins"),
    ("error?", "finding with incomplete evidence (uncertain)"),
];

pub(crate) fn render(f: &mut Frame<'_>, area: Rect, th: Theme) {
    let w = area.width.min(76);
    let h = (KEYS.len() + LEGEND.len() + 5) as u16;
    let [row] = Layout::vertical([Constraint::Length(h.min(area.height))])
        .flex(Flex::Center)
        .areas(area);
    let [popup] = Layout::horizontal([Constraint::Length(w)])
        .flex(Flex::Center)
        .areas(row);
    let mut lines = Vec::new();
    for (k, what) in KEYS {
        lines.push(Line::from(vec![
            Span::styled(format!("{k:>18}  "), th.header()),
            Span::raw(*what),
        ]));
    }
    lines.push(Line::from(""));
    for (k, what) in LEGEND {
        lines.push(Line::from(vec![
            Span::styled(format!("{k:>18}  "), th.header()),
            Span::raw(*what),
        ]));
    }
    lines.push(Line::from(Span::styled(
        "any key closes this; docs/tui.md",
        th.dim(),
    )));
    f.render_widget(Clear, popup);
    f.render_widget(
        Paragraph::new(lines).block(Block::default().borders(Borders::ALL).title(" Help ")),
        popup,
    );
}
