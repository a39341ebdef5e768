//! UI state: which view, selection, sort, filter, zoom, pause, help. The
//! keys that change it are `keys.rs` ([`App::on_key`]).

use serde::Serialize;

/// The views, in tab order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum View {
    Pods,
    Timeline,
    Plugins,
    Findings,
    Calls,
}

impl View {
    pub const ALL: [View; 5] = [
        View::Pods,
        View::Timeline,
        View::Plugins,
        View::Findings,
        View::Calls,
    ];

    pub fn title(self) -> &'static str {
        match self {
            View::Pods => "Pods",
            View::Timeline => "Timeline",
            View::Plugins => "Plugins",
            View::Findings => "Findings",
            View::Calls => "Calls",
        }
    }

    pub(super) fn index(self) -> usize {
        View::ALL.iter().position(|v| *v == self).unwrap_or(0)
    }
}

/// Pods table sort columns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PodSort {
    /// Stuck first, then slow, then by name.
    Attention,
    Name,
    Age,
    LastCall,
    NriTime,
    Findings,
}

impl PodSort {
    #[must_use]
    pub fn next(self) -> Self {
        match self {
            PodSort::Attention => PodSort::Name,
            PodSort::Name => PodSort::Age,
            PodSort::Age => PodSort::LastCall,
            PodSort::LastCall => PodSort::NriTime,
            PodSort::NriTime => PodSort::Findings,
            PodSort::Findings => PodSort::Attention,
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            PodSort::Attention => "attention",
            PodSort::Name => "name",
            PodSort::Age => "age",
            PodSort::LastCall => "last call",
            PodSort::NriTime => "NRI time",
            PodSort::Findings => "findings",
        }
    }
}

/// Which call-log rows to show.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CallFilter {
    All,
    Cri,
    Nri,
    /// Failed calls and findings only.
    Problems,
}

impl CallFilter {
    #[must_use]
    pub fn next(self) -> Self {
        match self {
            CallFilter::All => CallFilter::Cri,
            CallFilter::Cri => CallFilter::Nri,
            CallFilter::Nri => CallFilter::Problems,
            CallFilter::Problems => CallFilter::All,
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            CallFilter::All => "all",
            CallFilter::Cri => "CRI",
            CallFilter::Nri => "NRI",
            CallFilter::Problems => "problems",
        }
    }
}

/// What to export.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExportScope {
    /// The rows of the current view (after its filter).
    Screen,
    /// Every record kept this session.
    Session,
}

/// What the loop must do after a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    None,
    Quit,
    /// Freeze (`true`) or resume the model.
    Pause(bool),
    Export(ExportScope),
}

/// A pod by identity, as the timeline follows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PodKey {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub attempt: u32,
}

/// Most timeline zoom steps (each halves the time per column).
pub(crate) const MAX_ZOOM: u32 = 16;

/// The UI state.
#[derive(Debug, Clone)]
pub struct App {
    pub view: View,
    pub help: bool,
    pub paused: bool,
    /// Typing a filter (after `/`).
    pub editing: bool,
    /// Filter text per view (by [`View::ALL`] index).
    pub filters: [String; 5],
    /// Selected row per view; for the timeline, the first row shown.
    pub selected: [usize; 5],
    pub pod_sort: PodSort,
    pub sort_reverse: bool,
    /// The pod the timeline shows (the selected pod when none).
    pub timeline_pod: Option<PodKey>,
    /// Timeline zoom: time per column is the pod's span / width / 2^zoom.
    pub zoom: u32,
    /// Timeline horizontal scroll, in columns.
    pub scroll: usize,
    /// The findings view shows the selected finding's evidence.
    pub finding_open: bool,
    pub call_filter: CallFilter,
    /// A one-line message for the footer (export result).
    pub message: Option<String>,
    /// Rows a page key moves (set by the last draw).
    pub page: usize,
}

impl Default for App {
    fn default() -> Self {
        App {
            view: View::Pods,
            help: false,
            paused: false,
            editing: false,
            filters: Default::default(),
            // The call log follows its tail until a row is chosen.
            selected: [0, 0, 0, 0, usize::MAX],
            pod_sort: PodSort::Attention,
            sort_reverse: false,
            timeline_pod: None,
            zoom: 0,
            scroll: 0,
            finding_open: false,
            call_filter: CallFilter::All,
            message: None,
            page: 10,
        }
    }
}

impl App {
    pub fn new() -> Self {
        Self::default()
    }

    /// The current view's filter text.
    pub fn filter(&self) -> &str {
        &self.filters[self.view.index()]
    }

    pub fn filter_of(&self, v: View) -> &str {
        &self.filters[v.index()]
    }

    /// The current view's selected row.
    pub fn selected(&self) -> usize {
        self.selected[self.view.index()]
    }

    pub fn selected_of(&self, v: View) -> usize {
        self.selected[v.index()]
    }

    pub(super) fn set_selected(&mut self, i: usize) {
        self.selected[self.view.index()] = i;
    }

    /// Rows of the current view (for moving the selection).
    /// Switch to `v`.
    pub fn show(&mut self, v: View) {
        self.view = v;
        self.editing = false;
        self.finding_open = false;
    }
}
