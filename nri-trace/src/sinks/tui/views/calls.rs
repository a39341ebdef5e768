//! Calls: the decoded CRI/NRI call log, oldest first, following the tail
//! until a row above it is selected; filtered by kind (`c`) and text (`/`).

use ratatui::{
    layout::{Constraint, Rect},
    style::Style,
    text::Span,
    widgets::Row,
    Frame,
};

use super::{list_table, matches, window_start, Theme};
use crate::human::{clock_ms, duration, duration_opt, sanitize};
use crate::sinks::tui::{
    app::{App, CallFilter, View},
    state::{CallKind, CallRow, TuiState},
};

/// The rows shown, oldest first.
pub(crate) fn rows<'a>(app: &App, st: &'a TuiState) -> Vec<&'a CallRow> {
    let filter = app.filter_of(View::Calls);
    st.calls()
        .iter()
        .filter(|c| match app.call_filter {
            CallFilter::All => true,
            CallFilter::Cri => matches!(c.kind, CallKind::Cri | CallKind::Poll),
            CallFilter::Nri => c.kind == CallKind::Nri,
            CallFilter::Problems => !c.ok,
        })
        .filter(|c| {
            filter.is_empty()
                || matches(&c.what, filter)
                || matches(&c.plugin, filter)
                || matches(&c.client, filter)
                || matches(&c.subject, filter)
                || matches(&c.outcome, filter)
                || matches(c.kind.label(), filter)
        })
        .collect()
}

pub(crate) fn render(f: &mut Frame<'_>, area: Rect, app: &App, st: &TuiState, th: Theme) {
    let all = rows(app, st);
    // The selection past the end (the default) follows the tail.
    let sel = app
        .selected_of(View::Calls)
        .min(all.len().saturating_sub(1));
    let height = area.height.saturating_sub(2) as usize;
    let start = window_start(sel, height);
    let wide = area.width >= 120;
    let body: Vec<Row<'_>> = all
        .iter()
        .skip(start)
        .take(height)
        .map(|c| {
            let kind_style = match c.kind {
                CallKind::Cri => th.header(),
                CallKind::Nri => th.accent(),
                CallKind::Loss | CallKind::Finding => th.bad(),
                CallKind::Conn | CallKind::Poll => th.dim(),
            };
            let what = if c.nested {
                format!("└ {}", c.what)
            } else {
                c.what.clone()
            };
            let mut cells = vec![
                Span::styled(c.ts.map(|t| clock_ms(&t)).unwrap_or_default(), th.dim()),
                Span::styled(c.kind.label(), kind_style),
            ];
            // Who: the plugin of an NRI row, the client of a CRI one.
            let (who, who_style) = if c.plugin.is_empty() {
                (c.client.clone(), th.dim())
            } else {
                (c.plugin.clone(), th.accent())
            };
            if wide {
                cells.push(Span::raw(what));
                cells.push(Span::styled(who, who_style));
            } else if who.is_empty() || c.kind == CallKind::Cri {
                // Narrow screens: a CRI call's method before its client
                // (which the wide layout and the CRI connection row show).
                cells.push(Span::raw(what));
            } else {
                // Narrow screens: who after what it was called for.
                cells.push(Span::raw(format!("{what} {who}")));
            }
            cells.push(Span::raw(c.subject.clone()));
            cells.push(Span::raw(duration_opt(c.duration_ns)));
            if wide {
                cells.push(Span::styled(
                    c.queued_ns
                        .filter(|q| *q > 0)
                        .map(duration)
                        .unwrap_or_default(),
                    th.dim(),
                ));
            }
            cells.push(Span::styled(
                c.outcome.clone(),
                if c.ok { Style::new() } else { th.bad() },
            ));
            Row::new(cells)
        })
        .collect();
    let (header, widths) = if wide {
        (
            vec![
                "TIME",
                "KIND",
                "WHAT",
                "PLUGIN/CLIENT",
                "POD",
                "DUR",
                "QUEUED",
                "OUTCOME",
            ],
            vec![
                Constraint::Length(12),
                Constraint::Length(4),
                Constraint::Fill(3),
                Constraint::Fill(2),
                Constraint::Fill(3),
                Constraint::Length(7),
                Constraint::Length(7),
                Constraint::Fill(3),
            ],
        )
    } else {
        (
            vec!["TIME", "KIND", "WHAT", "POD", "DUR", "OUTCOME"],
            vec![
                Constraint::Length(12),
                Constraint::Length(4),
                Constraint::Fill(4),
                Constraint::Fill(3),
                Constraint::Length(7),
                Constraint::Fill(2),
            ],
        )
    };
    let mut title = vec![
        Span::styled(format!(" Calls {} ", all.len()), th.header()),
        Span::raw(format!("kind: {} ", app.call_filter.label())),
    ];
    let filter = app.filter_of(View::Calls);
    if !filter.is_empty() {
        title.push(Span::raw(format!("filter: {} ", sanitize(filter))));
    }
    let dropped = st.dropped().calls;
    if dropped > 0 {
        title.push(Span::styled(
            format!("({dropped} oldest dropped)"),
            th.dim(),
        ));
    }
    let selected = (!all.is_empty()).then(|| sel - start);
    list_table(f, area, body, widths, Row::new(header), title, selected, th);
}
