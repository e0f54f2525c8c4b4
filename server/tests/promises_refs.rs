//! docs/promises.md names, for each promise, the test that fails when it breaks, as
//! `path/to/file.rs::test_name`. A test renamed or moved would leave the row pointing at
//! nothing, and the promise unproved without anyone noticing: every such name must be a
//! function defined in the file it names.

use std::path::Path;

/// Every `file.rs::name` in backticks in `text`, as (file, name).
fn references(text: &str) -> Vec<(String, &str)> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .filter_map(|code| code.split_once(".rs::"))
        .filter(|(file, name)| {
            let word = |c: char| c == '_' || c.is_alphanumeric();
            !file.contains(' ') && !name.is_empty() && name.chars().all(word)
        })
        .map(|(file, name)| (format!("{file}.rs"), name))
        .collect()
}

/// Whether `source` defines a function `name` (`fn name(` or `fn name<`).
fn defines(source: &str, name: &str) -> bool {
    source.match_indices(&format!("fn {name}")).any(|(at, _)| {
        let before = source[..at].chars().last();
        let after = source[at + 3 + name.len()..].chars().next();
        !before.is_some_and(|c| c == '_' || c.is_alphanumeric()) && matches!(after, Some('(' | '<'))
    })
}

/// The problems of `text`'s references, each "file::name: why", files read by `read`.
fn problems(text: &str, read: impl Fn(&str) -> Option<String>) -> Vec<String> {
    let mut found = Vec::new();
    for (file, name) in references(text) {
        match read(&file) {
            None => found.push(format!("{file}::{name}: no such file")),
            Some(source) if !defines(&source, name) => {
                found.push(format!("{file}::{name}: no such function in the file"))
            }
            Some(_) => {}
        }
    }
    found.sort();
    found.dedup();
    found
}

#[test]
fn every_test_docs_promises_names_exists_where_it_says() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let text = std::fs::read_to_string(root.join("docs/promises.md")).expect("docs/promises.md");
    let named = references(&text).len();
    assert!(
        named > 300,
        "only {named} references read: has the format changed?"
    );
    let found = problems(&text, |file| std::fs::read_to_string(root.join(file)).ok());
    assert!(
        found.is_empty(),
        "docs/promises.md names tests that are not there:\n{}",
        found.join("\n")
    );
}

#[test]
fn a_renamed_test_or_a_moved_file_is_reported() {
    let text =
        "| a | `x/tests/a.rs::kept`, `x/tests/a.rs::renamed_since`, `x/tests/gone.rs::t` |\n\
                | b | `cargo test` and `a.rs::` and `fn kept_too` are not references |";
    let read = |file: &str| {
        (file == "x/tests/a.rs").then(|| "fn kept() {}\nfn renamed_since_then() {}".into())
    };
    assert_eq!(
        problems(text, read),
        [
            "x/tests/a.rs::renamed_since: no such function in the file",
            "x/tests/gone.rs::t: no such file",
        ]
    );
}
