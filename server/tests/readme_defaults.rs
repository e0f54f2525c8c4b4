//! The configuration tables of the manual (docs/configuration.md, and worker/README.md) against
//! the flags themselves: every setting with an environment variable is documented, and the
//! default a table shows is the default the binary uses. A default is written once in code (the
//! `#[arg]` attribute; `Default` impls are derived from it), so the docs are the only other place
//! it can drift.

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
            .split(['/', ','])
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
    // The README and every page of the manual that holds what were once its sections (a table
    // of settings may sit on any of them: docs/upstreams.md has the limits), and the worker's.
    let readme = concat!(
        include_str!("../../README.md"),
        "\n",
        include_str!("../../docs/introduction.md"),
        "\n",
        include_str!("../../docs/configuration.md"),
        "\n",
        include_str!("../../docs/api.md"),
        "\n",
        include_str!("../../docs/freshness.md"),
        "\n",
        include_str!("../../docs/dashboard.md"),
        "\n",
        include_str!("../../docs/operations.md"),
        "\n",
        include_str!("../../docs/upstreams.md"),
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
                problems.push(format!("{env}: not in a configuration table of the docs"));
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
                        "{env}: the docs show {shown:?}, the flag's default is {want:?}"
                    ));
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(checked >= 50, "only {checked} defaults compared");
}

/// The commands a configuration heading names: "### Web (serve)" → ["serve"];
/// "### Simulated upstream (`repoll sim`, `repoll serve --sim`)" → ["sim", "serve"].
fn heading_commands(line: &str) -> Option<Vec<String>> {
    let title = line.strip_prefix("### ")?;
    let inner = title.strip_suffix(')')?.rsplit_once('(')?.1;
    Some(
        inner
            .split(',')
            .filter_map(|c| {
                let c = c.trim().trim_matches('`');
                let c = c.strip_prefix("repoll ").unwrap_or(c);
                c.split_whitespace().next().map(str::to_string)
            })
            .collect(),
    )
}

/// Each configuration table of docs/configuration.md sits under a heading naming its commands,
/// e.g. "(serve, worker)": every setting of such a table is one each named command takes, and
/// every setting a command takes is in a table naming it, so a reader of "(worker)" tables
/// learns exactly what a worker reads.
#[test]
fn every_table_heading_names_the_commands_that_take_its_settings() {
    let readme = include_str!("../../docs/configuration.md");
    let cli = Cli::command();
    let envs_of = |name: &str| -> std::collections::BTreeSet<String> {
        let cmd = cli
            .find_subcommand(name)
            .unwrap_or_else(|| panic!("configuration.md names a command `{name}` repoll lacks"));
        cmd.get_arguments()
            .chain(cli.get_arguments())
            .filter(|a| !a.is_hide_set())
            .filter_map(|a| a.get_env().and_then(|e| e.to_str()).map(str::to_string))
            .collect()
    };
    // Settings read from the environment only, never flags: the log filter, secrets (a flag
    // would show in `ps`), and tracing's (the OpenTelemetry variables as the specification
    // names them; checked by `every_tracing_variable_is_documented`).
    let not_flags: Vec<&str> = [
        "RUST_LOG",
        "REPOLL_UPSTREAM_API_KEY",
        "REPOLL_UPSTREAM_IDEMPOTENCY_SECRET",
        "REPOLL_UPSTREAM_WEBHOOK_SECRET",
        "REPOLL_CALLBACK_SECRET",
    ]
    .into_iter()
    .chain(server::traces::settings::ENVIRONMENT.iter().copied())
    .collect();
    let mut documented: std::collections::BTreeMap<String, std::collections::BTreeSet<String>> =
        Default::default();
    let mut problems = Vec::new();
    let mut section: Option<Vec<String>> = None;
    let mut in_configuration = false;
    for line in readme.lines() {
        if line.starts_with("## ") {
            in_configuration = line == "## Configuration";
            section = None;
            continue;
        }
        if !in_configuration {
            continue;
        }
        if line.starts_with("### ") {
            section = heading_commands(line);
            if section.is_none() {
                problems.push(format!(
                    "{line:?}: a configuration heading names no commands"
                ));
            }
            continue;
        }
        let (Some(cmds), Some(rest)) = (&section, line.strip_prefix("| `")) else {
            continue;
        };
        let first = rest.split('|').next().unwrap_or_default();
        for env in first.split(['/', ',']).map(|n| n.trim().trim_matches('`')) {
            if not_flags.contains(&env) {
                continue;
            }
            for cmd in cmds {
                documented
                    .entry(cmd.clone())
                    .or_default()
                    .insert(env.to_string());
                if !envs_of(cmd).contains(env) {
                    problems.push(format!("{env}: listed for `{cmd}`, which does not take it"));
                }
            }
        }
    }
    for sub in cli.get_subcommands() {
        let name = sub.get_name();
        if name == "admin" {
            continue; // its tools take the Redis settings, documented with their commands
        }
        for env in envs_of(name) {
            let listed = documented.get(name).is_some_and(|d| d.contains(&env));
            if !listed && env != "REPOLL_CONFIG" {
                problems.push(format!("{env}: `{name}` takes it, no table names `{name}`"));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(documented.len() >= 3, "tables found for {documented:?}");
}

/// Tracing's settings are read from the environment, not flags, so the clap walk above cannot
/// see them: each is in a row of the tracing table of docs/configuration.md.
#[test]
fn every_tracing_variable_is_documented() {
    let readme = include_str!("../../docs/configuration.md");
    let section = readme
        .split("### Tracing and logs (serve, worker)")
        .nth(1)
        .and_then(|rest| rest.split("\n### ").next())
        .expect("docs/configuration.md has a \"Tracing and logs (serve, worker)\" table");
    let missing: Vec<&str> = server::traces::settings::ENVIRONMENT
        .iter()
        .copied()
        .filter(|env| rows_for(section, env).is_empty())
        .collect();
    assert!(
        missing.is_empty(),
        "not in the tracing table of docs/configuration.md: {missing:?}"
    );
}

/// The error table of docs/api.md names every code the API sends.
#[test]
fn every_api_error_code_is_in_the_readme() {
    let readme = include_str!("../../docs/api.md");
    let missing: Vec<&str> = server::api::ErrorCode::ALL
        .iter()
        .map(|c| c.as_str())
        .filter(|c| !readme.contains(&format!("| `{c}` |")))
        .collect();
    assert!(
        missing.is_empty(),
        "not in the error table of docs/api.md: {missing:?}"
    );
}
