//! Latency histograms as the engine keeps them: microseconds, 2
//! significant digits, auto-resizing (hdrhistogram), and their Prometheus
//! buckets. Shared by hook latency, CRI method latency and the last
//! minute's windows.

use hdrhistogram::Histogram;

/// Nanoseconds to the histograms' microseconds (at least 1).
fn us(ns: u64) -> u64 {
    (ns / 1000).max(1)
}

/// Record `ns` (as µs). `record` grows an auto-resizing histogram;
/// `saturating_record` would clamp to its current range instead.
pub(crate) fn record(h: &mut Histogram<u32>, ns: u64) {
    let v = us(ns);
    if h.record(v).is_err() {
        h.saturating_record(v);
    }
}

/// A histogram as Prometheus wants it: cumulative counts at upper bounds
/// (`le`), the count, and the sum.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Buckets {
    /// Values <= each bound (nanoseconds), cumulative.
    pub cumulative: Vec<u64>,
    pub count: u64,
    /// Sum of the values, from the histogram's mean (exact to its 2
    /// significant digits).
    pub sum_ns: u64,
}

/// [`Buckets`] of a microsecond histogram at `bounds_ns`.
pub(crate) fn buckets(h: &Histogram<u32>, bounds_ns: &[u64]) -> Buckets {
    Buckets {
        cumulative: bounds_ns
            .iter()
            .map(|b| {
                if h.is_empty() {
                    0
                } else {
                    h.count_between(0, b / 1000)
                }
            })
            .collect(),
        count: h.len(),
        sum_ns: (h.mean() * h.len() as f64 * 1000.0) as u64,
    }
}
