//! `--config <file>` (or `REPOLL_CONFIG`): settings from a TOML file.
//!
//! Every setting already has a flag and an environment variable; a file is the third way,
//! for the many upstream and policy settings a real API needs. Its keys are the environment
//! variables' names, in any case, with the `REPOLL_` prefix optional, and tables join their
//! path with `_` — so these three lines say the same thing:
//!
//! ```toml
//! REPOLL_UPSTREAM_URL = "https://api.example.com/reports/{key}"
//! upstream_url = "https://api.example.com/reports/{key}"
//! [upstream]
//! url = "https://api.example.com/reports/{key}"
//! ```
//!
//! Precedence: flag, then environment variable, then file, then the built-in default. It is
//! done without touching the process environment: a value from the file becomes the clap
//! argument's *default*, which clap only uses when neither the flag nor the variable is
//! given (and which `--help` then shows, so `repoll serve --config f --help` prints the
//! effective settings). A key no subcommand knows is an error naming the closest keys, so a
//! typo never silently falls back to a default.

use std::{
    collections::BTreeMap,
    ffi::OsString,
    path::{Path, PathBuf},
};

use clap::Command;

/// Environment variable naming the config file (the `--config` flag wins).
pub const CONFIG_ENV: &str = "REPOLL_CONFIG";

/// What can go wrong reading a config file.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {path} is not valid TOML: {message}")]
    Syntax { path: PathBuf, message: String },
    #[error("config file {path}: unknown setting `{key}`{hint}")]
    Unknown {
        path: PathBuf,
        key: String,
        hint: String,
    },
    #[error("config file {path}: `{key}` {problem}")]
    Value {
        path: PathBuf,
        key: String,
        problem: String,
    },
}

/// The file's TOML table.
pub fn read_table(path: &Path) -> Result<toml::Table, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_owned(),
        source,
    })?;
    parse_table(path, &text)
}

fn parse_table(path: &Path, text: &str) -> Result<toml::Table, ConfigError> {
    text.parse()
        .map_err(|e: toml::de::Error| ConfigError::Syntax {
            path: path.to_owned(),
            message: e.message().to_string(),
        })
}

/// The value of `--config <p>` / `--config=<p>` in raw arguments, before clap runs (clap
/// needs the file's values to build the command it parses with).
pub fn config_path(args: &[OsString]) -> Option<PathBuf> {
    let mut it = args.iter().skip(1);
    while let Some(a) = it.next() {
        let s = a.to_string_lossy();
        if s == "--" {
            return None;
        }
        if s == "--config" {
            return it.next().map(PathBuf::from);
        }
        if let Some(v) = s.strip_prefix("--config=") {
            return Some(PathBuf::from(v));
        }
    }
    None
}

/// A config file's settings, each as the environment variable it stands for and its values
/// (clap argument text), in the order of the file's keys.
pub type FileSettings = Vec<(String, Vec<String>)>;

/// `cmd` with the file's settings as argument defaults (see the module docs).
pub fn with_file_defaults(cmd: Command, path: &Path) -> Result<Command, ConfigError> {
    let settings = read_settings(&cmd, path)?;
    Ok(apply(cmd, &settings))
}

/// As [`with_file_defaults`], from the file's text.
pub fn with_defaults_from_str(
    cmd: Command,
    path: &Path,
    text: &str,
) -> Result<Command, ConfigError> {
    let settings = settings_from_str(&cmd, path, text)?;
    Ok(apply(cmd, &settings))
}

/// The settings of the file at `path`, checked against what `cmd` knows.
pub fn read_settings(cmd: &Command, path: &Path) -> Result<FileSettings, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_owned(),
        source,
    })?;
    settings_from_str(cmd, path, &text)
}

/// As [`read_settings`], from the file's text.
pub fn settings_from_str(
    cmd: &Command,
    path: &Path,
    text: &str,
) -> Result<FileSettings, ConfigError> {
    let mut table = parse_table(path, text)?;
    // `[upstreams.<name>]` sections are read by `upstreams::sections_from_table`.
    table.remove("upstreams");
    let mut flat = BTreeMap::new();
    flatten("", &table, &mut flat);

    let known = known_envs(cmd);
    let mut settings = FileSettings::new();
    for (key, value) in flat {
        let env = resolve(&key, &known).ok_or_else(|| ConfigError::Unknown {
            path: path.to_owned(),
            hint: hint(&key, &known),
            key: key.clone(),
        })?;
        let multiple = known.get(&env).copied().unwrap_or(false);
        let values = to_strings(&value, multiple).map_err(|problem| ConfigError::Value {
            path: path.to_owned(),
            key: key.clone(),
            problem,
        })?;
        settings.push((env, values));
    }
    Ok(settings)
}

/// Nested tables become `outer_inner` keys.
pub(crate) fn flatten(prefix: &str, table: &toml::Table, out: &mut BTreeMap<String, toml::Value>) {
    for (k, v) in table {
        let key = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}_{k}")
        };
        match v {
            toml::Value::Table(t) => flatten(&key, t, out),
            other => {
                out.insert(key, other.clone());
            }
        }
    }
}

/// Every environment variable any (sub)command reads, and whether its argument takes many
/// values.
pub(crate) fn known_envs(cmd: &Command) -> BTreeMap<String, bool> {
    let mut out = BTreeMap::new();
    for a in cmd.get_arguments() {
        if let Some(env) = a.get_env().filter(|e| *e != CONFIG_ENV) {
            let many = a.get_num_args().is_some_and(|n| n.max_values() > 1)
                || matches!(a.get_action(), clap::ArgAction::Append);
            out.insert(env.to_string_lossy().into_owned(), many);
        }
    }
    for sc in cmd.get_subcommands() {
        out.extend(known_envs(sc));
    }
    out
}

/// The environment variable a file key stands for: its upper snake case, with or without
/// `REPOLL_` (tried with it first, so `queue` is `REPOLL_QUEUE`; `redis_url` is `REDIS_URL`).
fn resolve(key: &str, known: &BTreeMap<String, bool>) -> Option<String> {
    let upper = key.replace(['-', '.'], "_").to_ascii_uppercase();
    let prefixed = format!("REPOLL_{upper}");
    [prefixed, upper]
        .into_iter()
        .find(|k| known.contains_key(k))
}

/// ", did you mean `x`?" for the known keys sharing the most words with `key`.
fn hint(key: &str, known: &BTreeMap<String, bool>) -> String {
    let names = known.keys().map(|env| {
        env.strip_prefix("REPOLL_")
            .unwrap_or(env)
            .to_ascii_lowercase()
    });
    hint_among(
        key,
        names,
        " (keys are the settings' environment variable names; see `repoll <command> --help`)",
    )
}

/// ", did you mean ..." naming up to three of `names` sharing the most words with `key`, or
/// `otherwise` when none shares a word.
pub(crate) fn hint_among(
    key: &str,
    names: impl Iterator<Item = String>,
    otherwise: &str,
) -> String {
    let words: Vec<String> = key
        .to_ascii_lowercase()
        .split(['_', '-', '.'])
        .map(str::to_owned)
        .collect();
    let mut best: Vec<(usize, String)> = names
        .map(|name| {
            let score = name
                .split('_')
                .filter(|w| words.iter().any(|k| k == w))
                .count();
            (score, name)
        })
        .filter(|(s, _)| *s > 0)
        .collect();
    best.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    let names: Vec<String> = best
        .into_iter()
        .take(3)
        .map(|(_, n)| format!("`{n}`"))
        .collect();
    if names.is_empty() {
        otherwise.to_string()
    } else {
        format!(", did you mean {}?", names.join(" or "))
    }
}

/// A TOML value as clap argument text; arrays only where the argument takes many values.
pub(crate) fn to_strings(v: &toml::Value, multiple: bool) -> Result<Vec<String>, String> {
    let one = |v: &toml::Value| -> Result<String, String> {
        Ok(match v {
            toml::Value::String(s) => s.clone(),
            toml::Value::Integer(i) => i.to_string(),
            toml::Value::Float(f) => f.to_string(),
            toml::Value::Boolean(b) => b.to_string(),
            toml::Value::Datetime(d) => d.to_string(),
            toml::Value::Array(_) | toml::Value::Table(_) => {
                return Err("must be a single value here".into())
            }
        })
    };
    match v {
        toml::Value::Array(items) if multiple => items.iter().map(one).collect(),
        toml::Value::Array(_) => Err("takes one value, not a list".into()),
        other => one(other).map(|s| vec![s]),
    }
}

/// Sets the defaults on every argument (in every subcommand) reading one of the variables.
pub fn apply(cmd: Command, settings: &[(String, Vec<String>)]) -> Command {
    let ids: Vec<(clap::Id, Vec<String>)> = cmd
        .get_arguments()
        .filter_map(|a| {
            let env = a.get_env()?.to_string_lossy().into_owned();
            settings
                .iter()
                .find(|(e, _)| *e == env)
                .map(|(_, v)| (a.get_id().clone(), v.clone()))
        })
        .collect();
    let mut cmd = cmd;
    for (id, values) in ids {
        cmd = cmd.mut_arg(id, |a| {
            // An argument that was required is satisfied by the file. A secret (an argument
            // whose environment value `--help` hides) keeps its file value out of `--help` too.
            let secret = a.is_hide_env_values_set();
            a.required(false)
                .default_values(values)
                .hide_default_value(secret)
        });
    }
    let names: Vec<String> = cmd
        .get_subcommands()
        .map(|s| s.get_name().to_string())
        .collect();
    for name in names {
        cmd = cmd.mut_subcommand(name, |sc| apply(sc, settings));
    }
    cmd
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command as Sub};
    use clap::{CommandFactory, FromArgMatches};

    fn parse(file: &str, argv: &[&str]) -> Result<Cli, String> {
        let cmd = with_defaults_from_str(Cli::command(), Path::new("test.toml"), file)
            .map_err(|e| e.to_string())?;
        let m = cmd
            .try_get_matches_from(std::iter::once("repoll").chain(argv.iter().copied()))
            .map_err(|e| e.to_string())?;
        Cli::from_arg_matches(&m).map_err(|e| e.to_string())
    }

    fn serve(file: &str, argv: &[&str]) -> crate::cli::ServeArgs {
        match parse(file, argv).unwrap().command {
            Sub::Serve(a) => *a,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn keys_are_env_names_with_or_without_prefix_and_tables_join() {
        let a = serve(
            r#"
            REPOLL_QUEUE = "q1"
            body_limit = 1234
            [upstream]
            url = "https://api.example.com/r/{key}"
            headers = ["X-A: 1", "X-B: 2"]
            "#,
            &["serve"],
        );
        assert_eq!(a.redis.queue, "q1");
        assert_eq!(a.body_limit, 1234);
        assert_eq!(a.upstream.url, "https://api.example.com/r/{key}");
        assert_eq!(a.upstream.headers, vec!["X-A: 1", "X-B: 2"]);
    }

    #[test]
    fn flags_win_over_the_file_and_the_file_over_defaults() {
        let file = "queue = \"from-file\"\nsim = true\n";
        assert_eq!(serve(file, &["serve"]).redis.queue, "from-file");
        assert!(serve(file, &["serve"]).sim);
        assert!(!serve("", &["serve"]).sim);
        assert_eq!(
            serve(file, &["serve", "--queue", "from-flag"]).redis.queue,
            "from-flag"
        );
        // Untouched settings keep their built-in defaults.
        assert_eq!(serve(file, &["serve"]).body_limit, 64 * 1024);
    }

    #[test]
    fn one_file_serves_every_subcommand() {
        // REPOLL_SIM_ADDR is `--sim-addr` for serve and `--addr` for sim.
        let file = "sim_addr = \"127.0.0.1:9555\"\nworkers = 3\n";
        assert_eq!(serve(file, &["serve"]).sim_addr.port(), 9555);
        match parse(file, &["sim"]).unwrap().command {
            Sub::Sim(s) => assert_eq!(s.addr.port(), 9555),
            other => panic!("{other:?}"),
        }
        // `workers` (serve only) does not disturb `repoll worker`.
        assert!(matches!(
            parse(file, &["worker"]).unwrap().command,
            Sub::Worker(_)
        ));
    }

    #[test]
    fn mistakes_are_named() {
        let e = parse("upstream_urll = \"x\"", &["serve"]).unwrap_err();
        assert!(e.contains("unknown setting `upstream_urll`"), "{e}");
        assert!(e.contains("did you mean"), "{e}");
        let e = parse("queue = [\"a\", \"b\"]", &["serve"]).unwrap_err();
        assert!(e.contains("`queue` takes one value"), "{e}");
        let e = parse("queue = ", &["serve"]).unwrap_err();
        assert!(e.contains("not valid TOML"), "{e}");
        // A value of the wrong type is clap's error, naming the flag.
        let e = parse("body_limit = \"lots\"", &["serve"]).unwrap_err();
        assert!(e.contains("body-limit"), "{e}");
    }

    #[test]
    fn the_documented_example_file_is_valid() {
        let a = serve(include_str!("../../docs/repoll.example.toml"), &["serve"]);
        assert_eq!(
            a.redis.redis_url.as_deref(),
            Some("redis://redis.internal:6379/0")
        );
        assert_eq!(a.redis.queue, "reports");
        assert_eq!(a.workers, Some(32));
        assert_eq!(a.upstream.processing_values, vec!["RUNNING", "QUEUED"]);
        assert_eq!(a.upstream.data_pointer, "");
        assert_eq!(a.policy.poll_interval_ms, 500);
        assert_eq!(a.policy.max_attempts, 5);
        assert!(a.upstream.url.contains("{callback_url}"));
        assert_eq!(
            a.callback.base_url.as_deref(),
            Some("https://repoll.example.com")
        );
    }

    #[test]
    fn secrets_from_the_file_never_reach_help() {
        let file = r#"
            REDIS_URL = "redis://:redis-pw-123@10.0.0.1:6379/0"
            admin_password = "admin-pw-456"
            viewer_password_hash = "$argon2id$v=19$m=19456,t=2,p=1$c2FsdHNhbHQ$viewer-hash-789"
            metrics_token = "metrics-tok-000"
            managed_redis_password = "managed-pw-111"
            [upstream]
            headers = ["Authorization: Bearer upstream-tok-222"]
            "#;
        let mut cmd = with_defaults_from_str(Cli::command(), Path::new("s.toml"), file).unwrap();
        for sub in ["serve", "worker"] {
            let help = cmd
                .find_subcommand_mut(sub)
                .unwrap()
                .render_long_help()
                .to_string();
            for secret in [
                "redis-pw-123",
                "admin-pw-456",
                "viewer-hash-789",
                "metrics-tok-000",
            ] {
                assert!(!help.contains(secret), "{sub} --help shows {secret}");
            }
            // Not hidden altogether: the option itself is still documented.
            assert!(help.contains("--redis-url"), "{sub}");
        }
    }

    #[test]
    fn secrets_from_the_environment_never_reach_help() {
        // Every argument whose value could be a secret hides its environment value.
        let cmd = Cli::command();
        let serve = cmd.find_subcommand("serve").unwrap();
        for env in [
            "REDIS_URL",
            "REPOLL_ADMIN_PASSWORD",
            "REPOLL_ADMIN_PASSWORD_HASH",
            "REPOLL_VIEWER_PASSWORD",
            "REPOLL_VIEWER_PASSWORD_HASH",
            "REPOLL_METRICS_TOKEN",
            "REPOLL_MANAGED_REDIS_PASSWORD",
            "REPOLL_UPSTREAM_HEADERS",
        ] {
            let arg = serve
                .get_arguments()
                .find(|a| a.get_env().is_some_and(|e| e == env))
                .unwrap_or_else(|| panic!("no argument reads {env}"));
            assert!(arg.is_hide_env_values_set(), "{env} is shown by --help");
        }
    }

    #[test]
    fn the_command_line_definition_is_valid() {
        // clap's debug asserts (unique argument ids across flattened groups, ...) run here,
        // not only when a subcommand is first parsed by the real binary.
        Cli::command().debug_assert();
    }

    #[test]
    fn config_path_from_raw_args() {
        let a = |v: &[&str]| v.iter().map(OsString::from).collect::<Vec<_>>();
        assert_eq!(
            config_path(&a(&["repoll", "serve", "--config", "x.toml"])),
            Some(PathBuf::from("x.toml"))
        );
        assert_eq!(
            config_path(&a(&["repoll", "--config=y.toml", "worker"])),
            Some(PathBuf::from("y.toml"))
        );
        assert_eq!(config_path(&a(&["repoll", "serve"])), None);
    }
}
