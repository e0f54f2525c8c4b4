//! Fair shares between tenants (prelude.lua, "Fair shares"): claims go round the tenants with
//! ready work whatever the length of one tenant's backlog; the untenanted work is one more
//! lane; per-tenant caps and rates hold; a joined task counts once; every way out of the fair
//! zset (claim, cancel, purge, callback) leaves nothing behind.
use crate::common;

use common::*;
use queue::*;
use std::collections::HashMap;

fn of(tenant: &str) -> EnqueuePolicy {
    EnqueuePolicy {
        tenant: tenant.to_string(),
        ..EnqueuePolicy::default()
    }
}

/// Enqueues `n` queries for `tenant`; returns id -> tenant.
async fn fill(q: &Queue, tenant: &str, n: usize, tag: &str) -> HashMap<String, String> {
    let mut out = HashMap::new();
    for i in 0..n {
        let e = q
            .enqueue(&format!("{tag} {tenant} {i}"), "", &of(tenant))
            .await
            .unwrap();
        let Enqueued::Created(t) = e else {
            panic!("not created: {e:?}")
        };
        assert_eq!(t.tenant, tenant);
        out.insert(t.id.to_string(), tenant.to_string());
    }
    out
}

async fn claim_tenants(q: &Queue, who: &HashMap<String, String>, n: usize) -> Vec<String> {
    let got = q.claim("w", n, 60_000).await.unwrap();
    got.iter()
        .map(|c| who.get(&c.id.to_string()).cloned().unwrap_or_default())
        .collect()
}

async fn zcard(key: &str) -> u64 {
    let mut c = raw().await;
    redis::cmd("ZCARD")
        .arg(key)
        .query_async(&mut c)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_small_tenant_is_not_stuck_behind_a_large_one() {
    let q = queue("fair1").await;
    let mut who = fill(&q, "big", 300, "a").await;
    who.extend(fill(&q, "small", 5, "b").await);
    // Ten claims one by one: they alternate, so all five of "small" are among them.
    let mut order = Vec::new();
    for _ in 0..10 {
        order.extend(claim_tenants(&q, &who, 1).await);
    }
    assert_eq!(
        order.iter().filter(|t| *t == "small").count(),
        5,
        "{order:?}"
    );
    // One batch of ten claims of another queue alternates the same way.
    let q2 = queue("fair1b").await;
    let mut who2 = fill(&q2, "big", 300, "a").await;
    who2.extend(fill(&q2, "small", 5, "b").await);
    let batch = claim_tenants(&q2, &who2, 10).await;
    assert_eq!(
        batch.iter().filter(|t| *t == "small").count(),
        5,
        "{batch:?}"
    );
    let s = q2.stats().await.unwrap();
    assert_eq!(s.ready, 295);
}

#[tokio::test]
async fn without_tenants_the_order_is_first_in_first_out() {
    // The control for the test above: the same load untenanted is strictly FIFO, so "small"
    // comes after all of "big".
    let q = queue("fair2").await;
    let mut who = HashMap::new();
    for (t, n) in [("big", 300), ("small", 5)] {
        for i in 0..n {
            let Enqueued::Created(task) = q
                .enqueue(&format!("{t} {i}"), "", &EnqueuePolicy::default())
                .await
                .unwrap()
            else {
                panic!()
            };
            who.insert(task.id.to_string(), t.to_string());
        }
    }
    let batch = claim_tenants(&q, &who, 10).await;
    assert!(batch.iter().all(|t| t == "big"), "{batch:?}");
}

#[tokio::test]
async fn untenanted_work_is_one_lane_among_the_tenants() {
    let q = queue("fair3").await;
    let mut who = HashMap::new();
    for i in 0..100 {
        let Enqueued::Created(t) = q
            .enqueue(&format!("anon {i}"), "", &EnqueuePolicy::default())
            .await
            .unwrap()
        else {
            panic!()
        };
        who.insert(t.id.to_string(), String::new());
    }
    who.extend(fill(&q, "acme", 4, "c").await);
    let batch = claim_tenants(&q, &who, 8).await;
    assert_eq!(
        batch.iter().filter(|t| *t == "acme").count(),
        4,
        "{batch:?}"
    );
    assert_eq!(
        batch.iter().filter(|t| t.is_empty()).count(),
        4,
        "{batch:?}"
    );
}

#[tokio::test]
async fn a_tenants_concurrency_cap_holds_and_frees() {
    let mut conf = cfg("fair4");
    conf.tenants.concurrency = 2;
    let q = queue_with(conf).await;
    let mut who = fill(&q, "a", 10, "x").await;
    who.extend(fill(&q, "b", 10, "y").await);
    let got = q.claim("w", 10, 60_000).await.unwrap();
    let tenants: Vec<String> = got.iter().map(|c| who[&c.id.to_string()].clone()).collect();
    assert_eq!(got.len(), 4, "{tenants:?}");
    assert_eq!(tenants.iter().filter(|t| *t == "a").count(), 2);
    // Nothing more while both are at their cap.
    assert!(q.claim("w", 10, 60_000).await.unwrap().is_empty());
    let counts = q.tenants(10).await.unwrap();
    assert_eq!(counts.len(), 2, "{counts:?}");
    assert!(
        counts.iter().all(|c| c.leased == 2 && c.ready == 8),
        "{counts:?}"
    );
    // One of a's ends: a may take one more, b still none.
    let a1 = got.iter().find(|c| who[&c.id.to_string()] == "a").unwrap();
    q.complete(&a1.id, a1.token, "done", 1).await.unwrap();
    let next = q.claim("w", 10, 60_000).await.unwrap();
    assert_eq!(next.len(), 1);
    assert_eq!(who[&next[0].id.to_string()], "a");
    // A poll, an error and a cancel give leases back too.
    let b: Vec<&Claimed> = got
        .iter()
        .filter(|c| who[&c.id.to_string()] == "b")
        .collect();
    q.reschedule(&b[0].id, b[0].token, 60_000, None, 1)
        .await
        .unwrap();
    assert!(q.cancel(&b[1].id, "t").await.unwrap());
    let next = q.claim("w", 10, 60_000).await.unwrap();
    assert_eq!(next.len(), 2, "b's two leases came back");
    assert!(next.iter().all(|c| who[&c.id.to_string()] == "b"));
    // A release (a worker shutting down) gives its lease back: b, at its cap again, may take
    // one more (the released task or another).
    assert!(q
        .release(&next[0].id, Some(next[0].token), "w")
        .await
        .unwrap());
    let after = q.claim("w", 10, 60_000).await.unwrap();
    assert_eq!(after.len(), 1, "b's released lease came back");
    assert_eq!(who[&after[0].id.to_string()], "b");
    // A drifted count heals at the next reap (fair_sync.lua recounts from the lease zset).
    let mut c = raw().await;
    let _: () = redis::cmd("HSET")
        .arg("{fair4}:fairc")
        .arg("a")
        .arg(99)
        .query_async(&mut c)
        .await
        .unwrap();
    q.reap(100).await.unwrap();
    let held: HashMap<String, i64> = redis::cmd("HGETALL")
        .arg("{fair4}:fairc")
        .query_async(&mut c)
        .await
        .unwrap();
    assert_eq!(held.get("a"), Some(&2), "{held:?}");
    assert_eq!(held.get("b"), Some(&2), "{held:?}");
}

#[tokio::test]
async fn a_tenants_rate_holds() {
    let mut conf = cfg("fair5");
    conf.tenants.rate_per_sec = 10.0;
    conf.tenants.burst = 2;
    let q = queue_with(conf).await;
    let mut who = fill(&q, "a", 50, "r").await;
    who.extend(fill(&q, "b", 3, "s").await);
    // Claims until a has had its burst and three more (which only time can give it) and b
    // all of its three: an event, waited for with a generous hang guard. The bound below is
    // in Redis time from before the first claim to after the last, so a slow machine only
    // widens it.
    let t0 = q.now_ms().await.unwrap();
    let guard = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut a = 0;
    let mut b = 0;
    let mut first = None;
    while a < 5 || b < 3 {
        assert!(
            std::time::Instant::now() < guard,
            "hang guard: after 60 s a has {a} (wants 5), b {b} (wants 3)"
        );
        let got = claim_tenants(&q, &who, 10).await;
        for t in &got {
            if t == "a" {
                a += 1;
            } else {
                b += 1;
            }
        }
        first.get_or_insert(got);
        // Pacing between polls, not synchronisation: what is awaited is the counts above.
        sleep_ms(20).await;
    }
    let t1 = q.now_ms().await.unwrap();
    let first = first.unwrap();
    assert_eq!(
        first.iter().filter(|t| *t == "a").count(),
        2,
        "the first claim gives a its burst and no more: {first:?}"
    );
    let elapsed = (t1 - t0) as f64 / 1000.0;
    // At most the burst plus the rate over the time spent (and one for the edge).
    let most = 2.0 + 10.0 * elapsed + 1.0;
    assert!(
        f64::from(a) <= most,
        "a took {a} in {elapsed:.2} s (most {most})"
    );
    assert_eq!(b, 3, "b has its own budget");
}

#[tokio::test]
async fn polls_and_lost_leases_take_a_fair_place_again() {
    let q = queue("fair6").await;
    let mut who = fill(&q, "big", 200, "p").await;
    // Every one of big's tasks is started and then polled again now: 200 due now.
    let got = q.claim("w", 200, 60_000).await.unwrap();
    assert_eq!(got.len(), 200);
    let items: Vec<Reschedule> = got
        .iter()
        .map(|c| Reschedule {
            id: c.id.clone(),
            token: c.token,
            delay_ms: 0,
            partial: None,
            latency_ms: 1,
            job: None,
        })
        .collect();
    for r in q.reschedule_many(&items).await.unwrap() {
        r.unwrap();
    }
    who.extend(fill(&q, "small", 3, "q").await);
    let mut order = Vec::new();
    for _ in 0..8 {
        order.extend(claim_tenants(&q, &who, 1).await);
    }
    assert_eq!(
        order.iter().filter(|t| *t == "small").count(),
        3,
        "{order:?}"
    );
    assert_eq!(q.stats().await.unwrap().ready, 195);

    // A lost lease of a tenant's task comes back through the due zset and is claimed again.
    let mut conf = cfg("fair6b");
    conf.max_lease_losses = 0;
    let q2 = queue_with(conf).await;
    fill(&q2, "t", 1, "l").await;
    let c = q2.claim("w", 1, 600_000).await.unwrap();
    assert_eq!(c.len(), 1);
    expire_lease(&q2, &c[0].id).await;
    assert_eq!(q2.reap(10).await.unwrap().requeued, vec![c[0].id.clone()]);
    let again = q2.claim("w", 1, 60_000).await.unwrap();
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].id, c[0].id);
}

#[tokio::test]
async fn a_joined_task_counts_once_for_the_first_tenant() {
    let q = queue("fair7").await;
    let Enqueued::Created(t) = q.enqueue("shared", "", &of("first")).await.unwrap() else {
        panic!()
    };
    let Enqueued::Joined(j) = q.enqueue("shared", "", &of("second")).await.unwrap() else {
        panic!()
    };
    assert_eq!(j.id, t.id);
    assert_eq!(j.tenant, "first");
    assert_eq!(zcard("{fair7}:fair").await, 1);
    let counts = q.tenants(10).await.unwrap();
    assert_eq!(counts.len(), 1);
    assert_eq!(counts[0].tenant, "first");
    assert_eq!(counts[0].ready, 1);
}

#[tokio::test]
async fn a_bad_tenant_name_is_refused_and_writes_nothing() {
    let q = queue("fair8").await;
    for bad in ["a|b", "with space", &"x".repeat(65), "ünï"] {
        let e = q.enqueue("q", "", &of(bad)).await.unwrap_err();
        assert!(matches!(e, QueueError::InvalidQuery(_)), "{bad:?}: {e:?}");
    }
    assert!(snapshot("fair8").await.is_empty());
}

#[tokio::test]
async fn every_way_out_of_the_fair_zset_leaves_nothing_behind() {
    let q = queue("fair9").await;
    let who = fill(&q, "t", 6, "o").await;
    let ids: Vec<String> = who.keys().cloned().collect();
    // listed as ready, found by a tenant filter
    let page = q
        .list(ListState::Ready, Order::OldestFirst, None, 100)
        .await
        .unwrap();
    assert_eq!(page.total, 6);
    assert_eq!(page.items.len(), 6);
    let ready_of = |tenant: &str| BulkFilter {
        state: BulkState::Ready,
        tenant: Some(tenant.into()),
        ..BulkFilter::default()
    };
    assert_eq!(q.bulk_select(&ready_of("t"), 100).await.unwrap().matched, 6);
    assert_eq!(
        q.bulk_select(&ready_of("other"), 100)
            .await
            .unwrap()
            .matched,
        0
    );
    // cancel one
    assert!(q.cancel(&ids[0], "t").await.unwrap());
    assert_eq!(zcard("{fair9}:fair").await, 5);
    // claim two and complete them
    let got = q.claim("w", 2, 60_000).await.unwrap();
    for c in &got {
        q.complete(&c.id, c.token, "ok", 1).await.unwrap();
    }
    assert_eq!(zcard("{fair9}:fair").await, 3);
    // purge the queued rest
    assert_eq!(q.purge(PurgeTarget::Queued, "t").await.unwrap(), 3);
    assert_eq!(zcard("{fair9}:fair").await, 0);
    assert_eq!(q.stats().await.unwrap().ready, 0);
    let mut c = raw().await;
    let held: HashMap<String, i64> = redis::cmd("HGETALL")
        .arg("{fair9}:fairc")
        .query_async(&mut c)
        .await
        .unwrap();
    assert!(held.is_empty(), "{held:?}");
}
