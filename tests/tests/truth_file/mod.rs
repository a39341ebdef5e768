//! Truth files of lab runs: plain, as a live run leaves them, or gzipped,
//! as committed fixtures are.
#![allow(dead_code)]

use std::{io::BufReader, path::Path};

use nri_trace_lab::truth::{self, Truth};

/// Every record of the truth file at `path` (gzipped if it ends in .gz).
pub(crate) fn read(path: &Path) -> Vec<Truth> {
    let f = std::fs::File::open(path)
        .unwrap_or_else(|e| panic!("reading truth {}: {e}", path.display()));
    let r = if path.extension().is_some_and(|e| e == "gz") {
        truth::read_from(BufReader::new(flate2::read::MultiGzDecoder::new(f)))
    } else {
        truth::read_from(BufReader::new(f))
    };
    r.unwrap_or_else(|e| panic!("reading truth {}: {e}", path.display()))
}
