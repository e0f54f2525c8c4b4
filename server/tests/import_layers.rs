//! No import circle inside `server/src`: the modules form layers (settings at the bottom, state
//! and errors above them, routes and handlers on top, the commands `cli`/`serve` at the top), so
//! a module can be read, changed and tested with only what lies below it.
//!
//! The check reads the sources (no compiler help, so it runs in every `cargo test`): each file is
//! a module; an edge `a → b` is any path in `a` that names `b` — `crate::b::…`, `super::…`, or a
//! child module's own name (`events::events` in `api/mod.rs`). A path names the longest module
//! it starts with, so `crate::api::ErrorBody` is an edge to `api`. Comments and string literals
//! are skipped, and so is a file's trailing `#[cfg(test)] mod tests`: a unit test may drive its
//! module through the real command line (`config_file`'s tests parse with `cli::Cli`) without
//! the shipped code depending on it. Any strongly connected component of more than one module
//! is a circle and fails the test, listing the edges that close it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir` (recursively), sorted so the report is stable.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).expect("read server/src") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            out.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out.sort();
    out
}

/// `api/mod.rs` → `["api"]`, `api/error.rs` → `["api", "error"]`; the crate roots → `None`
/// (lib.rs only declares modules, main.rs is a separate crate using `server::`).
fn module_path(src: &Path, file: &Path) -> Option<Vec<String>> {
    let rel = file.strip_prefix(src).ok()?;
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if parts == ["lib"] || parts == ["main"] {
        return None;
    }
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    Some(parts)
}

/// The source without `//` comments (doc links name modules without depending on them) and
/// with string literals blanked (a URL's `//` is not a comment; text is not a path).
fn code_only(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        let mut in_string = false;
        let mut prev = '\0';
        let chars: Vec<char> = line.chars().collect();
        let mut i = 0;
        while i < chars.len() {
            let c = chars[i];
            if in_string {
                if c == '"' && prev != '\\' {
                    in_string = false;
                    out.push('"');
                } else {
                    out.push(' ');
                }
                prev = if prev == '\\' && c == '\\' { '\0' } else { c };
                i += 1;
                continue;
            }
            if c == '/' && chars.get(i + 1) == Some(&'/') {
                break;
            }
            if c == '"' {
                in_string = true;
            }
            out.push(c);
            prev = c;
            i += 1;
        }
        out.push('\n');
    }
    out
}

/// Expands one `use` tree (`crate::{a::b, c::{d, e}}`) into its full paths, each a list of
/// segments (`self` inside braces names the prefix itself).
fn expand_use(tree: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    expand_into(tree, &mut Vec::new(), &mut out);
    out
}

fn expand_into(tree: &str, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    let Some(open) = tree.find('{') else {
        let mut path = prefix.clone();
        // `e as f` names `e`.
        let leaf = tree.split_whitespace().next().unwrap_or("");
        for seg in leaf.split("::").map(str::trim) {
            if !seg.is_empty() && seg != "self" {
                path.push(seg.to_string());
            }
        }
        out.push(path);
        return;
    };
    let head: Vec<String> = tree[..open]
        .split("::")
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let depth_before = prefix.len();
    prefix.extend(head);
    // Split the braces' content on top-level commas only.
    let (mut depth, mut start) = (0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                expand_into(&inner[start..i], prefix, out);
                start = i + 1;
            }
            _ => {}
        }
    }
    if start < inner.len() {
        expand_into(&inner[start..], prefix, out);
    }
    prefix.truncate(depth_before);
}

/// Every path written in `code` with its byte offset: the trees of `use` statements, and every
/// other run of `ident::ident…` in expressions and types.
fn written_paths(code: &str) -> Vec<(usize, Vec<String>)> {
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    let is_ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let mut i = 0;
    while i < bytes.len() {
        let at_word_start = i == 0 || !(is_ident(bytes[i - 1]) || bytes[i - 1] == b':');
        if at_word_start && code[i..].starts_with("use ") {
            let end = code[i..].find(';').map_or(code.len(), |e| i + e);
            for path in expand_use(&code[i + 4..end]) {
                out.push((i, path));
            }
            i = end;
            continue;
        }
        if at_word_start && is_ident(bytes[i]) {
            let mut j = i;
            let mut segs = Vec::new();
            loop {
                let s = j;
                while j < bytes.len() && is_ident(bytes[j]) {
                    j += 1;
                }
                segs.push(code[s..j].to_string());
                if code[j..].starts_with("::") && j + 2 < bytes.len() && is_ident(bytes[j + 2]) {
                    j += 2;
                } else {
                    break;
                }
            }
            if segs.len() > 1 {
                out.push((i, segs));
            }
            i = j.max(i + 1);
            continue;
        }
        i += 1;
    }
    out
}

/// Resolves a path written in `module` to the longest known module it names, or `None` for
/// other crates' paths.
fn resolve(
    modules: &BTreeSet<Vec<String>>,
    module: &[String],
    path: &[String],
) -> Option<Vec<String>> {
    let mut abs: Vec<String> = module.to_vec();
    let mut rest = path;
    match rest.first().map(String::as_str) {
        Some("crate") => {
            abs.clear();
            rest = &rest[1..];
        }
        Some("self") => rest = &rest[1..],
        Some("super") => {
            while rest.first().is_some_and(|s| s == "super") {
                abs.pop();
                rest = &rest[1..];
            }
        }
        Some(first) => {
            let mut child = module.to_vec();
            child.push(first.to_string());
            if !modules.contains(&child) {
                return None;
            }
        }
        None => return None,
    }
    abs.extend(rest.iter().cloned());
    (1..=abs.len())
        .rev()
        .map(|n| abs[..n].to_vec())
        .find(|candidate| modules.contains(candidate))
}

/// The module graph of `server/src`: module → (module it names → first line naming it).
fn import_graph() -> BTreeMap<String, BTreeMap<String, usize>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let files: Vec<(Vec<String>, String)> = rust_files(&src)
        .into_iter()
        .filter_map(|f| {
            let module = module_path(&src, &f)?;
            Some((module, std::fs::read_to_string(&f).expect("read source")))
        })
        .collect();
    let modules: BTreeSet<Vec<String>> = files.iter().map(|(m, _)| m.clone()).collect();
    let mut graph = BTreeMap::new();
    for (module, text) in &files {
        let mut code = code_only(text);
        if let Some(tests) = code.find("#[cfg(test)]\nmod ") {
            code.truncate(tests);
        }
        let edges: &mut BTreeMap<String, usize> = graph.entry(module.join("::")).or_default();
        for (at, path) in written_paths(&code) {
            let Some(target) = resolve(&modules, module, &path) else {
                continue;
            };
            if &target != module {
                let line = code[..at].matches('\n').count() + 1;
                edges.entry(target.join("::")).or_insert(line);
            }
        }
    }
    graph
}

/// Tarjan's strongly connected components.
fn components(graph: &BTreeMap<String, BTreeMap<String, usize>>) -> Vec<Vec<String>> {
    struct State<'a> {
        graph: &'a BTreeMap<String, BTreeMap<String, usize>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in s.graph.get(v).into_iter().flat_map(|e| e.keys()) {
            if !s.index.contains_key(w.as_str()) {
                visit(s, w);
                let lw = s.low[w.as_str()];
                s.low.insert(v, s.low[v].min(lw));
            } else if s.on_stack.contains(w.as_str()) {
                let iw = s.index[w.as_str()];
                s.low.insert(v, s.low[v].min(iw));
            }
        }
        if s.low[v] == s.index[v] {
            let mut scc = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(w);
                scc.push(w.to_string());
                if w == v {
                    break;
                }
            }
            scc.sort();
            s.out.push(scc);
        }
    }
    let mut s = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.out
}

#[test]
fn server_modules_import_each_other_without_a_circle() {
    let graph = import_graph();
    // The reader must see the modules it checks, or an empty graph would pass.
    for expected in ["cli", "serve", "web", "api", "api::error", "admin"] {
        assert!(graph.contains_key(expected), "module {expected} not read");
    }
    assert!(
        graph["serve"].contains_key("web"),
        "the reader misses edges: serve names web"
    );
    let circles: Vec<String> = components(&graph)
        .into_iter()
        .filter(|scc| scc.len() > 1)
        .map(|scc| {
            let members: BTreeSet<&String> = scc.iter().collect();
            let edges: Vec<String> = scc
                .iter()
                .flat_map(|from| {
                    graph[from]
                        .iter()
                        .filter(|(to, _)| members.contains(to))
                        .map(move |(to, line)| format!("    {from} → {to} (line {line})"))
                })
                .collect();
            format!(
                "{} modules: {}\n{}",
                scc.len(),
                scc.join(", "),
                edges.join("\n")
            )
        })
        .collect();
    assert!(
        circles.is_empty(),
        "import circles in server/src:\n{}",
        circles.join("\n")
    );
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
