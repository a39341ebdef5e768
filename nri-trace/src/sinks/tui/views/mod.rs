//! One module per view; each renders [`super::state::TuiState`] as the
//! [`super::app::App`] says (selection, sort, filter, zoom) and decides
//! nothing about the trace itself.

pub(crate) mod calls;
pub(crate) mod findings;
pub(crate) mod help;
pub(crate) mod plugins;
pub(crate) mod pods;
pub(crate) mod status;
pub(crate) mod timeline;

use ratatui::{
    layout::{Constraint, Rect},
    style::{Color, Modifier, Style},
    text::Line,
    widgets::{Block, Borders, Row, Table, TableState},
    Frame,
};

/// A list of rows under `header` and a top border titled `title`, with the
/// `selected` row (counted from the first one shown) highlighted: the
/// table every list view draws.
#[allow(clippy::too_many_arguments)]
pub(crate) fn list_table<'a>(
    f: &mut Frame<'_>,
    area: Rect,
    rows: Vec<Row<'a>>,
    widths: impl IntoIterator<Item = Constraint>,
    header: Row<'a>,
    title: impl Into<Line<'a>>,
    selected: Option<usize>,
    th: Theme,
) {
    let table = Table::new(rows, widths)
        .header(header.style(th.header()))
        .block(Block::default().borders(Borders::TOP).title(title.into()))
        .row_highlight_style(th.selected());
    let mut ts = TableState::default();
    ts.select(selected);
    f.render_stateful_widget(table, area, &mut ts);
}

/// Styles, with or without colors (`NO_COLOR`: bold and reverse only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Theme {
    pub color: bool,
}

impl Theme {
    /// Colors unless `NO_COLOR` is set to a non-empty value (no-color.org).
    pub fn from_env() -> Self {
        Theme {
            color: std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()),
        }
    }

    pub fn plain() -> Self {
        Theme { color: false }
    }

    pub fn colored() -> Self {
        Theme { color: true }
    }

    fn fg(self, c: Color) -> Style {
        if self.color {
            Style::new().fg(c)
        } else {
            Style::new()
        }
    }

    pub fn header(&self) -> Style {
        self.fg(Color::Cyan).add_modifier(Modifier::BOLD)
    }

    pub fn selected(&self) -> Style {
        Style::new().add_modifier(Modifier::REVERSED)
    }

    /// Failures, stuck pods, errors.
    pub fn bad(&self) -> Style {
        self.fg(Color::Red).add_modifier(Modifier::BOLD)
    }

    /// Slow, warnings.
    pub fn warn(&self) -> Style {
        if self.color {
            Style::new().fg(Color::Yellow)
        } else {
            Style::new().add_modifier(Modifier::BOLD)
        }
    }

    pub fn good(&self) -> Style {
        self.fg(Color::Green)
    }

    /// Secondary text.
    pub fn dim(&self) -> Style {
        self.fg(Color::DarkGray)
    }

    /// NRI hook bars and plugin names.
    pub fn accent(&self) -> Style {
        self.fg(Color::Magenta)
    }
}

/// An age, coarse: "42s", "5m", "3h", "2d".
pub(crate) fn age(ns: u64) -> String {
    let s = ns / 1_000_000_000;
    if s < 120 {
        format!("{s}s")
    } else if s < 7_200 {
        format!("{}m", s / 60)
    } else if s < 172_800 {
        format!("{}h", s / 3_600)
    } else {
        format!("{}d", s / 86_400)
    }
}

/// First row to show so that `selected` is visible in `height` rows.
pub(crate) fn window_start(selected: usize, height: usize) -> usize {
    selected.saturating_sub(height.saturating_sub(1))
}

/// Whether `hay` contains `needle`, ignoring ASCII case (an empty needle
/// matches).
pub(crate) fn matches(hay: &str, needle: &str) -> bool {
    needle.is_empty()
        || hay
            .to_ascii_lowercase()
            .contains(&needle.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_are_short() {
        assert_eq!(age(42_000_000_000), "42s");
        assert_eq!(age(600_000_000_000), "10m");
        assert_eq!(window_start(3, 10), 0);
        assert_eq!(window_start(30, 10), 21);
        assert!(matches("Kube-System/web", "kube-system"));
    }
}
