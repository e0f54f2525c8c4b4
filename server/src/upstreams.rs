//! Named upstreams: one deployment, several slow APIs (issue 13).
//!
//! The top-level settings (`REPOLL_UPSTREAM_*`, the poll and error policies, the breaker)
//! describe the upstream `default`. A config file adds more, one section each:
//!
//! ```toml
//! [upstreams.search]
//! url = "https://search.example.com/v1/jobs?q={key}"
//! api_key_env = "SEARCH_API_KEY"     # the key itself stays in the environment
//! poll_interval_ms = 2000
//! rate_per_sec = 20
//! concurrency = 8
//! breaker_failures = 10
//! ```
//!
//! Inside a section the keys are today's names without their prefix (`url`, `status_pointer`,
//! `poll_interval_ms`, `max_attempts`, `rate_per_sec`, `breaker_failures`, ...), resolved as
//! `REPOLL_UPSTREAM_<KEY>`, then `REPOLL_<KEY>`. A section starts from the built-in defaults,
//! not from the default upstream's settings: nothing of one API (above all its key or
//! headers) leaks into another.
//!
//! Why a queue per upstream: each gets its own hash tag, so its breaker, rate limit, ready
//! lists and counters are its own, and every script stays exactly as tested for one queue. The
//! queue of upstream `x` is named `<queue>.x`; task ids cover the upstream
//! (`TaskId::of_upstream_query`), so an id names one upstream's task.

use std::collections::BTreeMap;
use std::path::Path;

use clap::{Args, Command, FromArgMatches};

use crate::config_file::{self, ConfigError};
use crate::settings::{BreakerArgs, FreshnessArgs, RedisArgs, TenantArgs};

/// Most named upstreams one deployment may declare: each is a queue with its own worker
/// slots, so the number is a resource decision, not a free label.
pub const MAX_NAMED_UPSTREAMS: usize = 16;

/// One upstream's settings as a section gives them.
#[derive(Clone, Debug, Args)]
pub struct UpstreamSettings {
    #[command(flatten)]
    pub upstream: worker::UpstreamArgs,
    #[command(flatten)]
    pub policy: worker::PolicyArgs,
    #[command(flatten)]
    pub breaker: BreakerArgs,
    #[command(flatten)]
    pub tenants: TenantArgs,
    #[command(flatten)]
    pub freshness: FreshnessArgs,
    /// Worker slots for this upstream in each process (unset: the process's `--workers` /
    /// `--concurrency`).
    #[arg(long = "concurrency", env = "REPOLL_CONCURRENCY",
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub concurrency: Option<u32>,
    /// The environment variable holding this upstream's API key (sent in `api_key_header`).
    #[arg(long = "api-key-env", env = "REPOLL_UPSTREAM_API_KEY_ENV")]
    pub api_key_env: Option<String>,
    /// The environment variable holding this upstream's webhook secret (a job API provider's
    /// `whsec_…`, or a header's value with `webhook_header`).
    #[arg(
        long = "webhook-secret-env",
        env = "REPOLL_UPSTREAM_WEBHOOK_SECRET_ENV"
    )]
    pub webhook_secret_env: Option<String>,
}

/// A `[upstreams.<name>]` section, parsed and checked.
#[derive(Clone, Debug)]
pub struct UpstreamSection {
    pub name: String,
    pub settings: UpstreamSettings,
}

/// The `[upstreams.*]` sections of a config file's text (none without an `upstreams` table).
/// Every mistake names the upstream and the key.
pub fn sections_from_table(
    path: &Path,
    table: &toml::Table,
) -> Result<Vec<UpstreamSection>, ConfigError> {
    let Some(upstreams) = table.get("upstreams") else {
        return Ok(Vec::new());
    };
    let value_err = |key: &str, problem: String| ConfigError::Value {
        path: path.to_owned(),
        key: key.to_string(),
        problem,
    };
    let toml::Value::Table(upstreams) = upstreams else {
        return Err(value_err(
            "upstreams",
            "must be tables: [upstreams.<name>]".into(),
        ));
    };
    if upstreams.len() > MAX_NAMED_UPSTREAMS {
        return Err(value_err(
            "upstreams",
            format!(
                "declares {} upstreams; at most {MAX_NAMED_UPSTREAMS}",
                upstreams.len()
            ),
        ));
    }
    let mut out = Vec::new();
    for (name, section) in upstreams {
        let key = format!("upstreams.{name}");
        if !queue::is_valid_upstream_name(name) {
            return Err(value_err(
                &key,
                "is not an upstream name: 1 to 32 of a-z, 0-9, _ and -, starting with a letter or digit".into(),
            ));
        }
        if name == queue::DEFAULT_UPSTREAM {
            return Err(value_err(
                &key,
                "is the top-level settings (REPOLL_UPSTREAM_*, [upstream]); name this one otherwise".into(),
            ));
        }
        let toml::Value::Table(section) = section else {
            return Err(value_err(&key, "must be a table".into()));
        };
        let settings = parse_section(path, name, section)?;
        out.push(UpstreamSection {
            name: name.clone(),
            settings,
        });
    }
    Ok(out)
}

/// One section through clap: its keys become the defaults of a command made of
/// [`UpstreamSettings`] alone, with the environment switched off (a section's values are the
/// file's, never the process environment's, which belongs to the default upstream).
fn parse_section(
    path: &Path,
    name: &str,
    section: &toml::Table,
) -> Result<UpstreamSettings, ConfigError> {
    let cmd = UpstreamSettings::augment_args(Command::new("upstream").no_binary_name(true));
    let known = config_file::known_envs(&cmd);
    let mut flat = BTreeMap::new();
    config_file::flatten("", section, &mut flat);
    let mut settings: Vec<(String, Vec<String>)> = Vec::new();
    for (key, value) in &flat {
        let full = format!("upstreams.{name}.{key}");
        let upper = key.replace(['-', '.'], "_").to_ascii_uppercase();
        let env = [
            format!("REPOLL_UPSTREAM_{upper}"),
            format!("REPOLL_{upper}"),
        ]
        .into_iter()
        .find(|e| known.contains_key(e))
        .ok_or_else(|| ConfigError::Unknown {
            path: path.to_owned(),
            hint: section_hint(key, &known),
            key: full.clone(),
        })?;
        let multiple = known.get(&env).copied().unwrap_or(false);
        let values =
            config_file::to_strings(value, multiple).map_err(|problem| ConfigError::Value {
                path: path.to_owned(),
                key: full.clone(),
                problem,
            })?;
        settings.push((env, values));
    }
    let given = |env: &str| settings.iter().any(|(e, _)| e == env);
    let problem = match (given("REPOLL_UPSTREAM_URL"), given("REPOLL_UPSTREAM_SUBMIT_URL")) {
        (false, false) => Some(
            "needs a `url` (the URL template, with {key}) or, for a job API, a `submit_url`",
        ),
        (true, true) => Some(
            "has both `url` and `submit_url`: an upstream is polled at one URL or submitted to, not both",
        ),
        _ => None,
    };
    if let Some(problem) = problem {
        return Err(ConfigError::Value {
            path: path.to_owned(),
            key: format!("upstreams.{name}"),
            problem: problem.into(),
        });
    }
    let cmd = config_file::apply(cmd, &settings).mut_args(|a| a.env(None::<&str>));
    let m = cmd
        .try_get_matches_from(std::iter::empty::<String>())
        .map_err(|e| ConfigError::Value {
            path: path.to_owned(),
            key: format!("upstreams.{name}"),
            problem: first_line(&e.to_string()),
        })?;
    let mut s = UpstreamSettings::from_arg_matches(&m).map_err(|e| ConfigError::Value {
        path: path.to_owned(),
        key: format!("upstreams.{name}"),
        problem: first_line(&e.to_string()),
    })?;
    // `UpstreamArgs::api_key` is read from REPOLL_UPSTREAM_API_KEY, the default upstream's, and
    // the webhook secret from REPOLL_UPSTREAM_WEBHOOK_SECRET: a named one takes each only from
    // the variable its section names.
    let secret = |env_key: &str, var: Option<&str>| match var {
        None => Ok(None),
        Some(var) => match std::env::var(var) {
            Ok(k) if !k.is_empty() => Ok(Some(worker::Secret::from(k))),
            _ => Err(ConfigError::Value {
                path: path.to_owned(),
                key: format!("upstreams.{name}.{env_key}"),
                problem: format!("names {var}, which is not set"),
            }),
        },
    };
    s.upstream.api_key = secret("api_key_env", s.api_key_env.as_deref())?;
    s.upstream.job.webhook_secret = secret("webhook_secret_env", s.webhook_secret_env.as_deref())?;
    Ok(s)
}

fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or_default().trim().to_string()
}

/// ", did you mean ..." among a section's keys.
fn section_hint(key: &str, known: &BTreeMap<String, bool>) -> String {
    let names = known.keys().map(|env| {
        env.strip_prefix("REPOLL_UPSTREAM_")
            .or_else(|| env.strip_prefix("REPOLL_"))
            .unwrap_or(env)
            .to_ascii_lowercase()
    });
    config_file::hint_among(
        key,
        names,
        " (a section takes the upstream, poll, error-policy, breaker and freshness settings)",
    )
}

/// Everything a process needs to run one upstream: its queue settings, how to call it, how to
/// poll it, and how many worker slots it gets here.
#[derive(Clone, Debug)]
pub struct UpstreamPlan {
    /// `default` or the section's name.
    pub name: String,
    pub queue: queue::QueueConfig,
    pub upstream: worker::UpstreamArgs,
    pub policy: worker::PolicyArgs,
    /// `None`: the process's own slot count.
    pub concurrency: Option<usize>,
}

impl UpstreamPlan {
    /// Whether this is the upstream of the top-level settings.
    pub fn is_default(&self) -> bool {
        self.name == queue::DEFAULT_UPSTREAM
    }
}

/// The default upstream's plan, then one per section, by name.
pub fn plans(
    redis: &RedisArgs,
    upstream: &worker::UpstreamArgs,
    policy: &worker::PolicyArgs,
    sections: &[UpstreamSection],
) -> Vec<UpstreamPlan> {
    let base = redis.queue_config();
    let mut out = vec![UpstreamPlan {
        name: queue::DEFAULT_UPSTREAM.to_string(),
        queue: base.clone(),
        upstream: upstream.clone(),
        policy: policy.clone(),
        concurrency: None,
    }];
    for s in sections {
        out.push(UpstreamPlan {
            name: s.name.clone(),
            queue: queue::QueueConfig {
                name: format!("{}.{}", base.name, s.name),
                breaker: s.settings.breaker.config(),
                tenants: s.settings.tenants.config(),
                result_ttl_ms: s
                    .settings
                    .freshness
                    .fresh_for_ms
                    .unwrap_or(base.result_ttl_ms),
                freshness: s.settings.freshness.config(),
                upstream: s.name.clone(),
                ..base.clone()
            },
            upstream: s.settings.upstream.clone(),
            policy: s.settings.policy.clone(),
            concurrency: s.settings.concurrency.map(|c| c as usize),
        });
    }
    out
}

/// The plans a process serves: all, or those `only` names (each must exist).
pub fn select(plans: Vec<UpstreamPlan>, only: &[String]) -> Result<Vec<UpstreamPlan>, String> {
    let only: Vec<&str> = only
        .iter()
        .map(|s| s.trim())
        .filter(|s| !s.is_empty())
        .collect();
    if only.is_empty() {
        return Ok(plans);
    }
    let known: Vec<String> = plans.iter().map(|p| p.name.clone()).collect();
    if let Some(bad) = only.iter().find(|n| !known.iter().any(|k| k == *n)) {
        return Err(format!(
            "--upstream {bad:?}: no such upstream; known: {}",
            known.join(", ")
        ));
    }
    Ok(plans
        .into_iter()
        .filter(|p| only.contains(&p.name.as_str()))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn sections(text: &str) -> Result<Vec<UpstreamSection>, String> {
        let table: toml::Table = text.parse().map_err(|e| format!("{e}"))?;
        sections_from_table(Path::new("t.toml"), &table).map_err(|e| e.to_string())
    }

    #[test]
    fn a_section_reads_todays_names_without_their_prefix() {
        let s = sections(
            r#"
            [upstreams.search]
            url = "http://127.0.0.1:9/s?q={key}"
            status_pointer = "/job/state"
            processing = ["RUNNING"]
            poll_interval_ms = 2000
            max_attempts = 7
            rate_per_sec = 20
            concurrency = 8
            breaker_failures = 10
            [upstreams.search.poll]
            max_interval_ms = 9000
            [upstreams.reports]
            url = "http://127.0.0.1:9/r/{key}"
            "#,
        )
        .unwrap();
        assert_eq!(s.len(), 2);
        let (r, q) = (&s[0], &s[1]);
        assert_eq!((r.name.as_str(), q.name.as_str()), ("reports", "search"));
        let q = &q.settings;
        assert_eq!(q.upstream.url, "http://127.0.0.1:9/s?q={key}");
        assert_eq!(q.upstream.status_pointer, "/job/state");
        assert_eq!(q.upstream.processing_values, vec!["RUNNING"]);
        assert_eq!(q.upstream.upstream_rate_per_sec, 20);
        assert_eq!(q.policy.poll_interval_ms, 2000);
        assert_eq!(q.policy.poll_max_interval_ms, 9000);
        assert_eq!(q.policy.max_attempts, 7);
        assert_eq!(q.concurrency, Some(8));
        assert_eq!(q.breaker.failures, 10);
        // Untouched keys are the built-in defaults.
        let d = worker::PolicyArgs::default();
        assert_eq!(r.settings.policy.poll_interval_ms, d.poll_interval_ms);
        assert!(r.settings.upstream.api_key.is_none());
    }

    #[test]
    fn the_documented_example_declares_a_second_upstream() {
        // Its key variable is the deployment's; PATH stands in for it (always set).
        let text = include_str!("../../docs/repoll.example.toml")
            .replace("\"SEARCH_API_KEY\"", "\"PATH\"");
        let s = sections(&text).unwrap();
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].name, "search");
        let u = &s[0].settings;
        assert!(u.upstream.url.starts_with("https://search.example.com/"));
        assert!(u.upstream.api_key.is_some());
        assert_eq!(u.upstream.done_values, vec!["finished"]);
        assert_eq!(u.upstream.upstream_rate_per_sec, 20);
        assert_eq!((u.concurrency, u.breaker.failures), (Some(8), 10));
        let t = u.tenants.config();
        assert_eq!((t.concurrency, t.rate_per_sec, t.burst), (4, 5.0, 10));
        worker::Upstream::new(&u.upstream).expect("a valid upstream");
    }

    #[test]
    fn mistakes_name_the_upstream_and_the_key() {
        let e = sections("[upstreams.search]\nurl = \"http://x/{key}\"\npoll_intervall_ms = 5\n")
            .unwrap_err();
        assert!(e.contains("upstreams.search.poll_intervall_ms"), "{e}");
        assert!(e.contains("did you mean"), "{e}");
        let e = sections("[upstreams.search]\nmax_attempts = 3\n").unwrap_err();
        assert!(e.contains("needs a `url`"), "{e}");
        let e = sections("[upstreams.Search]\nurl = \"http://x/{key}\"\n").unwrap_err();
        assert!(e.contains("not an upstream name"), "{e}");
        let e = sections("[upstreams.default]\nurl = \"http://x/{key}\"\n").unwrap_err();
        assert!(e.contains("top-level"), "{e}");
        let e = sections("[upstreams.s]\nurl = \"http://x/{key}\"\nmax_attempts = \"many\"\n")
            .unwrap_err();
        assert!(e.contains("upstreams.s") && e.contains("many"), "{e}");
        let e = sections("[upstreams.s]\nurl = \"http://x/{key}\"\napi_key = \"k\"\n").unwrap_err();
        assert!(e.contains("unknown setting `upstreams.s.api_key`"), "{e}");
        let e = sections(
            "[upstreams.s]\nurl = \"http://x/{key}\"\napi_key_env = \"REPOLL_TEST_SURELY_UNSET_9\"\n",
        )
        .unwrap_err();
        assert!(
            e.contains("REPOLL_TEST_SURELY_UNSET_9, which is not set"),
            "{e}"
        );
        let many: String = (0..=MAX_NAMED_UPSTREAMS)
            .map(|i| format!("[upstreams.u{i}]\nurl = \"http://x/{{key}}\"\n"))
            .collect();
        assert!(sections(&many).unwrap_err().contains("at most"));
    }

    #[test]
    fn plans_give_each_upstream_its_queue_and_select_filters() {
        let s = sections(
            "[upstreams.search]\nurl = \"http://x/{key}\"\nbreaker_failures = 4\nconcurrency = 3\n",
        )
        .unwrap();
        let redis = crate::cli::Cli::try_parse_from(["repoll", "worker"])
            .map(|c| match c.command {
                crate::cli::Command::Worker(w) => w.redis,
                _ => unreachable!(),
            })
            .unwrap();
        let p = plans(
            &redis,
            &worker::UpstreamArgs::default(),
            &worker::PolicyArgs::default(),
            &s,
        );
        assert_eq!(p.len(), 2);
        assert!(p[0].is_default());
        assert_eq!(p[0].queue.name, "repoll");
        assert_eq!(p[0].queue.upstream, "");
        assert_eq!(p[1].queue.name, "repoll.search");
        assert_eq!(p[1].queue.upstream, "search");
        assert_eq!(p[1].queue.breaker.failures, 4);
        assert_eq!(p[1].concurrency, Some(3));
        let only = select(p.clone(), &["search".into()]).unwrap();
        assert_eq!(only.len(), 1);
        assert_eq!(only[0].name, "search");
        assert_eq!(select(p.clone(), &[]).unwrap().len(), 2);
        let e = select(p, &["nope".into()]).unwrap_err();
        assert!(e.contains("known: default, search"), "{e}");
    }
}
