//! The terminal: raw mode and the alternate screen on entry, and their
//! undoing whichever way the TUI ends: the guard's drop (`q`, an error),
//! a panic on any thread (panic hook), SIGTERM, SIGHUP or SIGINT (a flag
//! the loop checks every poll). A shell left in raw mode on the alternate
//! screen is unusable, so every path restores.

use std::{
    io::{self, Stdout},
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Once,
    },
};

use crossterm::{
    cursor, execute,
    terminal::{self, EnterAlternateScreen, LeaveAlternateScreen},
};
use ratatui::{backend::CrosstermBackend, Terminal};
use signal_hook::{
    consts::{SIGHUP, SIGINT, SIGTERM},
    SigId,
};

/// The terminal is in TUI mode (raw, alternate screen).
static ACTIVE: AtomicBool = AtomicBool::new(false);
/// A panic restored the terminal: the loop must stop drawing.
static PANICKED: AtomicBool = AtomicBool::new(false);
static HOOK: Once = Once::new();

/// Undo raw mode and the alternate screen, if they are on.
pub(crate) fn restore() -> io::Result<()> {
    if !ACTIVE.swap(false, Ordering::SeqCst) {
        return Ok(());
    }
    let raw = terminal::disable_raw_mode();
    let screen = execute!(io::stdout(), LeaveAlternateScreen, cursor::Show);
    raw.and(screen)
}

/// Whether a panic restored the terminal.
pub(crate) fn panicked() -> bool {
    PANICKED.load(Ordering::SeqCst)
}

/// Restore the terminal before the panic message is printed, so that it
/// lands on the normal screen and the shell is usable after it.
fn install_panic_hook() {
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if ACTIVE.load(Ordering::SeqCst) {
                PANICKED.store(true, Ordering::SeqCst);
                let _ = restore();
            }
            previous(info);
        }));
    });
}

/// Holds the terminal in TUI mode; restores it when dropped.
#[derive(Debug)]
pub(crate) struct TerminalGuard {
    _private: (),
}

impl TerminalGuard {
    /// Enter raw mode and the alternate screen.
    pub(crate) fn enter() -> io::Result<(TerminalGuard, Terminal<CrosstermBackend<Stdout>>)> {
        install_panic_hook();
        terminal::enable_raw_mode()?;
        // From here on, the guard's drop undoes whatever succeeded.
        ACTIVE.store(true, Ordering::SeqCst);
        PANICKED.store(false, Ordering::SeqCst);
        let guard = TerminalGuard { _private: () };
        // Cleared with a plain escape sequence: ratatui's `clear` asks the
        // terminal for the cursor position, and a terminal (or serial
        // console) that does not answer would stop the TUI there.
        execute!(
            io::stdout(),
            EnterAlternateScreen,
            cursor::Hide,
            terminal::Clear(terminal::ClearType::All)
        )?;
        let term = Terminal::new(CrosstermBackend::new(io::stdout()))?;
        Ok((guard, term))
    }

    /// Restore now, reporting errors (the drop ignores them).
    #[allow(
        clippy::unused_self,
        reason = "takes the guard so that nothing draws after the restore; its drop's second restore is a no-op"
    )]
    pub(crate) fn restore(self) -> io::Result<()> {
        restore()
    }
}

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        let _ = restore();
    }
}

/// SIGTERM, SIGHUP and SIGINT as a flag: the loop sees it within one poll
/// and leaves through the guard. A second signal while the flag is set
/// exits at once (the loop may be stuck), without the restore.
#[derive(Debug)]
pub(crate) struct Signals {
    flag: Arc<AtomicBool>,
    ids: Vec<SigId>,
}

impl Signals {
    pub(crate) fn register() -> io::Result<Self> {
        let flag = Arc::new(AtomicBool::new(false));
        let mut ids = Vec::new();
        for sig in [SIGTERM, SIGHUP, SIGINT] {
            // Registered first, so it sees the flag as the previous
            // signal left it.
            ids.push(signal_hook::flag::register_conditional_shutdown(
                sig,
                1,
                Arc::clone(&flag),
            )?);
            ids.push(signal_hook::flag::register(sig, Arc::clone(&flag))?);
        }
        Ok(Signals { flag, ids })
    }

    /// A signal came.
    pub(crate) fn raised(&self) -> bool {
        self.flag.load(Ordering::SeqCst)
    }
}

impl Drop for Signals {
    fn drop(&mut self) {
        for id in self.ids.drain(..) {
            signal_hook::low_level::unregister(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signal_flag_is_raised_by_sigterm() {
        let s = Signals::register().expect("register");
        assert!(!s.raised());
        // Raised in this process: the flag handler runs, not the default
        // action (which would end the test run).
        signal_hook::low_level::raise(SIGTERM).expect("raise");
        assert!(s.raised());
        drop(s);
    }

    #[test]
    fn restore_without_entering_is_a_no_op() {
        assert!(restore().is_ok());
        assert!(!panicked());
    }
}
