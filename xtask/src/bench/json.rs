//! Numbers and strings out of flat JSON (criterion's estimates, nri-trace's
//! lines).

// --------------------------------------------------------------- helpers

/// The number after the last of `keys`, each searched after the previous
/// one (enough for criterion's and nri-trace's flat JSON; xtask has no JSON
/// dependency).
pub(crate) fn json_number(s: &str, keys: &[&str]) -> Option<f64> {
    let mut at = 0;
    for k in keys {
        at += s[at..].find(k)? + k.len();
    }
    let rest = s[at..].trim_start();
    let end = rest
        .find(|c: char| !(c.is_ascii_digit() || "+-.eE".contains(c)))
        .unwrap_or(rest.len());
    rest[..end].parse().ok()
}

/// The string value after `key` (no escapes expected: paths).
pub(crate) fn json_string(s: &str, key: &str) -> Option<String> {
    let at = s.find(key)? + key.len();
    let rest = s[at..].trim_start().strip_prefix('"')?;
    Some(rest[..rest.find('"')?].to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_criterion_median() {
        let s = r#"{"mean":{"confidence_interval":{"lower_bound":1.0},"point_estimate":2.5},"median":{"confidence_interval":{"confidence_level":0.95},"point_estimate":136.93,"standard_error":0.3},"median_abs_dev":{"point_estimate":2.4}}"#;
        assert_eq!(
            json_number(s, &["\"median\":", "\"point_estimate\":"]),
            Some(136.93)
        );
    }
}
