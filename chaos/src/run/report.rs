//! The table a chaos run ends with, and its verdict: PASS when nothing was lost and nothing
//! completed twice beyond its lease losses.

use std::{collections::BTreeMap, path::Path, time::Duration};

use super::{
    checks::{Finals, Histories, JobsPaid, Recovery, SimStats, Twice},
    schedule::{Kill, SubmitStats},
    KILL_EVERY, LEASE_MS,
};
use crate::common::fmt_ms;

/// Everything the table shows.
pub(super) struct Report<'a> {
    pub(super) n: usize,
    pub(super) distinct: usize,
    pub(super) failing: usize,
    pub(super) submit_took: Duration,
    pub(super) stats: &'a SubmitStats,
    pub(super) unique: usize,
    pub(super) finals: &'a Finals,
    pub(super) drain_took: Duration,
    pub(super) twice: &'a Twice,
    /// A job-API run's jobs (`--job-api`).
    pub(super) jobs: Option<&'a JobsPaid>,
    pub(super) sim: &'a SimStats,
    pub(super) total_losses: u64,
    pub(super) restart_report: &'a str,
    pub(super) stall_report: &'a str,
    pub(super) appendfsync: &'a str,
    pub(super) self_exits: &'a [String],
    pub(super) kills: &'a [Kill],
    pub(super) histories: &'a Histories,
    pub(super) logs: &'a Path,
}

/// Prints the table; true when the run passed.
pub(super) fn print(r: &Report<'_>) -> bool {
    print_outcome(r);
    print_kills(r);
    for l in r.finals.lost.iter().take(20) {
        println!("lost: {l}");
    }
    for u in r.twice.unexcused.iter().take(20) {
        println!("completed twice without a lease loss: {u}");
    }
    if r.twice.unknown_keys > 0 {
        println!(
            "{} simulator keys match no submitted query",
            r.twice.unknown_keys
        );
    }
    if let Some(j) = r.jobs {
        println!(
            "jobs                 {} made for {} queries ({} submits; {} for new lives of a task; {} paid twice)",
            j.created,
            j.queries,
            j.submits,
            j.new_lives,
            j.unexcused.len()
        );
        for u in j.unexcused.iter().take(20) {
            println!("job paid twice: {u}");
        }
    }
    println!("logs: {}", r.logs.display());
    let jobs_ok = r.jobs.is_none_or(|j| j.unexcused.is_empty());
    let pass = r.finals.lost.is_empty() && r.twice.unexcused.is_empty() && jobs_ok;
    println!("{}", if pass { "PASS" } else { "FAIL" });
    pass
}

/// The submits, the verdicts, the faults.
fn print_outcome(r: &Report<'_>) {
    let (s, f, t) = (r.stats, r.finals, r.twice);
    let failing = r.failing;
    println!();
    println!("── chaos run ─────────────────────────────────────────────────────────────");
    println!(
        "submitted            {} ({} distinct, {failing} answered `failed` by the upstream) in {:.1} s",
        r.n,
        r.distinct,
        r.submit_took.as_secs_f64()
    );
    println!(
        "accepted / rejected  {} / {} (retried answers: {})",
        s.accepted,
        s.rejected,
        fmt_map(&s.retried)
    );
    println!(
        "unique tasks         {} — done {}, dead {}; all final {:.1} s after the last submit",
        r.unique,
        f.done,
        f.dead,
        r.drain_took.as_secs_f64()
    );
    println!(
        "LOST                 {}{}",
        f.lost.len(),
        if f.lost.is_empty() { "" } else { "   <-- FAIL" }
    );
    println!(
        "completed twice      {} keys (bound: each within its task's lease losses — {} were; {} not){}",
        t.twice,
        t.excused,
        t.unexcused.len(),
        if t.unexcused.is_empty() { "" } else { "   <-- FAIL" }
    );
    println!(
        "dead by reason       {} (expected fatal: {failing})",
        fmt_map(&f.dead_by)
    );
    println!("same query, new id   {}", s.id_mismatch);
    println!(
        "upstream calls       {} over {} keys",
        r.sim.calls,
        r.sim.keys.len()
    );
    println!(
        "redis restart        {} (appendfsync {})",
        r.restart_report, r.appendfsync
    );
    println!("redis stall          {}", r.stall_report);
    println!(
        "worker self-exits    {}{}",
        r.self_exits.len(),
        if r.self_exits.is_empty() {
            String::new()
        } else {
            format!(" ({})", r.self_exits.join("; "))
        }
    );
}

/// Lease losses, and per kill what the histories say about its recovery.
fn print_kills(r: &Report<'_>) {
    let total_losses = r.total_losses;
    let killed: Vec<(&Kill, Recovery)> = r
        .kills
        .iter()
        .map(|k| (k, r.histories.recovery(&k.worker, k.at_ms)))
        .collect();
    let from_kills: usize = killed.iter().map(|(_, r)| r.held).sum();
    let measured: Vec<i64> = killed
        .iter()
        .filter(|(_, r)| r.held > 0)
        .filter_map(|(_, r)| r.recovered_ms)
        .collect();
    let unrecovered = killed
        .iter()
        .filter(|(_, r)| r.held > 0 && r.recovered_ms.is_none())
        .count();
    println!(
        "lease losses         {total_losses} (`lease_expired` in the task histories): {from_kills} from kills, {} from the stall/restart",
        total_losses.saturating_sub(from_kills as u64)
    );
    println!(
        "kills                {} (every {} s; {} held leases, {unrecovered} not recovered){}",
        r.kills.len(),
        KILL_EVERY.as_secs(),
        killed.iter().filter(|(_, r)| r.held > 0).count(),
        if unrecovered > 0 {
            "   <-- see below"
        } else {
            ""
        }
    );
    if !measured.is_empty() {
        let mut sorted = measured.clone();
        sorted.sort_unstable();
        let pct = |p: f64| sorted[((sorted.len() - 1) as f64 * p).round() as usize];
        let ms = |v: i64| fmt_ms(u128::try_from(v.max(0)).unwrap_or(0));
        println!(
            "recovery             min {} · median {} · p90 {} · max {} (lease {LEASE_MS} ms; SIGKILL → every task it held claimed again or dead)",
            ms(sorted[0]),
            ms(pct(0.5)),
            ms(pct(0.9)),
            ms(*sorted.last().unwrap_or(&0))
        );
    }
    println!("  kill      at  worker          held    reaped  recovered");
    for (k, r) in &killed {
        let ms = |v: Option<i64>| match v {
            _ if r.held == 0 => "-".to_string(),
            Some(v) => fmt_ms(u128::try_from(v.max(0)).unwrap_or(0)),
            None => "never".to_string(),
        };
        println!(
            "  {:>4}  {:>6.1}s  {:<14}  {:>4}  {:>8}  {:>9}",
            k.n,
            k.at.as_secs_f64(),
            k.worker,
            r.held,
            ms(r.reaped_ms),
            ms(r.recovered_ms)
        );
    }
}

fn fmt_map(m: &BTreeMap<String, u64>) -> String {
    if m.is_empty() {
        return "none".into();
    }
    m.iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}
