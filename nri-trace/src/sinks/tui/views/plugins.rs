//! Plugins: per (plugin, hook) count, p50/p99/max of the plugin's own time,
//! timeouts and errors, with a sparkline of its recent hooks; the plugin
//! connections; and per CRI method the same for the calls that cause them.

use ratatui::{
    layout::{Constraint, Layout, Rect},
    text::{Line, Span},
    widgets::{Block, Borders, Row},
    Frame,
};

use super::{list_table, window_start, Theme};

/// A percentile, "-" when nothing was measured (a timed-out hook has no
/// own time).
fn dur(ns: u64) -> String {
    if ns == 0 {
        "-".into()
    } else {
        duration(ns)
    }
}
use crate::human::{duration, sanitize};
use crate::sinks::tui::{
    app::{App, View},
    state::TuiState,
};

const SPARK: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];

/// The last `width` values as a sparkline, scaled to their maximum.
pub(crate) fn sparkline(
    values: impl DoubleEndedIterator<Item = u64> + ExactSizeIterator,
    width: usize,
) -> String {
    let n = values.len();
    let vals: Vec<u64> = values.skip(n.saturating_sub(width)).collect();
    let max = vals.iter().copied().max().unwrap_or(0).max(1);
    vals.iter()
        .map(|&v| {
            SPARK[((u128::from(v) * 7 + u128::from(max) / 2) / u128::from(max)).min(7) as usize]
        })
        .collect()
}

pub(crate) fn render(f: &mut Frame<'_>, area: Rect, app: &App, st: &TuiState, th: Theme) {
    let hooks = st.hook_summaries();
    let methods = st.method_summaries();
    let [conn_area, hook_area, method_area] = Layout::vertical([
        Constraint::Length(2),
        Constraint::Fill(3),
        Constraint::Fill(2),
    ])
    .areas(area);

    // Plugin connections, one line.
    let mut conns: Vec<Span<'_>> = vec![Span::styled(" Plugins ", th.header())];
    let mut any = false;
    for p in st.plugins() {
        any = true;
        conns.push(Span::styled(p.label.clone(), th.accent()));
        // The plugin's NRI stub version, when it said (RegisterPlugin).
        if let Some(v) = &p.nri_version.plugin {
            conns.push(Span::styled(format!(" NRI {}", sanitize(v)), th.dim()));
        }
        conns.push(if p.connected {
            Span::styled(" up  ", th.good())
        } else {
            Span::styled(" gone  ", th.bad())
        });
    }
    if !any {
        conns.push(Span::styled("no plugin connection seen", th.dim()));
    }
    f.render_widget(
        ratatui::widgets::Paragraph::new(Line::from(conns))
            .block(Block::default().borders(Borders::TOP)),
        conn_area,
    );

    let sel = app.selected_of(View::Plugins);
    let spark_w = if area.width >= 120 { 32 } else { 12 };
    let height = hook_area.height.saturating_sub(2) as usize;
    let hsel = sel.min(hooks.len().saturating_sub(1));
    let start = window_start(hsel, height);
    let rows: Vec<Row<'_>> = hooks
        .iter()
        .skip(start)
        .take(height)
        .map(|h| {
            let spark = st
                .spark(&sanitize(&h.plugin), &sanitize(h.hook.as_str()))
                .map(|q| sparkline(q.iter().copied(), spark_w))
                .unwrap_or_default();
            Row::new(vec![
                Span::styled(sanitize(&h.plugin), th.accent()),
                Span::raw(sanitize(h.hook.as_str())),
                Span::raw(h.calls.to_string()),
                Span::raw(dur(h.p50_ns)),
                Span::raw(dur(h.p99_ns)),
                Span::raw(dur(h.max_ns)),
                Span::styled(
                    h.timeouts.to_string(),
                    if h.timeouts > 0 { th.bad() } else { th.dim() },
                ),
                Span::styled(
                    h.errors.to_string(),
                    if h.errors > 0 { th.bad() } else { th.dim() },
                ),
                Span::styled(spark, th.accent()),
            ])
        })
        .collect();
    let widths = [
        Constraint::Fill(2),
        Constraint::Fill(3),
        Constraint::Length(5),
        Constraint::Length(7),
        Constraint::Length(7),
        Constraint::Length(7),
        Constraint::Length(3),
        Constraint::Length(3),
        Constraint::Length(spark_w as u16),
    ];
    let title = Line::from(vec![
        Span::styled(format!(" Hooks {} ", hooks.len()), th.header()),
        Span::styled("own time per (plugin, hook)", th.dim()),
    ]);
    let header = Row::new([
        "PLUGIN", "HOOK", "CALLS", "P50", "P99", "MAX", "TMO", "ERR", "RECENT",
    ]);
    let selected = (sel < hooks.len()).then(|| hsel - start);
    list_table(f, hook_area, rows, widths, header, title, selected, th);

    let height = method_area.height.saturating_sub(2) as usize;
    let msel = sel
        .saturating_sub(hooks.len())
        .min(methods.len().saturating_sub(1));
    let start = window_start(msel, height);
    let rows: Vec<Row<'_>> = methods
        .iter()
        .skip(start)
        .take(height)
        .map(|m| {
            Row::new(vec![
                Span::raw(sanitize(&m.method)),
                Span::raw(m.calls.to_string()),
                Span::styled(
                    m.errors.to_string(),
                    if m.errors > 0 { th.bad() } else { th.dim() },
                ),
                Span::styled(
                    m.cancelled.to_string(),
                    if m.cancelled > 0 { th.bad() } else { th.dim() },
                ),
                Span::raw(dur(m.p50_ns)),
                Span::raw(dur(m.p99_ns)),
                Span::raw(dur(m.max_ns)),
                Span::raw(m.last_minute.calls.to_string()),
            ])
        })
        .collect();
    let widths = [
        Constraint::Fill(1),
        Constraint::Length(5),
        Constraint::Length(3),
        Constraint::Length(4),
        Constraint::Length(7),
        Constraint::Length(7),
        Constraint::Length(7),
        Constraint::Length(5),
    ];
    let header = Row::new([
        "CRI METHOD",
        "CALLS",
        "ERR",
        "CANC",
        "P50",
        "P99",
        "MAX",
        "1M",
    ]);
    let title = Line::from(vec![Span::styled(
        format!(" CRI methods {} ", methods.len()),
        th.header(),
    )]);
    let selected = (sel >= hooks.len() && !methods.is_empty()).then(|| msel - start);
    list_table(f, method_area, rows, widths, header, title, selected, th);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sparkline_scales_to_the_max_and_keeps_the_tail() {
        assert_eq!(sparkline([1u64, 2, 4, 8].into_iter(), 8), "▂▃▅█");
        assert_eq!(sparkline([8u64, 0, 8].into_iter(), 2), "▁█");
        assert_eq!(sparkline(std::iter::empty::<u64>(), 4), "");
    }
}
