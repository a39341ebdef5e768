//! Latency histograms as the engine keeps them: microseconds, 2
//! significant digits, auto-resizing (hdrhistogram), and the exact
//! Prometheus bucket counts kept beside them. Shared by hook latency, CRI method latency and the last
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

/// The upper bounds (`le`) of every latency histogram nri-trace exports,
/// nanoseconds: from 100 µs (a plain hook) to 2 min (kubelet's default
/// runtime-request-timeout), with 2 s (NRI's default plugin request
/// timeout, nri `pkg/api` DefaultPluginRequestTimeout) between buckets.
pub const BUCKET_BOUNDS_NS: [u64; 14] = [
    100_000,
    500_000,
    1_000_000,
    5_000_000,
    10_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
    2_500_000_000,
    5_000_000_000,
    30_000_000_000,
    120_000_000_000,
];

/// A histogram as Prometheus wants it: cumulative counts at upper bounds
/// (`le`, [`BUCKET_BOUNDS_NS`]), the count, and the sum.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Buckets {
    /// Values <= each bound, cumulative.
    pub cumulative: Vec<u64>,
    pub count: u64,
    pub sum_ns: u64,
}

/// Exact counts per bucket of [`BUCKET_BOUNDS_NS`] and the exact sum,
/// kept beside the hdrhistograms: a Prometheus bucket must count every
/// value on its side of the bound, and at 2 significant digits a value
/// within 1% of a bound could land on either side (the exposition is
/// checked against the records, tests/tests/prometheus_lab.rs).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct BucketCounts {
    /// Values in (bound[i-1], bound[i]]; the last one is above every bound.
    per_bucket: [u64; BUCKET_BOUNDS_NS.len() + 1],
    sum_ns: u64,
}

impl BucketCounts {
    /// Count one value.
    pub(crate) fn observe(&mut self, ns: u64) {
        let i = BUCKET_BOUNDS_NS.partition_point(|&b| b < ns);
        self.per_bucket[i] += 1;
        self.sum_ns = self.sum_ns.saturating_add(ns);
    }

    /// The cumulative [`Buckets`].
    pub(crate) fn buckets(&self) -> Buckets {
        let mut total = 0;
        let cumulative = self.per_bucket[..BUCKET_BOUNDS_NS.len()]
            .iter()
            .map(|n| {
                total += n;
                total
            })
            .collect();
        Buckets {
            cumulative,
            count: self.per_bucket.iter().sum(),
            sum_ns: self.sum_ns,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_value_on_a_bound_counts_at_that_bound() {
        let mut c = BucketCounts::default();
        for ns in [1, 100_000, 100_001, 499_999, 200_000_000_000] {
            c.observe(ns);
        }
        let b = c.buckets();
        assert_eq!(&b.cumulative[..3], &[2, 4, 4]);
        assert_eq!(*b.cumulative.last().unwrap(), 4, "above every bound");
        assert_eq!(b.count, 5);
        assert_eq!(b.sum_ns, 1 + 100_000 + 100_001 + 499_999 + 200_000_000_000);
    }
}
