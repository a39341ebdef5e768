//! Medians over interleaved rounds, and differences paired round by round.

// --------------------------------------------------------------- helpers

pub(super) fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    match s.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => s[n / 2],
        n => f64::midpoint(s[n / 2 - 1], s[n / 2]),
    }
}

/// Median of the element-wise differences a[r] - b[r].
pub(super) fn paired_diff(a: &[f64], b: &[f64]) -> f64 {
    median(&paired_diffs(a, b))
}

/// a - b, round by round.
pub(super) fn paired_diffs(a: &[f64], b: &[f64]) -> Vec<f64> {
    a.iter().zip(b).map(|(x, y)| x - y).collect()
}
