//! The hostile upstream: the simulator (inside `repoll serve --sim`) made to answer the worst
//! it may — a `failed` message of megabytes, partials of megabytes, a final result of
//! megabytes, JSON nested 60,000 deep — and then 50 dead tasks with the longest texts a row of
//! the dashboard can hold. What is left afterwards is measured and gated: Redis's
//! `used_memory` growth, the `MEMORY USAGE` of each hostile dead task's record and history,
//! the server's resident memory, the dead list page and the public API's answers.
//!
//! The queries are submitted over the public API like anyone's, each batch of 20 from its own
//! loopback address (127.0.1.x): the API's per-client limit (a burst of 20) is the server's
//! as shipped, and the probes' own address keeps its whole allowance.

use std::{
    collections::BTreeMap,
    sync::atomic::{AtomicU8, Ordering},
    time::{Duration, Instant},
};

use futures::{stream, StreamExt};
use redis::aio::ConnectionManager;

use super::{probe, sign_in, Gate, Probe, Target};
use crate::redis_server;

/// What the phase asks of the upstream.
#[derive(Clone, Copy, Debug)]
pub(super) struct Plan {
    /// Queries of each kind with megabytes (failed, partial, final).
    pub(super) each: usize,
    /// Queries answered with JSON 60,000 deep.
    pub(super) deep: usize,
    /// Dead tasks with the longest texts, for the dead list page.
    pub(super) rows: usize,
    /// Filler bytes of a hostile answer.
    pub(super) pad: usize,
}

/// The goal: a dead task with a hostile message (a failed message or a result of
/// megabytes) takes at most 2 KB of Redis, its record and history together (`MEMORY USAGE`,
/// exact).
const TASK_BYTES_MAX: u64 = 2048;

/// A task dead of bad bodies was called five times (`REPOLL_MAX_ATTEMPTS`): its history holds
/// five claims and five errors with their call, which 2 KB does not. Still bounded: the
/// attempts are, and each entry is cut (1,300 bytes at most, about 150 here).
const RETRIED_TASK_BYTES_MAX: u64 = 3072;

/// Redis's `used_memory` may grow by at most this per hostile task, plus [`MEMORY_SLACK`]:
/// the record and history of each (the goal above) and its share of what every task adds
/// (index members, events, the chart's counters).
const MEMORY_PER_TASK: u64 = 2048;

/// Growth of `used_memory` not owed to any one task: allocator pages, the events stream's
/// listpack nodes, connection buffers.
const MEMORY_SLACK: u64 = 256 * 1024;

/// The server's resident memory once the answers were read, at most (VmRSS). About 45 MB
/// before, so a few of the 63 answers of megabytes kept anywhere would show.
const RSS_MAX_KB: u64 = 256 * 1024;

/// The server's peak resident memory over the whole check, at most (VmHWM): while its 16
/// worker slots each read an answer of 4 MB (the body, then its parse, then the data as text).
const PEAK_MAX_KB: u64 = 512 * 1024;

/// The goal: the dead list's page of 50 rows is at most 200 KB.
const PAGE_MAX: usize = 200 * 1024;

/// The public API's answer for a hostile task, at most.
const API_MAX: usize = 4 * 1024;

/// How long the hostile tasks may take to end (bad bodies are retried with backoff: at most
/// about 8 s; the rest end at their first or third poll).
const SETTLE_WITHIN: Duration = Duration::from_secs(180);

/// Nesting of the deep answers: far past serde_json's recursion limit of 128.
const DEPTH: usize = 60_000;

/// Characters of a query at most (`model::MAX_QUERY_CHARS`).
const QUERY_CHARS: usize = 512;

/// What the phase measured and decided.
pub(super) struct Hostile {
    pub(super) during: Probe,
    pub(super) after: Probe,
    pub(super) load: String,
    pub(super) gates: Vec<Gate>,
    /// Figures for the report, one line each.
    pub(super) figures: Vec<String>,
}

/// One submitted query and how it ended.
struct Asked {
    kind: &'static str,
    id: String,
    /// "done" or "failed" once it ended; "" while not.
    status: String,
    /// Bytes of its final `GET /api/v1/queries/<id>` answer.
    answer_bytes: usize,
}

/// Runs the phase against `t`: the hostile queries, their figures and gates, then the dead
/// list's page of the longest rows.
pub(super) async fn run(t: &Target, plan: Plan) -> Result<Hostile, String> {
    let mut con = redis_server::connect(&t.redis_url).await?;
    let used_before = used_memory(&mut con).await?;
    let rss_before = proc_kb(t.pid, "VmRSS").unwrap_or(0);

    let started = Instant::now();
    let mut asked = submit_all(&t.base, &hostile_queries(&plan)).await?;
    let during = probe(&t.base, "hostile-during").await;
    settle(&t.base, &mut asked).await?;
    let settled_in = started.elapsed();
    // A moment for the last writes and frees, then the figures.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let used_after = used_memory(&mut con).await?;
    let rss_after = proc_kb(t.pid, "VmRSS").unwrap_or(0);
    let rss_peak = proc_kb(t.pid, "VmHWM").unwrap_or(0);

    let mut gates = vec![ending_gate(&asked, &plan, settled_in)];
    gates.extend(record_gates(&mut con, &asked).await?);
    let tasks = asked.len() as u64;
    let growth = used_after.saturating_sub(used_before);
    let allowed = MEMORY_PER_TASK * tasks + MEMORY_SLACK;
    gates.push(Gate::new(
        "hostile upstream: Redis used_memory growth",
        growth <= allowed,
        format!(
            "{used_before} -> {used_after} bytes: +{growth} for {tasks} tasks ({} a task); \
             bound {MEMORY_PER_TASK} a task + {MEMORY_SLACK} = {allowed}",
            growth / tasks.max(1)
        ),
    ));
    gates.push(Gate::new(
        "hostile upstream: serve's resident memory",
        rss_after > 0 && rss_after <= RSS_MAX_KB && rss_peak <= PEAK_MAX_KB,
        format!(
            "VmRSS {} -> {} MB (bound {} MB); peak VmHWM over the whole check {} MB (bound {} MB)",
            rss_before / 1024,
            rss_after / 1024,
            RSS_MAX_KB / 1024,
            rss_peak / 1024,
            PEAK_MAX_KB / 1024
        ),
    ));
    gates.push(answer_gate(&asked));
    let mut figures = vec![format!(
        "Redis used_memory {used_before} -> {used_after} bytes after {tasks} hostile tasks; \
         serve VmRSS {} -> {} kB (VmHWM {} kB)",
        rss_before, rss_after, rss_peak
    )];

    let (page_gate, rows_asked, used_rows) = dead_list(t, &plan, &mut con).await?;
    gates.push(page_gate);
    figures.push(format!(
        "Redis used_memory {used_rows} bytes after {rows_asked} more dead tasks with the longest texts"
    ));

    let after = probe(&t.base, "hostile-after").await;
    Ok(Hostile {
        during,
        after,
        load: format!(
            "{} hostile queries ended in {:.1} s; then {rows_asked} long dead rows",
            asked.len(),
            settled_in.as_secs_f64(),
        ),
        gates,
        figures,
    })
}

/// The queries of the plan, each with its kind: a failed message, huge partials and a huge
/// final result (`plan.each` of each, `plan.pad` bytes of filler), and JSON nested [`DEPTH`]
/// deep.
fn hostile_queries(plan: &Plan) -> Vec<(&'static str, String)> {
    let pad = plan.pad;
    let mut queries: Vec<(&'static str, String)> = Vec::new();
    for i in 0..plan.each {
        queries.push((
            "failed",
            format!("abuse-hostile-failed-{i} status=failed pad={pad}"),
        ));
        queries.push((
            "partial",
            format!("abuse-hostile-partial-{i} polls=3 pad_partial={pad}"),
        ));
        queries.push((
            "final",
            format!("abuse-hostile-final-{i} polls=1 pad={pad}"),
        ));
    }
    for i in 0..plan.deep {
        queries.push((
            "deep",
            format!("abuse-hostile-deep-{i} polls=1 deep={DEPTH}"),
        ));
    }
    queries
}

/// Every query ended, and as its kind should ([`expected`]).
fn ending_gate(asked: &[Asked], plan: &Plan, settled_in: Duration) -> Gate {
    let unsettled = asked.iter().filter(|a| a.status.is_empty()).count();
    let wrong: Vec<String> = asked
        .iter()
        .filter(|a| !a.status.is_empty() && a.status != expected(a.kind))
        .map(|a| format!("{} {} ended {}", a.kind, short(&a.id), a.status))
        .collect();
    Gate::new(
        "hostile upstream: every query ends as it should",
        unsettled == 0 && wrong.is_empty(),
        format!(
            "{} queries ({} failed message, {} huge partials, {} huge results, {} JSON {DEPTH} deep, \
             {} bytes of filler) ended in {:.1} s; not ended: {unsettled}; ended otherwise: {}",
            asked.len(),
            plan.each,
            plan.each,
            plan.each,
            plan.deep,
            plan.pad,
            settled_in.as_secs_f64(),
            if wrong.is_empty() { "none".into() } else { wrong.join(", ") }
        ),
    )
}

/// Each dead task's record and history, the largest of each kind, bounded; the deep ones must
/// have died of a "bad body".
async fn record_gates(con: &mut ConnectionManager, asked: &[Asked]) -> Result<[Gate; 2], String> {
    let mut largest: BTreeMap<&str, u64> = BTreeMap::new();
    let mut deep_errors = Vec::new();
    for a in asked.iter().filter(|a| a.kind != "partial") {
        let bytes = task_bytes(con, &a.id).await?;
        let most = largest.entry(a.kind).or_default();
        *most = (*most).max(bytes);
        if a.kind == "deep" {
            deep_errors.push(last_error(con, &a.id).await?);
        }
    }
    let of = |kind: &str| largest.get(kind).copied().unwrap_or(0);
    let message = of("failed").max(of("final"));
    let sizes = Gate::new(
        "hostile upstream: a dead task's record + history in Redis",
        message > 0 && message <= TASK_BYTES_MAX && of("deep") <= RETRIED_TASK_BYTES_MAX,
        format!(
            "largest: failed message {} bytes, result too large {} bytes (bound \
             {TASK_BYTES_MAX}); bad body, 5 attempts: {} bytes (bound {RETRIED_TASK_BYTES_MAX})",
            of("failed"),
            of("final"),
            of("deep")
        ),
    );
    let deep_ok = !deep_errors.is_empty()
        && deep_errors
            .iter()
            .all(|e| e.contains("bad body") && e.contains("recursion limit"));
    let deep = Gate::new(
        "hostile upstream: JSON 60,000 deep is a bad body",
        deep_ok,
        format!(
            "last error: {}",
            deep_errors
                .first()
                .map(|e| e.chars().take(160).collect::<String>())
                .unwrap_or_else(|| "none".into())
        ),
    );
    Ok([sizes, deep])
}

/// The public API's answer for a hostile query stays small, whatever the upstream sent.
fn answer_gate(asked: &[Asked]) -> Gate {
    let api_max = asked.iter().map(|a| a.answer_bytes).max().unwrap_or(0);
    let api_of = |kind: &str| {
        asked
            .iter()
            .filter(|a| a.kind == kind)
            .map(|a| a.answer_bytes)
            .max()
            .unwrap_or(0)
    };
    Gate::new(
        "hostile upstream: the public answer of a hostile query",
        api_max > 0 && api_max <= API_MAX,
        format!(
            "GET /api/v1/queries/<id>: largest {api_max} bytes (failed {}, partial {}, final {}, \
             deep {}); bound {API_MAX}",
            api_of("failed"),
            api_of("partial"),
            api_of("final"),
            api_of("deep")
        ),
    )
}

/// The dead list page, signed in: the newest dead tasks, `plan.rows` of them with the longest
/// texts, within [`PAGE_MAX`]; its gate, how many rows were asked and Redis's used memory
/// once they ended.
async fn dead_list(
    t: &Target,
    plan: &Plan,
    con: &mut ConnectionManager,
) -> Result<(Gate, usize, u64), String> {
    let mut row_asked = submit_all(&t.base, &rows(plan.rows)).await?;
    settle(&t.base, &mut row_asked).await?;
    let used_rows = used_memory(con).await?;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| e.to_string())?;
    let action = sign_in::sign_in_action(&http, &t.base).await?;
    let cookie = sign_in::session(&http, &t.base, &action, &t.password).await?;
    let page = http
        .get(format!("{}/admin/tasks?state=dead&order=newest", t.base))
        .header("cookie", cookie)
        .header("accept", "text/html")
        .send()
        .await
        .map_err(|e| format!("dead list: {e}"))?;
    let status = page.status().as_u16();
    let html = page.text().await.map_err(|e| format!("dead list: {e}"))?;
    let shown = html.matches("data-testid=\"task-row\"").count();
    let cut = html.matches("data-testid=\"whole-error\"").count();
    let gate = Gate::new(
        "hostile upstream: the dead list page",
        status == 200 && shown >= plan.rows.min(50) && html.len() <= PAGE_MAX,
        format!(
            "/admin/tasks?state=dead&order=newest: HTTP {status}, {} bytes for {shown} rows \
             ({cut} with a \"whole error\" link; queries of {QUERY_CHARS} four-byte characters); bound {} KB",
            html.len(),
            PAGE_MAX / 1024
        ),
    );
    Ok((gate, row_asked.len(), used_rows))
}

/// How a query of `kind` ends: a huge partial is skipped and the small final answer stored;
/// the rest fail (the upstream's verdict, a result too large, a bad body).
fn expected(kind: &str) -> &'static str {
    if kind == "partial" {
        "done"
    } else {
        "failed"
    }
}

/// `n` queries of [`QUERY_CHARS`] characters, mostly four-byte ones, that the upstream
/// answers `failed` with a message of 1,024 bytes of four-byte characters (the simulator's
/// longest `error=`): the longest query and about the longest error a dead row can show.
fn rows(n: usize) -> Vec<(&'static str, String)> {
    (0..n)
        .map(|i| {
            let head = format!("abuse-row-{i:03} status=failed error={} ", "𝕏".repeat(256));
            let fill = QUERY_CHARS.saturating_sub(head.chars().count());
            ("row", format!("{head}{}", "𝕐".repeat(fill)))
        })
        .collect()
}

/// The next loopback address to submit from: 127.0.1.1, 127.0.1.2, ...
fn next_address() -> std::net::IpAddr {
    static NEXT: AtomicU8 = AtomicU8::new(1);
    std::net::IpAddr::from([127, 0, 1, NEXT.fetch_add(1, Ordering::Relaxed)])
}

/// Submits every query over the public API, 20 from each loopback address (the API's burst
/// for one client), and returns them with their ids.
async fn submit_all(base: &str, queries: &[(&'static str, String)]) -> Result<Vec<Asked>, String> {
    let mut out = Vec::new();
    for batch in queries.chunks(20) {
        let client = reqwest::Client::builder()
            .local_address(next_address())
            .timeout(Duration::from_secs(30))
            .build()
            .map_err(|e| e.to_string())?;
        let answers: Vec<Result<Asked, String>> = stream::iter(batch)
            .map(|(kind, q)| {
                let client = client.clone();
                async move {
                    let r = client
                        .post(format!("{base}/api/v1/queries"))
                        .json(&serde_json::json!({ "query": q }))
                        .send()
                        .await
                        .map_err(|e| format!("submit {kind}: {e}"))?;
                    let status = r.status().as_u16();
                    let body: serde_json::Value = r
                        .json()
                        .await
                        .map_err(|e| format!("submit {kind}: HTTP {status}: {e}"))?;
                    let id = body["id"].as_str().ok_or_else(|| {
                        format!("submit {kind}: HTTP {status} without an id: {body}")
                    })?;
                    Ok(Asked {
                        kind,
                        id: id.to_string(),
                        status: String::new(),
                        answer_bytes: 0,
                    })
                }
            })
            .buffer_unordered(8)
            .collect()
            .await;
        for a in answers {
            out.push(a?);
        }
    }
    Ok(out)
}

/// Reads each query's public answer until it is final (or [`SETTLE_WITHIN`] passed),
/// recording its status and the answer's size.
async fn settle(base: &str, asked: &mut [Asked]) -> Result<(), String> {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .map_err(|e| e.to_string())?;
    let t0 = Instant::now();
    while t0.elapsed() < SETTLE_WITHIN {
        let mut pending = 0;
        for a in asked.iter_mut().filter(|a| a.status.is_empty()) {
            let Ok(r) = http
                .get(format!("{base}/api/v1/queries/{}", a.id))
                .send()
                .await
            else {
                pending += 1;
                continue;
            };
            let body = r.bytes().await.map_err(|e| e.to_string())?;
            let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
            match v["status"].as_str() {
                Some(s @ ("done" | "failed")) => {
                    a.status = s.to_string();
                    a.answer_bytes = body.len();
                }
                _ => pending += 1,
            }
        }
        if pending == 0 {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Ok(())
}

/// `INFO memory`'s `used_memory`, in bytes.
async fn used_memory(con: &mut ConnectionManager) -> Result<u64, String> {
    redis_server::info_field(con, "memory", "used_memory")
        .await
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| "INFO memory has no used_memory".to_string())
}

/// A task's key of `kind` (`t` record, `h` history) in serve's default queue.
fn task_key(kind: &str, id: &str) -> String {
    let name = queue::QueueConfig::default().name;
    format!("{}:{kind}:{id}", queue::partition::task_tag(&name, id, 1))
}

/// `MEMORY USAGE` (exact: every element sampled) of the task's record and history together.
async fn task_bytes(con: &mut ConnectionManager, id: &str) -> Result<u64, String> {
    let mut sum = 0;
    for kind in ["t", "h"] {
        let used: Option<u64> = redis::cmd("MEMORY")
            .arg("USAGE")
            .arg(task_key(kind, id))
            .arg("SAMPLES")
            .arg(0)
            .query_async(con)
            .await
            .map_err(|e| format!("MEMORY USAGE: {e}"))?;
        sum += used.unwrap_or(0);
    }
    Ok(sum)
}

/// The last error on the task's record (field `e`), "" without one.
async fn last_error(con: &mut ConnectionManager, id: &str) -> Result<String, String> {
    let e: Option<String> = redis::cmd("HGET")
        .arg(task_key("t", id))
        .arg("e")
        .query_async(con)
        .await
        .map_err(|e| format!("HGET: {e}"))?;
    Ok(e.unwrap_or_default())
}

/// A field of `/proc/<pid>/status` in kB (`VmRSS`, `VmHWM`).
fn proc_kb(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
}

fn short(id: &str) -> &str {
    &id[..id.len().min(12)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_are_the_longest_queries() {
        let rows = rows(3);
        assert_eq!(rows.len(), 3);
        for (_, q) in &rows {
            assert_eq!(q.chars().count(), QUERY_CHARS, "{q}");
            // The simulator's `error=` takes at most 1,024 bytes.
            let error = q.split(' ').find_map(|t| t.strip_prefix("error=")).unwrap();
            assert_eq!(error.len(), 1024);
        }
    }

    #[test]
    fn this_process_has_a_resident_size() {
        assert!(proc_kb(std::process::id(), "VmRSS").is_some_and(|kb| kb > 0));
        assert_eq!(proc_kb(std::process::id(), "NoSuchField"), None);
    }
}
