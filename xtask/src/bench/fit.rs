//! The line through the added cost per write size: per write and per byte.

use super::tables::verdict;

// --------------------------------------------------------------- helpers

/// The added cost per write and per byte: a least-squares line through
/// the write sizes whose captured runs lost no record. A size with losses
/// is left out: a failed ring-buffer output skips the copy, so its added
/// cost is not what capturing those bytes costs, and it pulled the line's
/// slope down and its per-write part up (docs/benchmarks.md as of f1fdc05, 2026-11-22).
pub(super) struct SizeFit {
    /// (ns per byte, ns per write); None with fewer than two sizes.
    line: Option<(f64, f64)>,
    sizes: Vec<u64>,
    /// (size, records lost) of the sizes left out.
    left_out: Vec<(u64, u64)>,
}

impl SizeFit {
    pub(super) fn new(points: impl Iterator<Item = (u64, f64, u64)>) -> Self {
        let (mut xs, mut ys, mut sizes, mut left_out) = (vec![], vec![], vec![], vec![]);
        for (size, added, lost) in points {
            if lost > 0 {
                left_out.push((size, lost));
            } else {
                xs.push(size as f64);
                ys.push(added);
                sizes.push(size);
            }
        }
        let line = (xs.len() >= 2).then(|| fit(&xs, &ys));
        SizeFit {
            line,
            sizes,
            left_out,
        }
    }

    /// The sizes the line goes through, "64, 4096".
    fn sizes_used(&self) -> String {
        let sizes: Vec<String> = self.sizes.iter().map(u64::to_string).collect();
        sizes.join(", ")
    }

    pub(super) fn sentence(&self) -> String {
        let left: Vec<String> = self
            .left_out
            .iter()
            .map(|(size, lost)| format!("{size} B ({lost} records lost)"))
            .collect();
        let left = if left.is_empty() {
            String::new()
        } else {
            format!(
                "; left out, since the capture lost records there: {}",
                left.join(", ")
            )
        };
        match self.line {
            Some((slope, intercept)) => format!(
                "\nLeast-squares fit of the added cost over the write sizes without lost \
                 records ({} B{left}): {intercept:.1} ns per write + {slope:.4} ns per byte \
                 ({:.0} ns per KiB).\n",
                self.sizes_used(),
                slope * 1024.0
            ),
            None => format!("\nNo fit: fewer than two write sizes without lost records{left}.\n"),
        }
    }

    /// The targets table's row for the per-write part.
    pub(super) fn target_row(&self, what: &str) -> String {
        match self.line {
            Some((slope, intercept)) => format!(
                "| {what}, per-write part of the fit over {} B (plus {slope:.4} ns per byte) \
                 | {intercept:+.1} ns | {} |\n",
                self.sizes_used(),
                verdict(intercept < 1000.0)
            ),
            None => format!(
                "| {what}, per-write part of the fit | no fit: fewer than two sizes without loss \
                 | not measured |\n"
            ),
        }
    }
}

/// Least-squares line through (xs, ys): (slope, intercept).
fn fit(xs: &[f64], ys: &[f64]) -> (f64, f64) {
    let n = xs.len() as f64;
    let mx = xs.iter().sum::<f64>() / n;
    let my = ys.iter().sum::<f64>() / n;
    let sxy: f64 = xs.iter().zip(ys).map(|(x, y)| (x - mx) * (y - my)).sum();
    let sxx: f64 = xs.iter().map(|x| (x - mx) * (x - mx)).sum();
    let slope = sxy / sxx;
    (slope, my - slope * mx)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_fit_leaves_out_lossy_sizes() {
        let f = SizeFit::new([(64, 800.0, 0), (4096, 1200.0, 0), (65536, 900.0, 7)].into_iter());
        let (slope, intercept) = f.line.unwrap();
        assert!((slope - 400.0 / 4032.0).abs() < 1e-9);
        assert!((intercept - (800.0 - 64.0 * slope)).abs() < 1e-9);
        assert_eq!(f.left_out, vec![(65536, 7)]);
        assert!(f.sentence().contains("65536 B (7 records lost)"));
        assert!(f.target_row("x").contains("over 64, 4096 B"));
        let one = SizeFit::new([(64, 800.0, 0), (4096, 1200.0, 3)].into_iter());
        assert!(one.line.is_none());
        assert!(one.target_row("x").contains("not measured"));
    }
}
