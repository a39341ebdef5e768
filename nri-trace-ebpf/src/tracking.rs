//! Process and fd tracking: whether the caller's tgid is tracked (the
//! `TGID_FILTER` slot, else `TRACKED_TGIDS`), and the state of its tracked
//! fds wherever `fd_table_index` puts them (an `FD_TABLE` row or `FDS`):
//! look up, start tracking (and tell userspace), stop tracking.

use nri_trace_common::{
    counter, fd_table_index, filter_row, filter_tgid, FdKey, FdState, EntryHeader, EntryKind,
    Syscall, FD_CONN, TGID_SLOTS, TGID_SLOT_SHARED,
};

use crate::{
    context::config,
    emit::{bump, emit_header, header},
    maps::{FDS, FD_TABLE, TGID_FILTER, TRACKED_TGIDS},
};

/// A tracked process: its tgid and `FD_TABLE` row (`FD_TABLE_ROWS`: none).
#[derive(Clone, Copy)]
pub(crate) struct Tracked {
    pub(crate) tgid: u32,
    pub(crate) row: u32,
}

#[inline(always)]
pub(crate) fn tracked(tgid: u32) -> Option<Tracked> {
    let v = *TGID_FILTER.get(tgid & (TGID_SLOTS - 1))?;
    // The usual answers first: the slot is this tgid's, or not shared.
    if filter_tgid(v) == Some(tgid) {
        return Some(Tracked {
            tgid,
            row: filter_row(v),
        });
    }
    if v != TGID_SLOT_SHARED {
        return None;
    }
    let v = *unsafe { TRACKED_TGIDS.get(tgid) }?;
    Some(Tracked {
        tgid,
        row: filter_row(v),
    })
}

/// The state of tracked fd `fd` of `t`, wherever `fd_table_index` puts it.
#[inline(always)]
pub(crate) fn fd_get(t: Tracked, fd: u32) -> Option<*mut FdState> {
    match fd_table_index(t.row, fd) {
        Some(i) => {
            let p = FD_TABLE.get_ptr_mut(i)?;
            unsafe { (*p).is_of(t.tgid) }.then_some(p)
        }
        None => FDS.get_ptr_mut(&FdKey { tgid: t.tgid, fd }),
    }
}

/// Start tracking `fd` of `t` with `flags` (sequence numbers from 0);
/// false when `FDS` is full.
#[inline(always)]
fn fd_insert(t: Tracked, fd: u32, flags: u32) -> bool {
    let st = FdState::new(t.tgid, flags);
    match fd_table_index(t.row, fd) {
        Some(i) => match FD_TABLE.get_ptr_mut(i) {
            Some(p) => {
                unsafe { *p = st };
                true
            }
            None => false,
        },
        None => FDS.insert(&FdKey { tgid: t.tgid, fd }, &st, 0).is_ok(),
    }
}

/// Stop tracking `fd` of `t`; whether it was tracked.
#[inline(always)]
pub(crate) fn fd_remove(t: Tracked, fd: u32) -> bool {
    match fd_table_index(t.row, fd) {
        Some(i) => {
            let Some(p) = FD_TABLE.get_ptr_mut(i) else {
                return false;
            };
            unsafe {
                if (*p).is_of(t.tgid) {
                    (*p).flags = 0;
                    true
                } else {
                    false
                }
            }
        }
        None => FDS.remove(&FdKey { tgid: t.tgid, fd }).is_ok(),
    }
}

/// Start tracking `fd` of `t` as a connection and tell userspace.
#[inline(always)]
pub(crate) fn track_fd(sc: Syscall, t: Tracked, pid_tgid: u64, fd: i32, aux: i32) {
    let hdr = header(EntryKind::Open, sc, pid_tgid, fd, aux, fd as i64);
    track_fd_reported(t, &hdr, FD_CONN, config().wakeup_bytes);
}

/// Start tracking the fd `hdr` names of `t` with `flags`, then emit `hdr`;
/// a full fd map is counted instead.
#[inline(always)]
pub(crate) fn track_fd_reported(t: Tracked, hdr: &EntryHeader, flags: u32, wakeup_bytes: u32) {
    if !fd_insert(t, hdr.fd as u32, flags) {
        bump(counter::FD_MAP_FULL, 1);
        return;
    }
    emit_header(hdr, wakeup_bytes);
}
