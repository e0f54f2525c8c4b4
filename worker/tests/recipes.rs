//! docs/recipes.md, run: each recipe's settings, read from the page itself (only the host of
//! its URLs replaced), drive a worker against the simulator speaking that API's shapes and
//! status words. 10 queries asked twice → 10 final answers made from each query, 10 jobs.

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use clap::{Args, Command, FromArgMatches};
use common::*;
use worker::{PolicyArgs, UpstreamArgs};

const RECIPES: &str = include_str!("../../docs/recipes.md");

/// Each `## ` section's first `sh` block, as (title, [(variable, value)]).
fn recipes() -> Vec<(String, Vec<(String, String)>)> {
    let mut out = Vec::new();
    for section in RECIPES.split("\n## ").skip(1) {
        let title = section.lines().next().unwrap_or_default().to_string();
        let block = section
            .split("```sh\n")
            .nth(1)
            .and_then(|b| b.split("```").next())
            .unwrap_or_else(|| panic!("recipe {title:?} has no sh block"));
        let pairs = block
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| {
                let (var, value) = l
                    .split_once('=')
                    .unwrap_or_else(|| panic!("{title}: not VAR=value: {l}"));
                (var.to_string(), value.trim_matches('\'').to_string())
            })
            .collect();
        out.push((title, pairs));
    }
    out
}

/// Every `https://host` in `value` replaced by `base` (the simulator).
fn on_host(value: &str, base: &str) -> String {
    let mut out = String::new();
    let mut rest = value;
    while let Some(at) = rest.find("https://") {
        out.push_str(&rest[..at]);
        let after = &rest[at + "https://".len()..];
        let end = after.find('/').unwrap_or(after.len());
        out.push_str(base);
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

/// The settings of `T` from (variable, value) pairs, through the flags that read those
/// variables (the process environment is not read).
fn parse<T: Args + FromArgMatches>(pairs: &BTreeMap<String, String>, title: &str) -> T {
    let cmd = T::augment_args(Command::new("recipe").no_binary_name(true));
    let mut argv = Vec::new();
    for arg in cmd.get_arguments() {
        let Some(env) = arg.get_env().and_then(|e| e.to_str()) else {
            continue;
        };
        if let (Some(value), Some(long)) = (pairs.get(env), arg.get_long()) {
            argv.push(format!("--{long}={value}"));
        }
    }
    let m = cmd
        .mut_args(|a| a.env(None::<&str>))
        .try_get_matches_from(argv)
        .unwrap_or_else(|e| panic!("{title}: {e}"));
    T::from_arg_matches(&m).unwrap_or_else(|e| panic!("{title}: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_recipe_runs_against_the_simulator_speaking_its_api() {
    init_tracing();
    let recipes = recipes();
    assert_eq!(
        recipes.len(),
        4,
        "{:?}",
        recipes.iter().map(|r| &r.0).collect::<Vec<_>>()
    );
    for (i, (title, pairs)) in recipes.iter().enumerate() {
        let sim = start_sim(sim::SimArgs {
            polls: 2,
            ..sim::SimArgs::default()
        })
        .await;
        // A test's pace (fast polls) unless the recipe says otherwise.
        let mut settings: BTreeMap<String, String> = [
            ("REPOLL_POLL_INTERVAL_MS", "20"),
            ("REPOLL_POLL_MAX_INTERVAL_MS", "200"),
            ("REPOLL_BACKOFF_BASE_MS", "20"),
            ("REPOLL_BACKOFF_MAX_MS", "200"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        for (var, value) in pairs {
            assert!(var.starts_with("REPOLL_"), "{title}: {var}");
            settings.insert(var.clone(), on_host(value, &sim.base));
        }
        let up: UpstreamArgs = parse(&settings, title);
        let policy: PolicyArgs = parse(&settings, title);
        assert!(up.job.submit_url.is_some(), "{title}: a job API");
        let q = queue(&format!("recipe-{i}")).await;
        let queries: Vec<String> = (0..10)
            .map(|n| format!("https://media.example/{i}/{n}"))
            .collect();
        for _ in 0..2 {
            for query in &queries {
                q.enqueue(query, "", &policy.enqueue_policy())
                    .await
                    .expect("enqueue");
            }
        }
        let w = spawn(worker(&q, &up, policy.clone(), fast_worker_args(8)));
        let s = wait_settled(&q, 10, Duration::from_secs(60)).await;
        w.stop().await;
        assert_eq!((s.results, s.dead), (10, 0), "{title}: {s:?}");
        for query in &queries {
            let d = q.get(&id_of(query)).await.expect("get").expect("known");
            let data = d.result.expect("a result").data;
            assert!(
                data.contains(query.as_str()),
                "{title}: {query} answered {data}"
            );
        }
        let jobs: sim::jobs::JobStats = reqwest::get(format!("{}/_sim/jobs", sim.base))
            .await
            .expect("jobs")
            .json()
            .await
            .expect("json");
        assert_eq!(jobs.created, 10, "{title}: one job per query");
    }
}
