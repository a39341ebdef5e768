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
