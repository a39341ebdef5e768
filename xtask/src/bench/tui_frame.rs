//! The tui-frame part: the TUI's frame time per view at 1,002 pods, and a
//! second of live load (100 records, 4 frames)
//! (`nri-trace/benches/tui_frame.rs`; no probes, no root needed).

use anyhow::Result;

use super::{
    criterion::{input_number, run_decode_bench},
    tables::fmt_f0,
};

// ------------------------------------------------------ part h: TUI frame

/// The benchmarks of `nri-trace/benches/tui_frame.rs`: (id, what).
const TUI_FRAME_IDS: [(&str, &str); 7] = [
    ("tui_frame/pods_80x24", "pods view, 80x24"),
    ("tui_frame/pods_200x50", "pods view, 200x50"),
    ("tui_frame/timeline_200x50", "timeline view, 200x50"),
    ("tui_frame/plugins_200x50", "plugins view, 200x50"),
    ("tui_frame/findings_200x50", "findings view, 200x50"),
    ("tui_frame/calls_200x50", "calls view, 200x50"),
    (
        "tui_frame/live_second_200x50",
        "one second of live load: 100 records + 4 frames of the pods view",
    ),
];
/// The TUI redraws every 250 ms: a frame must take far less.
const TUI_REDRAW_MS: f64 = 250.0;

pub(super) struct TuiFrame {
    /// The bench's `tui_frame input:` line, as printed.
    input: String,
    pods: f64,
    /// (id, what, criterion median ns).
    medians: Vec<(&'static str, &'static str, f64)>,
    cpu: Option<&'static str>,
}

/// Build and run the tui_frame bench and read its medians.
pub(super) fn tui_frame(quick: bool) -> Result<TuiFrame> {
    let ids: Vec<String> = TUI_FRAME_IDS.iter().map(|(id, _)| id.to_string()).collect();
    let run = run_decode_bench("tui_frame", &ids, quick)?;
    let input = run.inputs[0].clone();
    let medians = TUI_FRAME_IDS
        .iter()
        .map(|&(id, what)| Ok((id, what, run.median_ns(id)?)))
        .collect::<Result<_>>()?;
    Ok(TuiFrame {
        pods: input_number(&input, "pods")?,
        input,
        medians,
        cpu: run.cpu,
    })
}

pub(super) fn tui_frame_section(t: &TuiFrame) -> String {
    let mut s = format!(
        "## TUI frame time\n\n\
         One frame = `sinks::tui::draw` of one view into a ratatui `TestBackend` terminal \
         kept across frames (layout, widgets, diff), with {} pods in the `TuiState` (the \
         happy trace recording's records repeated with their own pods, ids and times); \
         one core ({}); criterion median.\n\n\
         Input: `{}`\n\n\
         | benchmark | what | time (ms) | share of the {TUI_REDRAW_MS} ms redraw period |\n\
         | --- | --- | ---: | ---: |\n",
        fmt_f0(t.pods),
        t.cpu.map_or_else(
            || "not pinned".to_string(),
            |c| format!("pinned to CPU {c}")
        ),
        t.input,
    );
    for (id, what, ns) in &t.medians {
        let ms = ns / 1e6;
        let share = if id.contains("live_second") {
            // Four periods in that second.
            format!("{:.2}% of the second", ms / 10.0)
        } else {
            format!("{:.2}%", ms / TUI_REDRAW_MS * 100.0)
        };
        s += &format!("| {id} | {what} | {ms:.3} | {share} |\n");
    }
    s
}
