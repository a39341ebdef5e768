//! The eBPF backend's own view of the kernel's tgid filter (`TGID_FILTER`,
//! `TRACKED_TGIDS`) and of who holds which `FD_TABLE` row: plain
//! bookkeeping, kept apart from the maps so it is tested without root.
//!
//! A process gets a row only when this side starts tracking it and the
//! kernel does not track it yet: no fd of it is tracked then, so its fds
//! below `FD_TABLE_FDS` live in the table from the first one on and each
//! fd has one home (`fd_table_index`). A process the kernel started
//! tracking at its bind (a restarted runtime) keeps the value the kernel
//! gave it, without a row: its listener is in `FDS` already.

use std::collections::{BTreeMap, BTreeSet};

use nri_trace_common::{filter_row, filter_value, FD_TABLE_ROWS, TGID_SLOTS, TGID_SLOT_SHARED};

#[derive(Debug, Default)]
pub(crate) struct TgidFilter {
    /// Filter slot -> the tracked tgids that map to it.
    slots: BTreeMap<u32, BTreeSet<u32>>,
    /// Tracked tgid -> its filter value (tgid and row).
    values: BTreeMap<u32, u32>,
}

/// The filter slot of `tgid`.
pub(crate) fn slot_of(tgid: u32) -> u32 {
    tgid & (TGID_SLOTS - 1)
}

impl TgidFilter {
    /// Track `tgid`; `kernel_value` is its value in `TRACKED_TGIDS` if the
    /// kernel tracks it already. Returns its value: the one it had, the
    /// kernel's, or a new one with the first free row (none when all rows
    /// are taken).
    pub(crate) fn add(&mut self, tgid: u32, kernel_value: Option<u32>) -> u32 {
        if let Some(&v) = self.values.get(&tgid) {
            return v;
        }
        let v = kernel_value.unwrap_or_else(|| filter_value(tgid, self.free_row()));
        self.values.insert(tgid, v);
        self.slots.entry(slot_of(tgid)).or_default().insert(tgid);
        v
    }

    /// The kernel's value for `tgid` won a race with ours: take it (and
    /// give back the row ours held).
    pub(crate) fn set_value(&mut self, tgid: u32, v: u32) {
        if let Some(old) = self.values.get_mut(&tgid) {
            *old = v;
        }
    }

    /// Stop tracking `tgid`; its value, if it was tracked.
    pub(crate) fn remove(&mut self, tgid: u32) -> Option<u32> {
        let slot = slot_of(tgid);
        if let Some(s) = self.slots.get_mut(&slot) {
            s.remove(&tgid);
            if s.is_empty() {
                self.slots.remove(&slot);
            }
        }
        self.values.remove(&tgid)
    }

    /// What `TGID_FILTER[slot]` should hold: 0, the one tgid's value, or
    /// "shared" (the programs then ask `TRACKED_TGIDS`). `remove` drops
    /// emptied slots, so a slot's set is never empty.
    pub(crate) fn slot_value(&self, slot: u32) -> u32 {
        match self.slots.get(&slot) {
            None => 0,
            Some(s) if s.len() == 1 => {
                let tgid = *s.iter().next().expect("one");
                self.values.get(&tgid).copied().unwrap_or(0)
            }
            Some(_) => TGID_SLOT_SHARED,
        }
    }

    /// `tgid`'s `FD_TABLE` row; `FD_TABLE_ROWS` when it has none or is
    /// not tracked.
    pub(crate) fn row(&self, tgid: u32) -> u32 {
        self.values
            .get(&tgid)
            .map_or(FD_TABLE_ROWS, |&v| filter_row(v))
    }

    fn free_row(&self) -> Option<u32> {
        let used: BTreeSet<u32> = self.values.values().map(|&v| filter_row(v)).collect();
        (0..FD_TABLE_ROWS).find(|r| !used.contains(r))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nri_trace_common::{fd_table_index, filter_tgid, FD_TABLE_FDS};

    #[test]
    fn first_processes_get_rows_then_fds_go_to_the_hash() {
        let mut f = TgidFilter::default();
        let tgids: Vec<u32> = (0..FD_TABLE_ROWS + 2).map(|i| 100 + i).collect();
        for &t in &tgids {
            let v = f.add(t, None);
            assert_eq!(filter_tgid(v), Some(t));
            assert_eq!(f.slot_value(slot_of(t)), v);
        }
        let rows: BTreeSet<u32> = tgids[..FD_TABLE_ROWS as usize]
            .iter()
            .map(|&t| f.row(t))
            .collect();
        assert_eq!(rows.len(), FD_TABLE_ROWS as usize, "distinct rows");
        for &t in &tgids[FD_TABLE_ROWS as usize..] {
            assert_eq!(f.row(t), FD_TABLE_ROWS, "no row left for {t}");
            assert_eq!(fd_table_index(f.row(t), 3), None);
        }
        // Tracking again changes nothing.
        let v = f.slot_value(slot_of(tgids[0]));
        assert_eq!(f.add(tgids[0], None), v);
        // A freed row goes to the next new process.
        let freed = f.row(tgids[3]);
        assert_eq!(f.remove(tgids[3]).map(filter_row), Some(freed));
        assert_eq!(f.slot_value(slot_of(tgids[3])), 0);
        assert_eq!(f.row(tgids[3]), FD_TABLE_ROWS);
        assert_eq!(filter_row(f.add(7, None)), freed);
        assert!(fd_table_index(freed, FD_TABLE_FDS - 1).is_some());
    }

    #[test]
    fn kernel_tracked_process_keeps_the_kernels_value() {
        let mut f = TgidFilter::default();
        // Bound by a restarted runtime: the kernel gave it no row.
        let v = f.add(500, Some(filter_value(500, None)));
        assert_eq!(filter_row(v), FD_TABLE_ROWS);
        assert_eq!(f.row(500), FD_TABLE_ROWS);
        // Our own value lost a race with the kernel's.
        let ours = f.add(501, None);
        assert!(filter_row(ours) < FD_TABLE_ROWS);
        f.set_value(501, filter_value(501, None));
        assert_eq!(f.row(501), FD_TABLE_ROWS);
        // The row is free again.
        assert_eq!(filter_row(f.add(502, None)), filter_row(ours));
    }

    #[test]
    fn tgids_of_one_slot_share_it() {
        let mut f = TgidFilter::default();
        let a = 42;
        let b = 42 + TGID_SLOTS;
        let va = f.add(a, None);
        assert_eq!(f.slot_value(slot_of(a)), va);
        f.add(b, None);
        assert_eq!(f.slot_value(slot_of(a)), TGID_SLOT_SHARED);
        // Each keeps its own row (the programs read it from TRACKED_TGIDS).
        assert_ne!(f.row(a), f.row(b));
        f.remove(a);
        assert_eq!(f.slot_value(slot_of(b)), f.add(b, None));
    }
}
