//! Every relative link of the documentation leads somewhere: README.md, ARCHITECTURE.md,
//! worker/README.md and docs/**/*.md link files that exist, and anchors that a heading (by
//! GitHub's slug rules) or an `<a id>` of the target makes; docs/SUMMARY.md, the manual's index,
//! lists every page of docs/. Links in code (fenced blocks, inline spans) are not links.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs;
use std::path::{Component, Path, PathBuf};

/// The Markdown files checked, by path from the repository root, with their text.
type Docs = BTreeMap<PathBuf, String>;

/// The text of a file not in [`Docs`] (empty when it is not Markdown; `None`: no such file).
type Reader = dyn Fn(&Path) -> Option<String>;

/// The lines of `text` outside fenced code blocks.
fn prose(text: &str) -> impl Iterator<Item = &str> {
    let mut fence: Option<&'static str> = None;
    text.lines().filter(move |line| {
        let line = line.trim_start();
        if let Some(open) = fence {
            if line.starts_with(open) {
                fence = None;
            }
            return false;
        }
        fence = ["```", "~~~"].into_iter().find(|f| line.starts_with(f));
        fence.is_none()
    })
}

/// How many backticks `s` starts with.
fn ticks(s: &str) -> usize {
    s.len() - s.trim_start_matches('`').len()
}

/// Where in `s` a run of exactly `n` backticks starts.
fn backtick_run(s: &str, n: usize) -> Option<usize> {
    let mut from = 0;
    while let Some(i) = s[from..].find('`') {
        let len = ticks(&s[from + i..]);
        if len == n {
            return Some(from + i);
        }
        from += i + len;
    }
    None
}

/// `line` with each inline code span (backticks included) made one space.
fn without_code(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    while let Some(start) = rest.find('`') {
        out.push_str(&rest[..start]);
        let n = ticks(&rest[start..]);
        let inside = &rest[start + n..];
        match backtick_run(inside, n) {
            Some(end) => {
                out.push(' ');
                rest = &inside[end + n..];
            }
            None => {
                out.push_str(&rest[start..start + n]);
                rest = inside;
            }
        }
    }
    out.push_str(rest);
    out
}

/// The targets of the links `[text](target)` of `text` outside code (a title is dropped).
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for line in prose(text) {
        let line = without_code(line);
        let mut rest = line.as_str();
        while let Some((before, after)) = rest.split_once("](") {
            let (inside, next) = after.split_once(')').unwrap_or((after, ""));
            if before.contains('[') {
                let target = inside.split_whitespace().next().unwrap_or_default();
                out.push(target.trim_matches(['<', '>']).to_string());
            }
            rest = next;
        }
    }
    out
}

/// GitHub's anchor for a heading: lower case, every character but letters, digits, spaces,
/// hyphens and underscores dropped, each space a hyphen.
fn slug(heading: &str) -> String {
    heading
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors of a Markdown text: its headings' slugs (a repeated one gets -1, -2, …) and its
/// `<a id="…">` / `<a name="…">`.
fn anchors(text: &str) -> HashSet<String> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut out = HashSet::new();
    for line in prose(text) {
        let level = line.len() - line.trim_start_matches('#').len();
        if (1..=6).contains(&level) && line[level..].starts_with(' ') {
            let base = slug(line[level..].trim().trim_end_matches('#').trim_end());
            let count = seen.entry(base.clone()).or_insert(0);
            out.insert(match *count {
                0 => base,
                n => format!("{base}-{n}"),
            });
            *count += 1;
        }
        for attr in ["<a id=\"", "<a name=\""] {
            for (i, _) in line.match_indices(attr) {
                let value = &line[i + attr.len()..];
                out.extend(value.split_once('"').map(|(id, _)| id.to_string()));
            }
        }
    }
    out
}

/// `link`, relative to the directory of `from`, as a path from the repository root; `None` when
/// it climbs out of the repository.
fn resolve(from: &Path, link: &str) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for part in from.parent()?.join(link).components() {
        match part {
            Component::ParentDir if !out.pop() => return None,
            Component::Normal(p) => out.push(p),
            _ => {}
        }
    }
    Some(out)
}

/// Whether `link`, written in `file`, leads somewhere; the reason when it does not.
fn follow(docs: &Docs, read: &Reader, file: &Path, link: &str) -> Result<(), String> {
    let (path, anchor) = link.split_once('#').unwrap_or((link, ""));
    let target = match path {
        "" => file.to_path_buf(),
        _ => resolve(file, path).ok_or("outside the repository")?,
    };
    let text = match docs.get(&target) {
        Some(text) => text.clone(),
        None => read(&target).ok_or("no such file")?,
    };
    let markdown = target.extension().is_some_and(|e| e == "md");
    if anchor.is_empty() || !markdown || anchors(&text).contains(anchor) {
        return Ok(());
    }
    Err(format!("no such anchor in {}", target.display()))
}

/// Every broken relative link of `docs` and every page of docs/ that docs/SUMMARY.md does not
/// link, one "file: link -> reason" line each.
fn problems(docs: &Docs, read: &Reader) -> Vec<String> {
    let mut out = Vec::new();
    for (file, text) in docs {
        for link in links(text) {
            if link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            if let Err(why) = follow(docs, read, file, &link) {
                out.push(format!("{}: {link} -> {why}", file.display()));
            }
        }
    }
    let summary = Path::new("docs/SUMMARY.md");
    let index = docs.get(summary).map_or("", String::as_str);
    let listed: Vec<PathBuf> = links(index)
        .iter()
        .filter_map(|l| resolve(summary, l.split('#').next().unwrap_or_default()))
        .collect();
    for page in docs.keys() {
        let in_docs = page.parent() == Some(Path::new("docs")) && page.as_path() != summary;
        if in_docs && page.extension().is_some_and(|e| e == "md") && !listed.contains(page) {
            let page = page.display();
            out.push(format!("docs/SUMMARY.md: {page} -> not listed"));
        }
    }
    out
}

/// Adds the Markdown file `path` (from the repository `root`), or every one under it, to `docs`.
fn add(root: &Path, path: &Path, docs: &mut Docs) {
    let full = root.join(path);
    if full.is_dir() {
        let entries = full.read_dir().unwrap_or_else(|e| panic!("{path:?}: {e}"));
        for entry in entries.flatten() {
            add(root, &path.join(entry.file_name()), docs);
        }
    } else if path.extension().is_some_and(|e| e == "md") {
        match fs::read_to_string(full) {
            Ok(text) => docs.insert(path.to_path_buf(), text),
            Err(e) => panic!("{path:?}: {e}"),
        };
    }
}

#[test]
fn every_relative_link_and_anchor_of_the_docs_resolves() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut docs = Docs::new();
    for path in ["README.md", "ARCHITECTURE.md", "worker/README.md"] {
        add(&root, Path::new(path), &mut docs);
    }
    add(&root, Path::new("docs"), &mut docs);
    let read = move |path: &Path| {
        let full = root.join(path);
        match path.extension() {
            Some(e) if e == "md" && full.is_file() => fs::read_to_string(full).ok(),
            _ => full.exists().then_some(String::new()),
        }
    };
    let found = problems(&docs, &read);
    assert!(found.is_empty(), "broken links:\n{}", found.join("\n"));
}

/// The checker itself fails: a missing file, a missing anchor (a heading inside a code fence
/// makes none) and a page the summary leaves out are each reported; what resolves is not.
#[test]
fn the_checker_reports_a_missing_file_a_missing_anchor_and_an_unlisted_page() {
    let docs: Docs = [
        (
            "README.md",
            "# Top\n\nSee [one](docs/a.md#part-one), [again](docs/a.md#part-one-1), \
             [ü](docs/a.md#überblick--ziele), [x](docs/a.md#x), [top](#top),\n\
             [gone](docs/gone.md), [two](docs/a.md#part-two), `[code](nowhere.md)`, \
             [web](https://example.com/x.md).\n\n```sh\n[fenced](nowhere.md)\n```\n",
        ),
        ("docs/SUMMARY.md", "# Summary\n\n- [A](a.md)\n"),
        (
            "docs/a.md",
            "# A\n\n## Part one\n\n## Part one\n\n## Überblick & Ziele\n\n<a id=\"x\"></a>\n\n\
             ```md\n## Part two\n```\n",
        ),
        ("docs/b.md", "# B\n"),
    ]
    .into_iter()
    .map(|(path, text)| (PathBuf::from(path), text.to_string()))
    .collect();
    let found = problems(&docs, &|_: &Path| None);
    assert_eq!(
        found,
        [
            "README.md: docs/gone.md -> no such file",
            "README.md: docs/a.md#part-two -> no such anchor in docs/a.md",
            "docs/SUMMARY.md: docs/b.md -> not listed"
        ]
    );
}
