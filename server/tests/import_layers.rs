//! No import circle inside any crate's `src/`: the modules form layers (in server/src settings
//! at the bottom, state and errors above them, routes and handlers on top, the commands
//! `cli`/`serve` at the top), so a module can be read, changed and tested with only what lies
//! below it.
//!
//! The check reads the sources (no compiler help, so it runs in every `cargo test`): each file is
//! a module; an edge `a → b` is any path in `a` that names `b` — `crate::b::…`, `super::…`, or a
//! child module's own name (`events::events` in `api/mod.rs`). A path names the longest module
//! it starts with, so `crate::api::ErrorBody` is an edge to `api`. Comments and string literals
//! are skipped, and so is a file's trailing `#[cfg(test)] mod tests` (and a file declared
//! `#[cfg(test)] mod x;`): a unit test may drive its module through the real command line
//! (`config_file`'s tests parse with `cli::Cli`) without the shipped code depending on it. The
//! crate roots (lib.rs, main.rs) are not modules of the graph, and a module's paths into its
//! own submodules are not edges (a parent declares and re-exports its children, which may use
//! what it holds, as every module uses the root). Any strongly connected component
//! of more than one module is a circle and fails the test, listing the edges that close it. The
//! reader, the graph and Tarjan's components live in `testkit::import_layers`.
//!
//! One test here walks every workspace member rather than one test per crate: the members are
//! read from the workspace manifest, so a new crate is covered without anyone remembering to add
//! a test, and no crate gets a test binary (a link each, on a 2-core CI) or a test kit
//! dev-dependency for it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use testkit::import_layers::{circles, expand_use, import_graph, Graph};

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("server/ has a parent")
        .to_path_buf()
}

/// The workspace's members, from `members = [...]` in its Cargo.toml.
fn members() -> Vec<String> {
    let manifest =
        std::fs::read_to_string(workspace_root().join("Cargo.toml")).expect("workspace Cargo.toml");
    let start = manifest.find("members = [").expect("a members list") + "members = [".len();
    let end = start + manifest[start..].find(']').expect("the members list ends");
    manifest[start..end]
        .split(',')
        .map(|m| m.trim().trim_matches('"').to_string())
        .filter(|m| !m.is_empty())
        .collect()
}

/// Every member's module graph, by member name.
fn graphs() -> BTreeMap<String, Graph> {
    members()
        .into_iter()
        .map(|m| {
            let graph = import_graph(&workspace_root().join(&m).join("src"));
            (m, graph)
        })
        .collect()
}

#[test]
fn server_modules_import_each_other_without_a_circle() {
    let graph = import_graph(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    // The reader must see the modules it checks, or an empty graph would pass.
    for expected in ["cli", "serve", "web", "api", "api::error", "admin"] {
        assert!(graph.contains_key(expected), "module {expected} not read");
    }
    assert!(
        graph["serve"].contains_key("web"),
        "the reader misses edges: serve names web"
    );
    let found = circles(&graph);
    assert!(
        found.is_empty(),
        "import circles in server/src:\n{}",
        found.join("\n")
    );
}

#[test]
fn no_crate_has_an_import_circle() {
    let graphs = graphs();
    // Every member is read and has modules and edges, and in the crates below a module and an
    // edge they are known to have: an empty or edgeless graph must not pass. (frontend is its
    // lib.rs alone: nothing to check there. app is left to the count while its pages move
    // (issue 40).)
    for member in [
        "model", "queue", "worker", "sim", "chaos", "testkit", "server", "app",
    ] {
        let graph = graphs
            .get(member)
            .unwrap_or_else(|| panic!("member {member} not read"));
        let edges: usize = graph.values().map(BTreeMap::len).sum();
        assert!(
            graph.len() >= 2 && edges >= 1,
            "{member}: only {} modules and {edges} edges read",
            graph.len()
        );
    }
    let known: &[(&str, &str, &str)] = &[
        ("model", "queue_state", "task"),
        ("queue", "read::list", "read::merge"),
        ("queue", "slot", "conn"),
        ("worker", "runtime", "upkeep"),
        ("sim", "handlers", "state"),
        ("chaos", "run::schedule", "run::stack"),
        ("testkit", "cluster", "redis"),
    ];
    for (member, from, to) in known {
        let graph = &graphs[*member];
        assert!(
            graph.contains_key(*from),
            "{member}: module {from} not read"
        );
        assert!(
            graph[*from].contains_key(*to),
            "{member}: the reader misses edges: {from} names {to}"
        );
    }
    let mut report = Vec::new();
    for (member, graph) in &graphs {
        let found = circles(graph);
        if !found.is_empty() {
            report.push(format!("{member}/src:\n{}", found.join("\n")));
        }
    }
    assert!(report.is_empty(), "import circles:\n{}", report.join("\n"));
}

#[test]
fn the_reader_expands_grouped_use_trees() {
    let paths = expand_use("crate::{a::b, c::{d, e as f}, g}");
    let joined: Vec<String> = paths.iter().map(|p| p.join("::")).collect();
    assert_eq!(
        joined,
        ["crate::a::b", "crate::c::d", "crate::c::e", "crate::g"]
    );
}

/// The rules of the reader on a crate written for the test: a sibling back-edge is a circle; a
/// parent's path into its child is not an edge; a `#[cfg(test)] mod x;` file is left out.
#[test]
fn the_reader_finds_a_sibling_circle_and_only_that() {
    let dir = testkit::TempDir::new("import-layers");
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("read")).expect("mkdir");
    let files = [
        ("lib.rs", "mod a;\nmod b;\nmod read;\n"),
        ("a.rs", "use crate::b::B;\npub struct A;\n"),
        // The back-edge b → a closes the circle a ↔ b.
        ("b.rs", "pub struct B;\nfn f(_: crate::a::A) {}\n"),
        // read → read::list and read::list → read: a parent and its child, no circle.
        (
            "read/mod.rs",
            "mod list;\npub use list::go;\npub struct Page;\n#[cfg(test)]\nmod probe;\n",
        ),
        ("read/list.rs", "use super::Page;\npub fn go() {}\n"),
        // A test-only file naming across: left out, or read::probe → a → … would matter.
        ("read/probe.rs", "use crate::a::A;\n"),
    ];
    for (path, text) in files {
        std::fs::write(src.join(path), text).expect("write");
    }
    let graph = import_graph(&src);
    assert!(!graph.contains_key("read::probe"), "{graph:?}");
    assert!(graph["read::list"].contains_key("read"), "{graph:?}");
    assert!(!graph["read"].contains_key("read::list"), "{graph:?}");
    assert_eq!(
        circles(&graph),
        ["2 modules: a, b\n    a → b (line 1)\n    b → a (line 2)"]
    );
}
