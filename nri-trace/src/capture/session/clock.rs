//! The capture's clocks: CLOCK_MONOTONIC (the clock the probes stamp
//! records with) and the wall clock that goes with it, and when the drain
//! loop sends the capture's clock into the stream ([`TickClock`]).

use crate::capture::Timestamp;

/// How far behind the drain's clock a [`CaptureEvent::Tick`] is stamped: a
/// probe stamps a record and submits it to the ring within microseconds
/// (the same program run), so every record stamped before then has been
/// read by a drain that found the ring empty this much later.
pub(crate) const TICK_LAG_NS: u64 = 50_000_000;
/// While the sockets stay quiet, a tick this often for the first
/// [`FAST_TICKS_FOR_NS`] (a call settles 10 ms after its end, an ambiguous
/// one within 3 s: each comes out within a tenth of a second)...
pub(crate) const FAST_TICK_NS: u64 = 100_000_000;
pub(crate) const FAST_TICKS_FOR_NS: u64 = 5_000_000_000;
/// ...then this often (capture time keeps moving for deadlines: a hung
/// hook's).
pub(crate) const IDLE_TICK_NS: u64 = 1_000_000_000;

/// When the drain loop sends the capture's clock ([`CaptureEvent::Tick`]):
/// once the sockets have been quiet for [`TICK_LAG_NS`] after their last
/// event, then every [`FAST_TICK_NS`], and after [`FAST_TICKS_FOR_NS`]
/// every [`IDLE_TICK_NS`], while they stay quiet. Never while
/// socket events flow (their own timestamps move capture time), and never
/// behind one already sent.
#[derive(Debug, Default)]
pub(super) struct TickClock {
    /// Monotonic time of the last drain that sent events.
    last_events_ns: u64,
    /// Whether events went since the last tick.
    events_since_tick: bool,
    last_tick_ns: u64,
}

impl TickClock {
    /// After a drain at `now` that found `sent` events: the tick to send, if due.
    pub(super) fn after_drain(&mut self, now: u64, sent: bool) -> Option<u64> {
        if sent {
            self.last_events_ns = now;
            self.events_since_tick = true;
            return None;
        }
        let quiet = now.saturating_sub(self.last_events_ns);
        let every = if quiet < FAST_TICKS_FOR_NS {
            FAST_TICK_NS
        } else {
            IDLE_TICK_NS
        };
        let due = if self.events_since_tick {
            quiet >= TICK_LAG_NS
        } else {
            now.saturating_sub(self.last_tick_ns) >= every
        };
        let at = now.checked_sub(TICK_LAG_NS)?;
        if !due || at < self.last_events_ns {
            return None;
        }
        self.last_tick_ns = now;
        self.events_since_tick = false;
        Some(at)
    }
}

/// CLOCK_MONOTONIC now, the clock of bpf_ktime_get_ns().
pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// CLOCK_REALTIME minus CLOCK_MONOTONIC now: the offset capture
/// timestamps' wall clock is derived with.
pub fn wall_offset_ns() -> i128 {
    i128::from(clock_ns(libc::CLOCK_REALTIME)) - i128::from(monotonic_ns())
}

/// Now as a capture [`Timestamp`]: CLOCK_MONOTONIC and the wall clock
/// that goes with it.
pub(crate) fn now_timestamp() -> Timestamp {
    let mono_ns = monotonic_ns();
    let wall_ns = u64::try_from(i128::from(mono_ns) + wall_offset_ns()).unwrap_or(0);
    Timestamp { mono_ns, wall_ns }
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    unsafe { libc::clock_gettime(clock, &raw mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// Ticks come only on quiet sockets: one a lag after the last events
    /// (stamped after them), then every 100 ms for 5 s, then every second;
    /// none while events flow.
    #[test]
    fn ticks_follow_quiet_never_flow() {
        let mut t = TickClock::default();
        let start = 10_000 * MS;
        let at = |t: &mut TickClock, ms: u64, events: bool| t.after_drain(start + ms * MS, events);
        assert_eq!(at(&mut t, 0, true), None, "events flow");
        assert_eq!(at(&mut t, 2, false), None, "not quiet long enough");
        let first = at(&mut t, 60, false).expect("quiet past the lag");
        assert!(first >= start, "stamped after the last events: {first}");
        assert_eq!(at(&mut t, 62, false), None, "not yet the next");
        let next = at(&mut t, 165, false).expect("100 ms later");
        assert!(next > first);
        // Past 5 s of quiet: a second apart.
        let late = at(&mut t, 6_000, false).expect("still ticking");
        assert_eq!(at(&mut t, 6_500, false), None, "a second apart now");
        let idle = at(&mut t, 7_001, false).expect("a second later");
        assert!(idle > late);
        assert_eq!(at(&mut t, 7_002, true), None, "events again");
        assert_eq!(at(&mut t, 7_020, false), None);
        let after = at(&mut t, 7_060, false).expect("quiet again");
        assert!(after >= start + 7_002 * MS);
    }
}
