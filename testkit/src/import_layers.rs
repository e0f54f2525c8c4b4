//! The module graph of a crate's `src/`, read from its source text, and the import circles in
//! it. Used by `server/tests/import_layers.rs` to keep every crate free of circles, so a module
//! can be read, changed and tested with only what lies below it.
//!
//! The method reads the sources (no compiler help, so it runs in every `cargo test`): each file
//! is a module; an edge `a → b` is any path in `a` that names `b` — `crate::b::…`, `super::…`,
//! or a child module's own name (`events::events` in `api/mod.rs`). A path names the longest
//! module it starts with, so `crate::api::ErrorBody` is an edge to `api`. Comments and string
//! literals are skipped, and so is a file's trailing `#[cfg(test)] mod tests { … }` and any file
//! declared `#[cfg(test)] mod x;`: a unit test may drive its module through the real command line
//! (`config_file`'s tests parse with `cli::Cli`) without the shipped code depending on it. The
//! crate roots (`lib.rs`, `main.rs`, `src/bin/*`) are not modules of the graph: they declare the
//! modules and re-export them, so every module would otherwise sit in one circle with its root.
//! For the same reason a module's paths into its own submodules are not edges: `read/mod.rs`
//! declares and re-exports `read::list`, and `read::list` may use a type `read/mod.rs` holds for
//! its children (the leaf they share) without that being a circle. A circle is therefore always
//! between modules neither of which contains the other — siblings like `list ↔ merge`, or a
//! child, its parent and a module outside them. Any strongly connected component of more than
//! one module is a circle; [`circles`] lists each with the edges that close it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// module → (module it names → first line naming it), modules written `a::b`.
pub type Graph = BTreeMap<String, BTreeMap<String, usize>>;

/// Every `.rs` file under `dir` (recursively), sorted so the report is stable.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("read {}: {e}", dir.display()));
    for entry in entries {
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
/// (lib.rs and main.rs declare the modules; a main.rs beside a lib.rs and each `src/bin/*.rs` is
/// a separate crate using the library by its name).
fn module_path(src: &Path, file: &Path) -> Option<Vec<String>> {
    let rel = file.strip_prefix(src).ok()?;
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if parts == ["lib"] || parts == ["main"] || parts.first().is_some_and(|p| p == "bin") {
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
pub fn expand_use(tree: &str) -> Vec<Vec<String>> {
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
        if at_word_start && bytes[i..].starts_with(b"use ") {
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
                if bytes[j..].starts_with(b"::") && j + 2 < bytes.len() && is_ident(bytes[j + 2]) {
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

/// Cuts the test-only code out of a module's source (comments already stripped): an inline
/// `#[cfg(test)] mod x { … }` ends the shipped code (it is written last), a `#[cfg(test)] mod x;`
/// line is dropped and `x` returned, so its file is left out of the graph as well.
fn shipped_code(mut code: String) -> (String, Vec<String>) {
    let mut test_files = Vec::new();
    while let Some(at) = code.find("#[cfg(test)]\nmod ") {
        let decl_start = at + "#[cfg(test)]\nmod ".len();
        let decl_end = code[decl_start..]
            .find(['{', ';'])
            .map_or(code.len(), |e| decl_start + e);
        if code[decl_end..].starts_with(';') {
            test_files.push(code[decl_start..decl_end].trim().to_string());
            // Keep its line breaks, so the lines reported after it stay right.
            let breaks = "\n".repeat(code[at..=decl_end].matches('\n').count());
            code.replace_range(at..=decl_end, &breaks);
        } else {
            code.truncate(at);
        }
    }
    (code, test_files)
}

/// The module graph of the crate whose sources are in `src` (its `src/` directory).
pub fn import_graph(src: &Path) -> Graph {
    let mut files: Vec<(Vec<String>, String)> = Vec::new();
    let mut test_only: BTreeSet<Vec<String>> = BTreeSet::new();
    for file in rust_files(src) {
        let text = std::fs::read_to_string(&file)
            .unwrap_or_else(|e| panic!("read {}: {e}", file.display()));
        let (code, test_files) = shipped_code(code_only(&text));
        let module = module_path(src, &file);
        // A root's `#[cfg(test)] mod x;` names the top-level module `x`.
        for name in test_files {
            let mut child = module.clone().unwrap_or_default();
            child.push(name);
            test_only.insert(child);
        }
        if let Some(module) = module {
            files.push((module, code));
        }
    }
    // A test-only file's children are test-only too.
    files.retain(|(m, _)| !test_only.iter().any(|t| m.starts_with(t)));
    let modules: BTreeSet<Vec<String>> = files.iter().map(|(m, _)| m.clone()).collect();
    let mut graph = Graph::new();
    for (module, code) in &files {
        let edges: &mut BTreeMap<String, usize> = graph.entry(module.join("::")).or_default();
        for (at, path) in written_paths(code) {
            let Some(target) = resolve(&modules, module, &path) else {
                continue;
            };
            // A module's paths into its own submodules are not edges: a parent declares its
            // children and is their face (re-exports, dispatch), and they may use what it
            // holds, as every module uses the crate root (see the module doc).
            if !target.starts_with(module) {
                let line = code[..at].matches('\n').count() + 1;
                edges.entry(target.join("::")).or_insert(line);
            }
        }
    }
    graph
}

/// Tarjan's strongly connected components.
pub fn components(graph: &Graph) -> Vec<Vec<String>> {
    struct State<'a> {
        graph: &'a Graph,
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

/// Every import circle of `graph` (a strongly connected component of more than one module),
/// each written as its modules and the edges inside it with the line that makes each.
pub fn circles(graph: &Graph) -> Vec<String> {
    components(graph)
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
        .collect()
}
