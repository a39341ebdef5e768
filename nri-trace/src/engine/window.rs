//! Latency over a sliding window of capture time: the last
//! [`WINDOW_NS`], kept as [`SLOTS`] histograms of one slot each (a value
//! lands in the slot of its timestamp), merged when asked. Capture time,
//! not wall time, so a replay gives the same windows as the live run.

use std::collections::VecDeque;

use hdrhistogram::Histogram;
use serde::Serialize;

use super::histogram::record;

/// The window: one minute.
pub(crate) const WINDOW_NS: u64 = 60_000_000_000;
/// Slots per window (10 s each).
pub(crate) const SLOTS: u64 = 6;
const SLOT_NS: u64 = WINDOW_NS / SLOTS;

/// Counts and percentiles over the window.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct WindowStats {
    /// The window's length, seconds.
    pub seconds: u64,
    pub calls: u64,
    pub p50_ns: u64,
    pub p90_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
}

/// Microsecond histograms per slot, newest last.
#[derive(Debug, Default)]
pub(crate) struct Windowed {
    slots: VecDeque<(u64, Histogram<u32>)>,
}

impl Windowed {
    /// Record `ns` at capture time `at_ns`.
    pub(crate) fn record(&mut self, at_ns: u64, ns: u64) {
        let slot = at_ns / SLOT_NS;
        if self.slots.back().is_none_or(|(s, _)| *s < slot) {
            self.slots
                .push_back((slot, Histogram::new(2).expect("2 significant digits")));
        }
        // A value older than the newest slot goes to its own slot if kept.
        if let Some((_, h)) = self.slots.iter_mut().rev().find(|(s, _)| *s <= slot) {
            record(h, ns);
        }
        while self.slots.len() as u64 > SLOTS {
            self.slots.pop_front();
        }
    }

    /// The window ending at capture time `now_ns`.
    pub(crate) fn stats(&self, now_ns: u64) -> WindowStats {
        let now_slot = now_ns / SLOT_NS;
        let mut merged: Option<Histogram<u32>> = None;
        for (s, h) in &self.slots {
            if *s + SLOTS <= now_slot {
                continue;
            }
            match merged.as_mut() {
                None => merged = Some(h.clone()),
                Some(m) => {
                    let _ = m.add(h);
                }
            }
        }
        let seconds = WINDOW_NS / 1_000_000_000;
        match merged.filter(|m| !m.is_empty()) {
            None => WindowStats {
                seconds,
                ..Default::default()
            },
            Some(m) => WindowStats {
                seconds,
                calls: m.len(),
                p50_ns: m.value_at_quantile(0.5) * 1000,
                p90_ns: m.value_at_quantile(0.9) * 1000,
                p99_ns: m.value_at_quantile(0.99) * 1000,
                max_ns: m.max() * 1000,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    #[test]
    fn old_values_leave_the_window() {
        let mut w = Windowed::default();
        w.record(0, 5_000_000);
        w.record(30 * S, 1_000_000);
        w.record(55 * S, 2_000_000);
        let at_59 = w.stats(59 * S);
        assert_eq!(at_59.calls, 3);
        assert_eq!(at_59.max_ns / 1_000_000, 5);
        // At 75 s the slot of t=0 (0..10 s) is out; 30 s and 55 s stay.
        let at_75 = w.stats(75 * S);
        assert_eq!(at_75.calls, 2);
        assert_eq!(at_75.max_ns / 1_000_000, 2);
        assert_eq!(w.stats(500 * S).calls, 0);
        assert_eq!(w.stats(500 * S).seconds, 60);
    }

    #[test]
    fn bounded_slots() {
        let mut w = Windowed::default();
        for i in 0..1000 {
            w.record(i * S, 1000);
        }
        assert!(w.slots.len() as u64 <= SLOTS);
        assert_eq!(w.stats(999 * S).calls, 60);
    }
}
