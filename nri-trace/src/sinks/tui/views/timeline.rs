//! Pod timeline: one pod's CRI calls on a time axis, under each the NRI
//! hooks it caused per plugin (own time, and the time queued behind
//! earlier plugins under the NRI lock), and the pod's findings; zoom and
//! scroll in time, rows scroll vertically.

use ratatui::{
    layout::Rect,
    style::Style,
    text::{Line, Span},
    widgets::{Block, Borders, Paragraph},
    Frame,
};

use super::Theme;
use crate::human::{duration, duration_opt, sanitize};
use crate::{
    engine::{pods::PodView, teardown::Verdict},
    sinks::tui::{
        app::{App, PodKey, View},
        state::TuiState,
    },
};

/// Columns between two axis labels.
const TICK_EVERY: usize = 20;

/// One bar segment, in capture time.
#[derive(Debug, Clone)]
struct Bar {
    from_ns: u64,
    to_ns: u64,
    glyph: char,
    style: Style,
}

#[derive(Debug, Clone)]
struct TlRow {
    label: String,
    value: String,
    style: Style,
    bars: Vec<Bar>,
}

/// The pod of `key`.
pub(crate) fn find_pod<'a>(st: &'a TuiState, key: &PodKey) -> Option<&'a PodView> {
    st.pods().pods().find(|p| {
        p.namespace == key.namespace
            && p.name == key.name
            && p.uid == key.uid
            && p.attempt == key.attempt
    })
}

fn build(pod: &PodView, st: &TuiState, th: Theme, wide: bool) -> Vec<TlRow> {
    let mut entries: Vec<_> = pod.timeline.iter().collect();
    entries.sort_by_key(|e| e.start.map(|t| t.mono_ns));
    let mut rows = Vec::new();
    for e in entries {
        let name = match &e.container {
            Some(c) => format!("{} {}", sanitize(&e.method), sanitize(c)),
            None => sanitize(&e.method),
        };
        let style = if e.ok { th.header() } else { th.bad() };
        let start = e.start.map(|t| t.mono_ns);
        let detail = start.and_then(|s| st.span(s, &e.method));
        let mut bars = Vec::new();
        if let Some(s) = start {
            let end = e
                .duration_ns
                .map_or_else(|| st.now_ns().max(s), |d| s.saturating_add(d));
            bars.push(Bar {
                from_ns: s,
                to_ns: end,
                glyph: '█',
                style,
            });
        }
        let value = if e.ok {
            duration_opt(e.duration_ns)
        } else {
            format!("{} FAIL", duration_opt(e.duration_ns))
        };
        rows.push(TlRow {
            label: name,
            value,
            style,
            bars,
        });
        match detail {
            Some(d) => {
                for h in &d.hooks {
                    let hs = if h.ok { th.accent() } else { th.bad() };
                    let mut bars = Vec::new();
                    if let Some(s) = h.start_ns {
                        if let Some(q) = h.queued_ns.filter(|q| *q > 0) {
                            bars.push(Bar {
                                from_ns: s.saturating_sub(q),
                                to_ns: s,
                                glyph: '░',
                                style: th.dim(),
                            });
                        }
                        let d = h.duration_ns.or(h.own_ns).unwrap_or(0);
                        bars.push(Bar {
                            from_ns: s,
                            to_ns: s.saturating_add(d),
                            glyph: '▓',
                            style: hs,
                        });
                    }
                    let mut value = duration_opt(h.own_ns);
                    if let Some(q) = h.queued_ns.filter(|q| *q > 0 && wide) {
                        value = format!("{value} q{}", duration(q));
                    }
                    if !h.ok && wide {
                        value = format!("{value} {}", h.outcome);
                    }
                    rows.push(TlRow {
                        label: format!(" └ {} {}", h.plugin, h.hook),
                        value,
                        style: hs,
                        bars,
                    });
                }
            }
            // Hook timings aged out of the state: names and own times only.
            None => {
                for (plugin, hook, own) in &e.hooks {
                    rows.push(TlRow {
                        label: format!(" └ {} {}", sanitize(plugin), sanitize(hook)),
                        value: duration_opt(*own),
                        style: th.accent(),
                        bars: Vec::new(),
                    });
                }
            }
        }
    }
    let label = pod.label();
    for f in st.findings() {
        let v = &f.violation;
        if v.pod.as_deref() == Some(label.as_str()) {
            rows.push(TlRow {
                label: format!("! {}", v.rule),
                value: v.plugin.as_deref().map(sanitize).unwrap_or_default(),
                style: th.bad(),
                bars: vec![Bar {
                    from_ns: v.ts.mono_ns,
                    to_ns: v.ts.mono_ns,
                    glyph: '!',
                    style: th.bad(),
                }],
            });
        }
    }
    rows
}

/// Rows of the timeline of the pod the app shows.
pub(crate) fn row_count(app: &App, st: &TuiState) -> usize {
    let th = Theme::plain();
    app.timeline_key(st)
        .and_then(|k| find_pod(st, &k).map(|p| build(p, st, th, false).len()))
        .unwrap_or(0)
}

/// Cut or pad `s` to `w` columns (characters).
fn fit(s: &str, w: usize) -> String {
    let n = s.chars().count();
    if n > w {
        let mut t: String = s.chars().take(w.saturating_sub(1)).collect();
        t.push('…');
        t
    } else {
        format!("{s:<w$}")
    }
}

/// Spans of a row of cells, consecutive cells of one style merged.
fn merge(cells: &[(char, Style)]) -> Vec<Span<'static>> {
    let mut out: Vec<Span<'_>> = Vec::new();
    let mut cur = String::new();
    let mut cur_style = Style::new();
    for (c, s) in cells {
        if *s != cur_style && !cur.is_empty() {
            out.push(Span::styled(std::mem::take(&mut cur), cur_style));
        }
        cur_style = *s;
        cur.push(*c);
    }
    if !cur.is_empty() {
        out.push(Span::styled(cur, cur_style));
    }
    out
}

pub(crate) fn render(f: &mut Frame<'_>, area: Rect, app: &App, st: &TuiState, th: Theme) {
    let block = Block::default().borders(Borders::TOP);
    let Some(pod) = app.timeline_key(st).and_then(|k| find_pod(st, &k)) else {
        let p = Paragraph::new("No pod to show: choose one in Pods (1) with Enter.")
            .block(block.title(Span::styled(" Timeline ", th.header())));
        f.render_widget(p, area);
        return;
    };
    let rows = build(pod, st, th, area.width >= 120);
    let starts = rows.iter().flat_map(|r| r.bars.iter().map(|b| b.from_ns));
    let ends = rows.iter().flat_map(|r| r.bars.iter().map(|b| b.to_ns));
    let t0 = starts.min().unwrap_or(0);
    let t1 = ends.max().unwrap_or(t0).max(t0 + 1);
    let width = area.width as usize;
    let label_w = (width / 3).clamp(16, 44);
    // Wide screens also show the queued time beside the own time.
    let wide = width >= 120;
    let value_w = if wide { 20 } else { 9 };
    let axis_w = width.saturating_sub(label_w + value_w + 2).max(1);
    // Time per column: the whole pod at zoom 0, halved per zoom step.
    let span = t1 - t0;
    let npc = (span.div_ceil(axis_w as u64) >> app.zoom.min(63)).max(1);
    let scroll = app.scroll;
    let col = |t: u64| -> i64 { ((t.saturating_sub(t0)) / npc) as i64 - scroll as i64 };

    let title = Line::from(vec![
        Span::styled(
            format!(" Timeline {} ", sanitize(&pod.label())),
            th.header(),
        ),
        Span::raw(format!(
            "{} calls, {} in CRI, {} in NRI  ",
            pod.timeline.len(),
            duration(pod.cri_ns),
            duration(pod.nri_ns)
        )),
        Span::styled(
            format!("{}/col x{} ", duration(npc), 1u64 << app.zoom.min(63)),
            th.dim(),
        ),
    ]);
    let mut lines = Vec::new();
    // Where its teardown stands (`nri-trace explain`), once it began.
    let key = pod.sandbox_id.clone().unwrap_or_else(|| pod.label());
    if let Some(e) = st
        .teardown()
        .explain(&key, st.now_ns())
        .filter(|e| e.verdict != Verdict::NotTornDown)
    {
        let style = match e.verdict {
            Verdict::Blocked => th.bad(),
            Verdict::Waiting => th.warn(),
            _ => th.dim(),
        };
        lines.push(Line::from(Span::styled(
            fit(
                &format!("teardown: {}", crate::sinks::explain::base_sentence(&e)),
                width,
            ),
            style,
        )));
    }
    let explained = lines.len();
    // The axis: offsets from the pod's first call.
    let mut axis = vec![' '; axis_w];
    let mut c = 0;
    while c < axis_w {
        let t = (c + scroll) as u64 * npc;
        let label = format!("|+{}", duration(t));
        if c + label.chars().count() <= axis_w {
            for (i, ch) in label.chars().enumerate() {
                axis[c + i] = ch;
            }
        }
        c += TICK_EVERY;
    }
    lines.push(Line::from(vec![
        Span::styled(fit("", label_w + value_w + 2), th.dim()),
        Span::styled(axis.into_iter().collect::<String>(), th.dim()),
    ]));
    let height = area.height.saturating_sub(2 + explained as u16) as usize;
    let first = app
        .selected_of(View::Timeline)
        .min(rows.len().saturating_sub(height.max(1)));
    for r in rows.iter().skip(first).take(height) {
        let mut cells = vec![(' ', Style::new()); axis_w];
        for b in &r.bars {
            let a = col(b.from_ns);
            let z = if b.to_ns > b.from_ns {
                col(b.to_ns - 1)
            } else {
                a
            };
            for x in a.max(0)..=z.min(axis_w as i64 - 1) {
                cells[x as usize] = (b.glyph, b.style);
            }
        }
        let mut spans = vec![
            Span::styled(fit(&r.label, label_w), r.style),
            Span::raw(" "),
            Span::raw(format!(
                "{:>w$} ",
                fit(r.value.trim_end(), value_w).trim_end(),
                w = value_w
            )),
        ];
        spans.extend(merge(&cells));
        lines.push(Line::from(spans));
    }
    f.render_widget(Paragraph::new(lines).block(block.title(title)), area);
}
