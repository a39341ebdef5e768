//! The code's shape, held (issue 35): docs/architecture.md's module table
//! and the tree agree; docs/contract.md's rule table is the code's; each
//! contract rule lives in one file; no non-test file is over 1,000 lines;
//! the library's stages import each other in one direction; its public
//! modules are the few namespaces listed here.

use std::{collections::BTreeSet, path::Path};

fn rust_files(dir: &Path, root: &Path, out: &mut BTreeSet<String>) {
    for e in std::fs::read_dir(dir).expect("source dir").flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, root, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.insert(p.strip_prefix(root).unwrap().display().to_string());
        }
    }
}

#[test]
fn the_module_table_and_the_tree_agree() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let src = repo.join("nri-trace/src");
    let mut files = BTreeSet::new();
    rust_files(&src, &src, &mut files);
    // A module's unit tests in a file of their own (`x/tests.rs`) belong
    // to the module's row; a row may name them (assemble/cri/tests.rs).
    files.retain(|f| !is_test_file(f));
    let doc = std::fs::read_to_string(repo.join("docs/architecture.md")).unwrap();
    // The table rows: "| `path.rs` | ... |".
    let named: BTreeSet<String> = doc
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split_once("` |"))
        .map(|(p, _)| p.to_string())
        .filter(|p| Path::new(p).extension().is_some_and(|e| e == "rs") && !is_test_file(p))
        .collect();
    let missing: Vec<_> = files.difference(&named).collect();
    let gone: Vec<_> = named.difference(&files).collect();
    assert!(
        missing.is_empty(),
        "files not in docs/architecture.md: {missing:?}"
    );
    assert!(
        gone.is_empty(),
        "docs/architecture.md names files that do not exist: {gone:?}"
    );
}

/// The severity as docs/contract.md writes it.
fn severity_word(s: nri_trace::engine::Severity) -> String {
    serde_json::to_value(s)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

/// docs/contract.md's rule table is `contract::RULES`, row for row: the
/// id, severity, statement and source each rule's file gives.
#[test]
fn the_contract_doc_table_is_the_rule_table() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let doc = std::fs::read_to_string(repo.join("docs/contract.md")).unwrap();
    let rows: Vec<&str> = doc
        .lines()
        .skip_while(|l| !l.starts_with("| id | severity | rule | source |"))
        .skip(2)
        .take_while(|l| l.starts_with("| `"))
        .collect();
    let want: Vec<String> = nri_trace::engine::contract::RULES
        .iter()
        .map(|r| {
            format!(
                "| `{}` | {} | {} | {} |",
                r.id,
                severity_word(r.severity),
                r.statement,
                r.source
            )
        })
        .collect();
    assert!(
        rows == want,
        "docs/contract.md's rule table differs from contract::RULES; the table should read:\n{}",
        want.join("\n")
    );
}

/// Each contract rule lives in one file under engine/contract/: its id
/// is written in that file alone, and that file words its findings (a
/// `sentence`).
#[test]
fn each_rule_is_in_one_file() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let src = repo.join("nri-trace/src");
    let mut files = BTreeSet::new();
    rust_files(&src, &src, &mut files);
    let texts: Vec<(String, String)> = files
        .iter()
        .map(|f| (f.clone(), std::fs::read_to_string(src.join(f)).unwrap()))
        .collect();
    for r in nri_trace::engine::contract::RULES {
        let quoted = format!("id: \"{}\"", r.id);
        let homes: Vec<&str> = texts
            .iter()
            .filter(|(_, t)| t.contains(&quoted))
            .map(|(f, _)| f.as_str())
            .collect();
        assert_eq!(homes.len(), 1, "rule {} is defined in {homes:?}", r.id);
        let home = homes[0];
        assert!(
            home.starts_with("engine/contract/"),
            "rule {} lives in {home}, not under engine/contract/",
            r.id
        );
        let text = &texts.iter().find(|(f, _)| f == home).unwrap().1;
        assert!(
            text.contains("fn sentence"),
            "{home} does not word its findings"
        );
        // Nowhere else spells the id out: code names the rule by its RULE.
        let spelled = format!("\"{}\"", r.id);
        let elsewhere: Vec<&str> = texts
            .iter()
            .filter(|(f, t)| f != home && t.contains(&spelled))
            .map(|(f, _)| f.as_str())
            .collect();
        assert!(
            elsewhere.is_empty(),
            "rule {} is spelled out in {elsewhere:?} besides its own file {home}",
            r.id
        );
    }
}

/// Whether `file` (relative to the repository) is test code: a module's
/// unit tests in a file of their own (`#[cfg(test)] mod tests;` in
/// `x.rs`, its body in `x/tests.rs`) or an integration test (in a
/// package's `tests/` directory; the tests package's own `tests/src/`, the
/// traced peer and shared helpers, is checked).
fn is_test_file(file: &str) -> bool {
    file.ends_with("/tests.rs") || file.contains("/tests/")
}

/// Every non-test Rust file of the project, one person can own: under
/// 1,000 lines, its test modules included (a long file's unit tests go
/// to a `tests.rs` of their own, as in engine/teardown/tests.rs).
#[test]
fn no_non_test_file_is_over_1000_lines() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut files = BTreeSet::new();
    for dir in [
        "nri-trace",
        "nri-trace-common",
        "nri-trace-ebpf",
        "lab",
        "xtask",
        "fuzz",
        "tests/src",
    ] {
        let d = repo.join(dir);
        if d.is_dir() {
            rust_files(&d, &repo, &mut files);
        }
    }
    let too_long: Vec<(String, usize)> = files
        .iter()
        .filter(|f| !f.contains("/target/") && !is_test_file(f))
        .map(|f| {
            let text = std::fs::read_to_string(repo.join(f)).unwrap();
            (f.clone(), text.lines().count())
        })
        .filter(|(_, n)| *n > 1000)
        .collect();
    assert!(
        too_long.is_empty(),
        "non-test files over 1,000 lines: {too_long:?}"
    );
}

/// The library's public modules: its stages, and inside them only the
/// namespaces the binary and the tests call by name (the two loops, the
/// four file formats, explain and the TUI, the contract rules). Everything
/// else is private to its stage, which re-exports its boundary types, so
/// `unreachable_pub` and the dead-code lint see it (issue 35). A new
/// `pub mod` fails here: re-export what is needed instead, or add it to
/// this list with the reason.
#[test]
fn the_public_modules_are_the_listed_namespaces() {
    const PUBLIC: &[&str] = &[
        "assemble",
        "basic_types",
        "capture",
        "decode",
        "doctor",
        "engine",
        "engine::contract",
        "human",
        "model",
        "output",
        "pipeline",
        "pipeline::live",
        "pipeline::replay",
        "sinks",
        "sinks::explain",
        "sinks::tui",
        "store",
        "store::flight_recorder",
        "store::ndjson",
        "store::raw_capture",
        "store::record_file",
        "testing",
    ];
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../nri-trace/src");
    let mut files = BTreeSet::new();
    rust_files(&src, &src, &mut files);
    let mut public = BTreeSet::new();
    for f in files.iter().filter(|f| !is_test_file(f)) {
        // lib.rs is the root; x/mod.rs and x.rs are module x.
        let module = f
            .trim_end_matches(".rs")
            .trim_end_matches("/mod")
            .replace('/', "::");
        let module = if module == "lib" {
            String::new()
        } else {
            module
        };
        let text = std::fs::read_to_string(src.join(f)).unwrap();
        for name in text
            .lines()
            .filter_map(|l| l.strip_prefix("pub mod "))
            .filter_map(|l| l.strip_suffix(';'))
        {
            public.insert(if module.is_empty() {
                name.to_string()
            } else {
                format!("{module}::{name}")
            });
        }
    }
    let listed: BTreeSet<String> = PUBLIC.iter().map(ToString::to_string).collect();
    let unlisted: Vec<_> = public.difference(&listed).collect();
    let gone: Vec<_> = listed.difference(&public).collect();
    assert!(
        unlisted.is_empty(),
        "public modules not in the list (make them private and re-export what is needed): {unlisted:?}"
    );
    assert!(gone.is_empty(), "listed, no longer public: {gone:?}");
}

#[test]
fn test_files_are_told_apart() {
    assert!(is_test_file("nri-trace/src/engine/teardown/tests.rs"));
    assert!(is_test_file("lab/tests/scenarios.rs"));
    assert!(is_test_file("tests/tests/capture.rs"));
    assert!(!is_test_file("tests/src/lib.rs"));
    assert!(!is_test_file("nri-trace/src/engine/teardown.rs"));
    assert!(!is_test_file("nri-trace/src/capture/tests_helper.rs"));
}

/// The library's stages (its top-level modules) import each other in one
/// direction only: capture <- decode <- model <- assemble <- engine <-
/// pipeline <- sinks, the files (store, after the model) read and written
/// by the pipeline and the sinks, with the helpers (human, output, doctor)
/// beside them; no circle.
#[test]
fn the_stages_import_in_one_direction() {
    use std::collections::BTreeMap;
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let src = repo.join("nri-trace/src");
    let mut files = BTreeSet::new();
    rust_files(&src, &src, &mut files);
    let stage_of = |f: &str| {
        f.split('/')
            .next()
            .unwrap_or(f)
            .trim_end_matches(".rs")
            .to_string()
    };
    let stages: BTreeSet<String> = files
        .iter()
        .map(|f| stage_of(f))
        .filter(|s| s != "lib" && s != "main")
        .collect();
    let mut deps: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in &files {
        let from = stage_of(f);
        // Test modules may reach anywhere: those in files of their own too.
        if !stages.contains(&from) || is_test_file(f) {
            continue;
        }
        let text = std::fs::read_to_string(src.join(f)).unwrap();
        // Test modules may reach anywhere.
        let text = text.split("#[cfg(test)]\nmod tests {").next().unwrap_or("");
        // `crate::stage` in paths, and the stages a `use crate::{..}`
        // block names at its top level.
        let mut named: Vec<String> = text
            .split("crate::")
            .skip(1)
            .map(|rest| {
                rest.chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect()
            })
            .collect();
        for block in text.split("use crate::{").skip(1) {
            let body = block.split("};").next().unwrap_or("");
            let mut depth = 0;
            let mut word = String::new();
            for c in body.chars() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    c if depth == 0 && (c.is_alphanumeric() || c == '_') => word.push(c),
                    _ => {
                        if !word.is_empty() {
                            named.push(std::mem::take(&mut word));
                        }
                    }
                }
                if depth > 0 && !word.is_empty() {
                    named.push(std::mem::take(&mut word));
                }
            }
        }
        for to in named {
            if to != from && stages.contains(&to) {
                deps.entry(from.clone()).or_default().insert(to);
            }
        }
    }
    // Depth-first search for a circle.
    fn circle(
        at: &str,
        deps: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == at) {
            let mut c = path[i..].to_vec();
            c.push(at.to_string());
            return Some(c);
        }
        if done.contains(at) {
            return None;
        }
        path.push(at.to_string());
        for next in deps.get(at).into_iter().flatten() {
            if let Some(c) = circle(next, deps, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(at.to_string());
        None
    }
    let mut done = BTreeSet::new();
    for s in &stages {
        if let Some(c) = circle(s, &deps, &mut Vec::new(), &mut done) {
            panic!(
                "an import circle between stages: {}\n{deps:#?}",
                c.join(" -> ")
            );
        }
    }
    // The flow the architecture names holds.
    let imports = |a: &str, b: &str| deps.get(a).is_some_and(|d| d.contains(b));
    assert!(imports("engine", "model") && imports("assemble", "decode"));
    assert!(!imports("model", "assemble") && !imports("engine", "sinks"));
    assert!(imports("pipeline", "store") && imports("store", "model"));
    assert!(!imports("store", "engine") && !imports("capture", "store"));
}
