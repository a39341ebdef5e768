//! Cells of the markdown tables: numbers, spreads over rounds, rates,
//! verdicts.

use super::rounds::median;

// --------------------------------------------------------------- helpers

/// "median (min-max)"
pub(super) fn fmt_spread(v: &[f64]) -> String {
    let min = v.iter().copied().fold(f64::INFINITY, f64::min);
    let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    format!("{:.1} ({min:.1}-{max:.1})", median(v))
}

pub(super) fn fmt_f(x: f64) -> String {
    format!("{x:.1}")
}

pub(super) fn fmt_f0(x: f64) -> String {
    format!("{x:.0}")
}

pub(super) fn fmt_rate(bytes_per_s: f64) -> String {
    if bytes_per_s <= 0.0 {
        "full speed".into()
    } else {
        format!("{:.1} MB/s", bytes_per_s / 1e6)
    }
}

pub(super) fn fmt_bytes(b: u64) -> String {
    format!("default {} MiB ring buffer", b >> 20)
}

pub(super) fn verdict(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "MISSED"
    }
}
