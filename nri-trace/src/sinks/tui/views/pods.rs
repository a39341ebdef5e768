//! Pods: one row per pod of the pod model (namespace/name, phase, age, last
//! CRI call and its duration, NRI time, findings, stuck or slow marker),
//! sorted and filtered as the app says.

use ratatui::{
    layout::{Constraint, Rect},
    text::Span,
    widgets::Row,
    Frame,
};
use serde::Serialize;

use super::{age, list_table, matches, window_start, Theme};
use crate::human::{duration, duration_opt, sanitize};
use crate::{
    engine::pods::{PodPhase, PodView},
    sinks::tui::{
        app::{App, PodSort, View},
        state::{pod_flag, PodFlag, TuiState},
    },
};

fn phase_name(p: PodPhase) -> &'static str {
    match p {
        PodPhase::Seen => "seen",
        PodPhase::Ready => "ready",
        PodPhase::Failed => "failed",
        PodPhase::Stopped => "stopped",
        PodPhase::Removed => "removed",
    }
}

fn flag_rank(p: &PodView) -> u8 {
    match pod_flag(p) {
        Some(PodFlag::Stuck) => 0,
        Some(PodFlag::Slow) => 1,
        None if p.findings > 0 => 2,
        None => 3,
    }
}

/// The pods shown, in order (filter and sort of the app).
pub fn rows<'a>(app: &App, st: &'a TuiState) -> Vec<&'a PodView> {
    let filter = app.filter_of(View::Pods);
    let mut v: Vec<&PodView> = st
        .pods()
        .pods()
        .filter(|p| {
            filter.is_empty()
                || matches(&p.namespace, filter)
                || matches(&p.name, filter)
                || matches(phase_name(p.phase), filter)
                || p.timeline
                    .last()
                    .is_some_and(|e| matches(&e.method, filter))
        })
        .collect();
    let last_dur = |p: &PodView| p.timeline.last().and_then(|e| e.duration_ns).unwrap_or(0);
    let first = |p: &PodView| p.first_seen.map_or(u64::MAX, |t| t.mono_ns);
    match app.pod_sort {
        PodSort::Attention => v.sort_by(|a, b| {
            flag_rank(a)
                .cmp(&flag_rank(b))
                .then(b.findings.cmp(&a.findings))
                .then(last_dur(b).cmp(&last_dur(a)))
        }),
        PodSort::Name => {}
        // Oldest first.
        PodSort::Age => v.sort_by_key(|p| first(p)),
        PodSort::LastCall => v.sort_by_key(|p| std::cmp::Reverse(last_dur(p))),
        PodSort::NriTime => v.sort_by_key(|p| std::cmp::Reverse(p.nri_ns)),
        PodSort::Findings => v.sort_by_key(|p| std::cmp::Reverse(p.findings)),
    }
    if app.sort_reverse {
        v.reverse();
    }
    v
}

/// A pods-table row as exported (the text shown, sanitized).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct PodRow {
    pub pod: String,
    pub uid: String,
    pub phase: &'static str,
    pub age_ns: u64,
    pub last_call: Option<String>,
    pub last_call_ns: Option<u64>,
    pub last_call_ok: Option<bool>,
    pub cri_ns: u64,
    pub nri_ns: u64,
    pub findings: u32,
    pub flag: Option<PodFlag>,
}

/// Row `p` as exported.
pub(crate) fn export_row(st: &TuiState, p: &PodView) -> PodRow {
    let last = p.timeline.last();
    PodRow {
        pod: sanitize(&p.label()),
        uid: sanitize(&p.uid),
        phase: phase_name(p.phase),
        age_ns: st.age_ns(p.first_seen),
        last_call: last.map(|e| sanitize(&e.method)),
        last_call_ns: last.and_then(|e| e.duration_ns),
        last_call_ok: last.map(|e| e.ok),
        cri_ns: p.cri_ns,
        nri_ns: p.nri_ns,
        findings: p.findings,
        flag: pod_flag(p),
    }
}

pub(crate) fn render(f: &mut Frame<'_>, area: Rect, app: &App, st: &TuiState, th: Theme) {
    let pods = rows(app, st);
    let stuck = pods
        .iter()
        .filter(|p| pod_flag(p) == Some(PodFlag::Stuck))
        .count();
    let mut title = vec![
        Span::styled(format!(" Pods {} ", pods.len()), th.header()),
        Span::styled(
            format!("({stuck} stuck) "),
            if stuck > 0 { th.bad() } else { th.dim() },
        ),
        Span::raw(format!(
            "sort: {}{} ",
            app.pod_sort.label(),
            if app.sort_reverse { " (rev)" } else { "" }
        )),
    ];
    let filter = app.filter_of(View::Pods);
    if !filter.is_empty() {
        title.push(Span::raw(format!("filter: {} ", sanitize(filter))));
    }
    let wide = area.width >= 120;
    let height = area.height.saturating_sub(2) as usize;
    let sel = app
        .selected_of(View::Pods)
        .min(pods.len().saturating_sub(1));
    let start = window_start(sel, height);
    let body: Vec<Row<'_>> = pods
        .iter()
        .skip(start)
        .take(height)
        .map(|p| {
            let last = p.timeline.last();
            let (mark, mark_style) = match pod_flag(p) {
                Some(PodFlag::Stuck) => ("!", th.bad()),
                Some(PodFlag::Slow) => ("~", th.warn()),
                None => (" ", th.dim()),
            };
            let last_call = last
                .map(|e| {
                    let m = sanitize(&e.method);
                    match (&e.container, wide) {
                        (Some(c), true) => format!("{m} {}", sanitize(c)),
                        _ => m,
                    }
                })
                .unwrap_or_default();
            let last_style = match last {
                Some(e) if !e.ok => th.bad(),
                _ => ratatui::style::Style::new(),
            };
            let phase_style = match p.phase {
                PodPhase::Failed => th.bad(),
                PodPhase::Ready => th.good(),
                PodPhase::Removed | PodPhase::Stopped => th.dim(),
                PodPhase::Seen => ratatui::style::Style::new(),
            };
            let mut cells = vec![
                Span::styled(mark, mark_style),
                Span::raw(sanitize(&p.label())),
                Span::styled(phase_name(p.phase), phase_style),
                Span::raw(age(st.age_ns(p.first_seen))),
                Span::styled(last_call, last_style),
                Span::styled(duration_opt(last.and_then(|e| e.duration_ns)), last_style),
                Span::raw(duration(p.nri_ns)),
                Span::styled(
                    p.findings.to_string(),
                    if p.findings > 0 { th.bad() } else { th.dim() },
                ),
            ];
            if wide {
                cells.push(Span::raw(p.timeline.len().to_string()));
                cells.push(Span::raw(duration(p.cri_ns)));
            }
            Row::new(cells)
        })
        .collect();
    let mut header = vec![
        "",
        "NAMESPACE/NAME",
        "PHASE",
        "AGE",
        "LAST CALL",
        "DUR",
        "NRI",
        "FIND",
    ];
    let mut widths = vec![
        Constraint::Length(1),
        Constraint::Fill(3),
        Constraint::Length(7),
        Constraint::Length(5),
        Constraint::Fill(2),
        Constraint::Length(8),
        Constraint::Length(8),
        Constraint::Length(4),
    ];
    if wide {
        header.extend(["CALLS", "CRI TIME"]);
        widths.extend([Constraint::Length(5), Constraint::Length(9)]);
    }
    let selected = (!pods.is_empty()).then(|| sel - start);
    list_table(f, area, body, widths, Row::new(header), title, selected, th);
}
