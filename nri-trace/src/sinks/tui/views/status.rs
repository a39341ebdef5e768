//! The status line (attached runtime, sockets, plugins seen, call rate,
//! lost records, recording, pause), the view tabs and the key footer.

use ratatui::{
    layout::Rect,
    style::Style,
    text::{Line, Span},
    widgets::Paragraph,
    Frame,
};

use super::Theme;
use crate::human::sanitize;
use crate::sinks::tui::{
    app::{App, View},
    state::TuiState,
};

/// The last path component of `p`.
fn base(p: &str) -> &str {
    p.rsplit('/').next().unwrap_or(p)
}

/// Pieces of the status line, most important first; those that do not fit
/// are left out.
fn pieces(st: &TuiState, wide: bool, th: Theme) -> Vec<(String, Style)> {
    let s = st.status();
    let mut v = Vec::new();
    if st.paused() {
        v.push((format!("PAUSED ({} held)", st.pending()), th.warn()));
    }
    // "containerd v1.7.24 (pid 812)": the version from the NRI handshake.
    let runtime = match (st.runtime_version(), s.runtime.as_deref()) {
        // A replay says so in its own piece.
        (Some(v), Some(_)) if s.source.starts_with("replay") => v.to_string(),
        (Some(v), Some(r)) => {
            // "containerd pid 812" + "containerd v1.7.24": name once.
            let name = v.split(' ').next().unwrap_or(v);
            match r.to_lowercase().strip_prefix(&name.to_lowercase()) {
                Some(rest) => format!("{v}{}", sanitize(rest)),
                None => format!("{v} ({})", sanitize(r)),
            }
        }
        (Some(v), None) => v.to_string(),
        (None, Some(r)) => sanitize(r),
        (None, None) => "runtime ?".into(),
    };
    v.push((runtime, th.header()));
    let plugins: Vec<_> = st.plugins().collect();
    let up = plugins.iter().filter(|p| p.connected).count();
    let mut labels: Vec<&str> = plugins.iter().map(|p| p.label.as_str()).collect();
    labels.sort_unstable();
    labels.dedup();
    v.push((format!("plugins {}/{} up", up, labels.len()), Style::new()));
    let rate = match s.events_per_s {
        Some(e) => format!("{} calls/s {e} ev/s", st.calls_per_s()),
        None => format!("{} calls/s", st.calls_per_s()),
    };
    v.push((rate, Style::new()));
    let loss = st.loss();
    v.push((
        format!("lost {}", loss.lost_records),
        if loss.any() { th.bad() } else { Style::new() },
    ));
    v.push((
        match &s.recording {
            Some(p) if wide => format!("rec {}", sanitize(p)),
            Some(_) => "rec on".into(),
            None => "rec off".into(),
        },
        if s.recording.is_some() {
            th.bad()
        } else {
            th.dim()
        },
    ));
    let sock = |label: &str, ps: &[String]| -> String {
        let names: Vec<String> = ps
            .iter()
            .map(|p| sanitize(if wide { p } else { base(p) }))
            .collect();
        format!(
            "{label} {}",
            if names.is_empty() {
                "-".into()
            } else {
                names.join(",")
            }
        )
    };
    v.push((
        format!(
            "{} {}",
            sock("CRI", &s.cri_sockets),
            sock("NRI", &s.nri_sockets)
        ),
        th.dim(),
    ));
    if !s.source.is_empty() {
        v.push((sanitize(&s.source), th.dim()));
    }
    v
}

pub(crate) fn render_status(f: &mut Frame<'_>, area: Rect, st: &TuiState, th: Theme) {
    let width = area.width as usize;
    let mut spans = vec![Span::styled(
        "nri-trace",
        th.header().add_modifier(ratatui::style::Modifier::REVERSED),
    )];
    let mut used = 9;
    for (text, style) in pieces(st, width >= 160, th) {
        let w = text.chars().count() + 3;
        if used + w > width {
            continue;
        }
        used += w;
        spans.push(Span::styled(" │ ", th.dim()));
        spans.push(Span::styled(text, style));
    }
    f.render_widget(Paragraph::new(Line::from(spans)), area);
}

pub(crate) fn render_tabs(f: &mut Frame<'_>, area: Rect, app: &App, st: &TuiState, th: Theme) {
    let mut spans = Vec::new();
    for (i, v) in View::ALL.iter().enumerate() {
        let label = match v {
            View::Findings if !st.findings().is_empty() => {
                format!(" {} {} ({}) ", i + 1, v.title(), st.findings().len())
            }
            _ => format!(" {} {} ", i + 1, v.title()),
        };
        let style = if *v == app.view {
            th.selected().add_modifier(ratatui::style::Modifier::BOLD)
        } else if *v == View::Findings && !st.findings().is_empty() {
            th.bad()
        } else {
            Style::new()
        };
        spans.push(Span::styled(label, style));
    }
    f.render_widget(Paragraph::new(Line::from(spans)), area);
}

/// The keys of the current view.
fn keys(view: View) -> &'static str {
    match view {
        View::Pods => "↑↓ select  Enter timeline  s sort  r reverse  / filter",
        View::Timeline => "+/- zoom  ←→ scroll  ↑↓ rows  0 reset  Esc selected pod",
        View::Plugins => "↑↓ select",
        View::Findings => "↑↓ select  Enter evidence  / filter",
        View::Calls => "↑↓ select  End follow  c kind  / filter",
    }
}

pub(crate) fn render_footer(f: &mut Frame<'_>, area: Rect, app: &App, th: Theme) {
    let line = if app.editing {
        Line::from(vec![
            Span::styled("/", th.header()),
            Span::raw(sanitize(app.filter())),
            Span::styled("█", th.dim()),
            Span::styled("  Enter apply  Esc clear", th.dim()),
        ])
    } else if let Some(m) = &app.message {
        Line::from(Span::styled(sanitize(m), th.warn()))
    } else {
        Line::from(vec![
            Span::raw(keys(app.view)),
            Span::styled(
                "  1-5/Tab views  p pause  e/E export  ? help  q quit",
                th.dim(),
            ),
        ])
    };
    f.render_widget(Paragraph::new(line), area);
}
