//! Keys to UI state: [`App::on_key`], a pure function of (key, model)
//! that changes only the [`App`] and says what the loop must do
//! ([`Action`]). Apart from `app.rs` because it needs the views' rows (how
//! many, which pod is selected), and the views need the `App`.

use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

use super::{
    app::{Action, App, ExportScope, PodKey, View, MAX_ZOOM},
    state::TuiState,
    views::{calls, findings, pods, timeline},
};

impl App {
    fn rows(&self, st: &TuiState) -> usize {
        match self.view {
            View::Pods => pods::rows(self, st).len(),
            View::Timeline => timeline::row_count(self, st),
            View::Plugins => st.hook_summaries().len() + st.method_summaries().len(),
            View::Findings => findings::rows(self, st).len(),
            View::Calls => calls::rows(self, st).len(),
        }
    }

    fn move_by(&mut self, delta: isize, st: &TuiState) {
        let max = self.rows(st).saturating_sub(1);
        let cur = self.selected().min(max);
        self.set_selected(cur.saturating_add_signed(delta).min(max));
    }

    /// The pod the timeline shows: the one chosen with Enter, else the
    /// selected row of the pods table.
    pub fn timeline_key(&self, st: &TuiState) -> Option<PodKey> {
        if let Some(k) = &self.timeline_pod {
            return Some(k.clone());
        }
        let rows = pods::rows(self, st);
        rows.get(
            self.selected_of(View::Pods)
                .min(rows.len().saturating_sub(1)),
        )
        .map(|p| PodKey {
            namespace: p.namespace.clone(),
            name: p.name.clone(),
            uid: p.uid.clone(),
            attempt: p.attempt,
        })
    }

    /// Handle one key; the model is only read.
    pub fn on_key(&mut self, key: KeyEvent, st: &TuiState) -> Action {
        if key.kind == KeyEventKind::Release {
            return Action::None;
        }
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        if ctrl && matches!(key.code, KeyCode::Char('c')) {
            return Action::Quit;
        }
        if self.editing {
            let i = self.view.index();
            match key.code {
                KeyCode::Esc => {
                    self.filters[i].clear();
                    self.editing = false;
                }
                KeyCode::Enter => self.editing = false,
                KeyCode::Backspace => {
                    self.filters[i].pop();
                }
                // Printable characters only: the filter is echoed on screen.
                KeyCode::Char(c) if !c.is_control() && self.filters[i].chars().count() < 64 => {
                    self.filters[i].push(c);
                }
                _ => {}
            }
            self.selected[i] = 0;
            return Action::None;
        }
        if self.help {
            if matches!(key.code, KeyCode::Char('q')) {
                return Action::Quit;
            }
            self.help = false;
            return Action::None;
        }
        self.message = None;
        match key.code {
            KeyCode::Char('q') => return Action::Quit,
            KeyCode::Char('?') => self.help = true,
            KeyCode::Char('p' | ' ') => {
                self.paused = !self.paused;
                return Action::Pause(self.paused);
            }
            KeyCode::Char('e') => return Action::Export(ExportScope::Screen),
            KeyCode::Char('E') => return Action::Export(ExportScope::Session),
            KeyCode::Char(c @ '1'..='5') => {
                let i = c as usize - '1' as usize;
                self.show(View::ALL[i]);
            }
            KeyCode::Tab => self.show(View::ALL[(self.view.index() + 1) % 5]),
            KeyCode::BackTab => self.show(View::ALL[(self.view.index() + 4) % 5]),
            KeyCode::Char('/') if self.view != View::Timeline && self.view != View::Plugins => {
                self.editing = true;
            }
            KeyCode::Esc => {
                if self.finding_open {
                    self.finding_open = false;
                } else {
                    self.filters[self.view.index()].clear();
                    if self.view == View::Timeline {
                        self.timeline_pod = None;
                    }
                }
            }
            KeyCode::Up | KeyCode::Char('k') => self.move_by(-1, st),
            KeyCode::Down | KeyCode::Char('j') => self.move_by(1, st),
            KeyCode::PageUp => self.move_by(-(self.page as isize), st),
            KeyCode::PageDown => self.move_by(self.page as isize, st),
            KeyCode::Home | KeyCode::Char('g') => self.set_selected(0),
            // Past the end: the views clamp it, and the call log follows
            // its tail from there.
            KeyCode::End | KeyCode::Char('G') => self.set_selected(usize::MAX),
            _ => return self.view_key(key, st),
        }
        Action::None
    }

    /// Keys that mean something in one view only.
    fn view_key(&mut self, key: KeyEvent, st: &TuiState) -> Action {
        match (self.view, key.code) {
            (View::Pods, KeyCode::Char('s')) => {
                self.pod_sort = self.pod_sort.next();
                self.set_selected(0);
            }
            (View::Pods, KeyCode::Char('r')) => self.sort_reverse = !self.sort_reverse,
            (View::Pods, KeyCode::Enter) => {
                self.timeline_pod = None;
                self.timeline_pod = self.timeline_key(st);
                self.zoom = 0;
                self.scroll = 0;
                self.selected[View::Timeline.index()] = 0;
                self.show(View::Timeline);
            }
            (View::Timeline, KeyCode::Char('+' | '=')) if self.zoom < MAX_ZOOM => {
                self.zoom += 1;
                self.scroll = self.scroll.saturating_mul(2);
            }
            (View::Timeline, KeyCode::Char('-')) if self.zoom > 0 => {
                self.zoom -= 1;
                self.scroll /= 2;
            }
            (View::Timeline, KeyCode::Left | KeyCode::Char('h')) => {
                self.scroll = self.scroll.saturating_sub(8);
            }
            (View::Timeline, KeyCode::Right | KeyCode::Char('l')) => {
                self.scroll = self.scroll.saturating_add(8);
            }
            (View::Timeline, KeyCode::Char('0')) => {
                self.zoom = 0;
                self.scroll = 0;
            }
            (View::Findings, KeyCode::Enter) => {
                self.finding_open = !self.finding_open && !findings::rows(self, st).is_empty();
            }
            (View::Calls, KeyCode::Char('c')) => {
                self.call_filter = self.call_filter.next();
                self.set_selected(0);
            }
            _ => {}
        }
        Action::None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sinks::tui::app::PodSort;

    fn key(c: KeyCode) -> KeyEvent {
        KeyEvent::new(c, KeyModifiers::NONE)
    }

    #[test]
    fn keys_switch_views_and_quit() {
        let st = TuiState::new();
        let mut app = App::new();
        assert_eq!(app.on_key(key(KeyCode::Char('3')), &st), Action::None);
        assert_eq!(app.view, View::Plugins);
        app.on_key(key(KeyCode::Tab), &st);
        assert_eq!(app.view, View::Findings);
        app.on_key(key(KeyCode::BackTab), &st);
        app.on_key(key(KeyCode::BackTab), &st);
        assert_eq!(app.view, View::Timeline);
        assert_eq!(app.on_key(key(KeyCode::Char('q')), &st), Action::Quit);
        let ctrl_c = KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL);
        assert_eq!(app.on_key(ctrl_c, &st), Action::Quit);
    }

    #[test]
    fn filter_editing_captures_q_and_esc_clears() {
        let st = TuiState::new();
        let mut app = App::new();
        app.on_key(key(KeyCode::Char('/')), &st);
        assert!(app.editing);
        // While typing, q is text, not quit.
        assert_eq!(app.on_key(key(KeyCode::Char('q')), &st), Action::None);
        app.on_key(key(KeyCode::Char('x')), &st);
        assert_eq!(app.filter(), "qx");
        app.on_key(key(KeyCode::Backspace), &st);
        assert_eq!(app.filter(), "q");
        app.on_key(key(KeyCode::Enter), &st);
        assert!(!app.editing);
        assert_eq!(app.filter(), "q");
        app.on_key(key(KeyCode::Esc), &st);
        assert_eq!(app.filter(), "");
    }

    #[test]
    fn pause_export_help_and_sort() {
        let st = TuiState::new();
        let mut app = App::new();
        assert_eq!(
            app.on_key(key(KeyCode::Char('p')), &st),
            Action::Pause(true)
        );
        assert_eq!(
            app.on_key(key(KeyCode::Char(' ')), &st),
            Action::Pause(false)
        );
        assert_eq!(
            app.on_key(key(KeyCode::Char('e')), &st),
            Action::Export(ExportScope::Screen)
        );
        assert_eq!(
            app.on_key(key(KeyCode::Char('E')), &st),
            Action::Export(ExportScope::Session)
        );
        app.on_key(key(KeyCode::Char('?')), &st);
        assert!(app.help);
        // Any key closes the help; q still quits.
        app.on_key(key(KeyCode::Char('x')), &st);
        assert!(!app.help);
        app.on_key(key(KeyCode::Char('s')), &st);
        assert_eq!(app.pod_sort, PodSort::Name);
        app.on_key(key(KeyCode::Char('r')), &st);
        assert!(app.sort_reverse);
        // Selection stays within an empty table.
        app.on_key(key(KeyCode::Down), &st);
        assert_eq!(app.selected(), 0);
    }

    #[test]
    fn timeline_zoom_and_scroll_are_bounded() {
        let st = TuiState::new();
        let mut app = App::new();
        app.show(View::Timeline);
        for _ in 0..40 {
            app.on_key(key(KeyCode::Char('+')), &st);
        }
        assert_eq!(app.zoom, MAX_ZOOM);
        app.on_key(key(KeyCode::Left), &st);
        assert_eq!(app.scroll, 0);
        app.on_key(key(KeyCode::Right), &st);
        assert_eq!(app.scroll, 8);
        app.on_key(key(KeyCode::Char('0')), &st);
        assert_eq!((app.zoom, app.scroll), (0, 0));
    }
}
