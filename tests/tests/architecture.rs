//! docs/architecture.md is drawn from the code: every file of
//! nri-trace/src is in its module table, and every file the table names
//! exists.

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
    let doc = std::fs::read_to_string(repo.join("docs/architecture.md")).unwrap();
    // The table rows: "| `path.rs` | ... |".
    let named: BTreeSet<String> = doc
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split_once("` |"))
        .map(|(p, _)| p.to_string())
        .filter(|p| Path::new(p).extension().is_some_and(|e| e == "rs"))
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
fn severity_word(s: nri_trace::engine::findings::Severity) -> String {
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
