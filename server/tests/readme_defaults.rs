//! The configuration tables of README.md (and worker/README.md) against the flags themselves:
//! every setting with an environment variable is documented, and the default a table shows is
//! the default the binary uses. A default is written once in code (the `#[arg]` attribute;
//! `Default` impls are derived from it), so the docs are the only other place it can drift.

use clap::CommandFactory;
use server::cli::Cli;

/// Table rows whose first cell names `env`: (the row's cells, the position of `env` among the
/// variables named in the first cell, e.g. 1 for `B` in "`A` / `B`").
fn rows_for<'a>(doc: &'a str, env: &str) -> Vec<(Vec<&'a str>, usize)> {
    let mut out = Vec::new();
    for line in doc.lines() {
        let Some(rest) = line.strip_prefix('|') else {
            continue;
        };
        let cells: Vec<&str> = rest.split('|').map(str::trim).collect();
        let Some(first) = cells.first() else {
            continue;
        };
        let names: Vec<&str> = first
            .split('/')
            .map(|n| n.trim().trim_matches('`'))
            .collect();
        if let Some(i) = names.iter().position(|n| *n == env) {
            out.push((cells, i));
        }
    }
    out
}

/// The default a row shows for the `i`-th variable of its first cell: the default cell is the
/// third when the second names the flags (`--…`), else the second; "a / b" splits per variable;
/// the first `backticked` token is the value (the rest is commentary, e.g. "`0` (off)").
fn shown_default(cells: &[&str], i: usize) -> Option<String> {
    let col = if cells.get(1).is_some_and(|c| c.starts_with("`--")) {
        2
    } else {
        1
    };
    let cell = cells.get(col)?;
    let parts: Vec<&str> = cell.split(" / ").collect();
    let part = parts.get(i).or(parts.first())?;
    let start = part.find('`')? + 1;
    let len = part[start..].find('`')?;
    Some(part[start..start + len].to_string())
}

#[test]
fn every_setting_is_documented_with_its_real_default() {
    let readme = concat!(
        include_str!("../../README.md"),
        "\n",
        include_str!("../../worker/README.md")
    );
    let mut cmds = vec![Cli::command()];
    let mut checked = 0;
    let mut problems = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    while let Some(cmd) = cmds.pop() {
        cmds.extend(cmd.get_subcommands().cloned());
        for arg in cmd.get_arguments() {
            let Some(env) = arg.get_env().and_then(|e| e.to_str()) else {
                continue;
            };
            if arg.is_hide_set() {
                continue; // kept for old deployments, documented as renamed
            }
            if !seen.insert(env.to_string()) {
                continue;
            }
            let rows = rows_for(readme, env);
            if rows.is_empty() {
                problems.push(format!("{env}: not in a README configuration table"));
                continue;
            }
            let defaults: Vec<String> = arg
                .get_default_values()
                .iter()
                .map(|v| v.to_string_lossy().into_owned())
                .collect();
            if defaults.is_empty() {
                continue; // optional: the table says unset / random / … in words
            }
            let want = defaults.join(",");
            for (cells, i) in rows {
                let shown = shown_default(&cells, i);
                // Switches: the table says "off" where clap's default is "false".
                let ok = match shown.as_deref() {
                    Some(s) => s == want,
                    None => want == "false" && cells.contains(&"off"),
                };
                if ok {
                    checked += 1;
                } else {
                    problems.push(format!(
                        "{env}: README shows {shown:?}, the flag's default is {want:?}"
                    ));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(checked >= 50, "only {checked} defaults compared");
}
