//! What `stats` costs Redis as the queue grows: the same commands, as many times each, at 10
//! tasks in every state and at 50,000 (`INFO commandstats` deltas on a server of its own).

use crate::common;
use crate::lean::bg;

use common::*;
use queue::*;

/// Every command `INFO commandstats` has counted on the server: name -> calls (commands run
/// inside scripts included), less INFO itself.
async fn command_calls(
    c: &mut redis::aio::MultiplexedConnection,
) -> std::collections::BTreeMap<String, u64> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(c)
        .await
        .unwrap();
    info.lines()
        .filter_map(|l| l.strip_prefix("cmdstat_"))
        .filter_map(|l| {
            let (name, rest) = l.split_once(":calls=")?;
            let n = rest.split(',').next()?.parse().ok()?;
            Some((name.to_string(), n))
        })
        .filter(|(name, _)| name != "info")
        .collect()
}

/// Queue `q` with 10·k tasks in every state stats() counts, in the same proportions at any
/// k: k each leased, completed (a result), polled for later (waiting), failed for later
/// (retrying) and dead, k ready interactive, 2k ready background and 2k ready for a tenant
/// (the fair zset). Written in batches (enqueue_many, complete_many, reschedule_many) and
/// concurrent fails.
async fn fill_every_state(q: &Queue, k: usize) {
    let texts =
        |tag: &str, n: usize| -> Vec<String> { (0..n).map(|i| format!("{tag} {i}")).collect() };
    let enqueue = async |texts: &[String], p: &EnqueuePolicy| {
        for chunk in texts.chunks(1000) {
            let items: Vec<(&str, &str)> = chunk.iter().map(|t| (t.as_str(), "")).collect();
            for r in q.enqueue_many(&items, p).await.unwrap() {
                assert!(matches!(r, Ok(Enqueued::Created(_))), "{r:?}");
            }
        }
    };
    enqueue(&texts("fg", 6 * k), &EnqueuePolicy::default()).await;
    let mut claimed = Vec::new();
    while claimed.len() < 5 * k {
        let n = (5 * k - claimed.len()).min(1000);
        let got = q.claim("w", n, 3_600_000).await.unwrap();
        assert_eq!(got.len(), n);
        claimed.extend(got);
    }
    let (done, rest) = claimed.split_at(k);
    let (polled, rest) = rest.split_at(k);
    let (retrying, rest) = rest.split_at(k);
    let (dead, _leased) = rest.split_at(k);
    for chunk in done.chunks(1000) {
        let items: Vec<Completion> = chunk
            .iter()
            .map(|c| Completion {
                id: c.id.clone(),
                token: c.token,
                result: "r".into(),
                latency_ms: 1,
            })
            .collect();
        for r in q.complete_many(&items).await.unwrap() {
            r.unwrap();
        }
    }
    for chunk in polled.chunks(1000) {
        let items: Vec<Reschedule> = chunk
            .iter()
            .map(|c| Reschedule {
                id: c.id.clone(),
                token: c.token,
                delay_ms: 3_600_000,
                partial: None,
                latency_ms: 1,
                job: None,
            })
            .collect();
        for r in q.reschedule_many(&items).await.unwrap() {
            r.unwrap();
        }
    }
    for (chunk, retry) in retrying
        .chunks(200)
        .map(|c| (c, Retry::After(3_600_000)))
        .chain(dead.chunks(200).map(|c| (c, Retry::Dead)))
    {
        let fails = chunk.iter().map(|c| q.fail(&c.id, c.token, "e", retry, 1));
        for r in futures::future::join_all(fails).await {
            r.unwrap();
        }
    }
    enqueue(&texts("bg", 2 * k), &bg()).await;
    let tenant = EnqueuePolicy {
        tenant: "t".into(),
        ..EnqueuePolicy::default()
    };
    enqueue(&texts("tn", 2 * k), &tenant).await;
    let s = q.stats().await.unwrap();
    let k = k as u64;
    assert_eq!(
        (s.ready, s.ready_background, s.leased, s.waiting, s.retrying),
        (5 * k, 2 * k, k, k, k),
        "{s:?}"
    );
    assert_eq!((s.dead, s.results, s.stuck), (k, k, 0), "{s:?}");
}

/// stats() (the dashboard's counts, read every few seconds) does the same Redis work at 10
/// tasks and at 50,000: the same commands, as many times each (INFO commandstats deltas of
/// one call). A count that walked the tasks would add commands with the queue's size.
#[tokio::test]
async fn stats_does_the_same_redis_work_at_10_and_50000_tasks() {
    // A server of its own: the counts are server-wide.
    let srv = spawn_redis();
    let mut c = redis::Client::open(srv.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let mut work = Vec::new();
    for (name, k) in [("lean_stats_small", 1), ("lean_stats_big", 5_000)] {
        let q = Queue::connect(&srv.url(), cfg(name)).await.unwrap();
        fill_every_state(&q, k).await;
        // The enqueues' answer counts written now, so no flush falls between the reads below.
        q.flush_answer_counts().await.unwrap();
        // Once before measuring: the script is loaded already (no first-call fallback).
        q.stats().await.unwrap();
        let before = command_calls(&mut c).await;
        let s = q.stats().await.unwrap();
        let after = command_calls(&mut c).await;
        assert_eq!(s.ready, 5 * k as u64);
        let delta: std::collections::BTreeMap<String, u64> = after
            .into_iter()
            .map(|(name, n)| {
                let d = n - before.get(&name).copied().unwrap_or(0);
                (name, d)
            })
            .filter(|(_, d)| *d > 0)
            .collect();
        assert_eq!(
            delta.get("fcall_ro"),
            Some(&1),
            "one read-only function call: {delta:?}"
        );
        work.push(delta);
    }
    assert_eq!(
        work[0], work[1],
        "commands of one stats() at 10 tasks (left) and at 50,000 (right)"
    );
}
