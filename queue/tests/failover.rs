//! What a Redis failover may do to the queue, replayed on one server: replication is
//! asynchronous, so the promoted replica can miss the primary's last writes. Here the writes of
//! a claim are lost exactly that way (every key of the queue put back as it was before the
//! claim, with DUMP / RESTORE), and the queue must still fence the worker that holds the lost
//! lease out: the next claim of the same task gets a greater token (take_tokens in
//! prelude/claims.lua), so the old holder's completion is refused and the new one's stands. The
//! replay waits 0.6 s where the failover would be (a real one takes longer: the cluster's node
//! timeout, at least 1 s in practice), since take_tokens keeps its counter up to 0.5 s ahead of
//! the clock between two moves.
use crate::common;

use common::*;
use queue::*;

/// Every key of queue `name`.
async fn keys_of(name: &str) -> Vec<String> {
    redis::cmd("KEYS")
        .arg(format!("{{{name}}}*"))
        .query_async(&mut raw().await)
        .await
        .unwrap()
}

/// Every key of queue `name` with its DUMP.
async fn dump_all(name: &str) -> Vec<(String, Vec<u8>)> {
    let mut c = raw().await;
    let mut out = Vec::new();
    for k in keys_of(name).await {
        let d: Vec<u8> = redis::cmd("DUMP")
            .arg(&k)
            .query_async(&mut c)
            .await
            .unwrap();
        out.push((k, d));
    }
    out
}

/// Puts queue `name` back to `saved`: what a replica promoted before these writes reached it
/// would hold.
async fn restore_all(name: &str, saved: &[(String, Vec<u8>)]) {
    let mut c = raw().await;
    for k in keys_of(name).await {
        let _: () = redis::cmd("DEL").arg(&k).query_async(&mut c).await.unwrap();
    }
    for (k, d) in saved {
        let _: () = redis::cmd("RESTORE")
            .arg(k)
            .arg(0)
            .arg(d.as_slice())
            .query_async(&mut c)
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn a_claim_lost_in_a_failover_never_gives_its_token_twice() {
    let q = queue("fo1").await;
    // An earlier claim first, so the counter is ahead of the clock when the replica's copy is
    // taken (the harder case: a plain count from there would repeat the lost token).
    q.enqueue("earlier query", "", &EnqueuePolicy::default())
        .await
        .unwrap();
    assert_eq!(q.claim("worker-0", 1, 60_000).await.unwrap().len(), 1);
    q.enqueue("failover query", "", &EnqueuePolicy::default())
        .await
        .unwrap();
    let before = dump_all("fo1").await;
    let now = q.now_ms().await.unwrap();
    let a = q.claim("worker-a", 1, 60_000).await.unwrap();
    let claimed_by = q.now_ms().await.unwrap();
    assert_eq!(a.len(), 1);
    assert!(
        a[0].token >= u64::try_from(now).unwrap() * 1024,
        "token {} is below the time floor",
        a[0].token
    );
    // The failover: the claim's writes never reached the replica that is now the primary.
    restore_all("fo1", &before).await;
    // The failover's duration, on Redis's clock: longer than take_tokens' 0.5 s lead.
    until_redis_time(&q, claimed_by + 600).await;
    let b = q.claim("worker-b", 1, 60_000).await.unwrap();
    assert_eq!(b.len(), 1);
    assert_eq!(b[0].id, a[0].id, "the same task, claimed again");
    assert!(
        b[0].token > a[0].token,
        "token {} handed out again after {}",
        b[0].token,
        a[0].token
    );
    // The worker holding the lost lease is fenced out; the new holder's result stands.
    let late = q.complete(&a[0].id, a[0].token, "from a", 1).await;
    assert!(matches!(late, Err(QueueError::StaleToken)), "{late:?}");
    q.complete(&b[0].id, b[0].token, "from b", 1).await.unwrap();
    let r = q.result_by_id(&b[0].id).await.unwrap().unwrap();
    assert_eq!(r.data, "from b");
}

#[tokio::test]
async fn tokens_increase_within_one_millisecond_and_across_calls() {
    let q = queue("fo2").await;
    for i in 0..300 {
        q.enqueue(&format!("t {i}"), "", &EnqueuePolicy::default())
            .await
            .unwrap();
    }
    let mut last = 0u64;
    // Many claims of one or a few tasks, as fast as they go: several land in one millisecond.
    for n in [1usize, 1, 1, 2, 3, 1, 50, 1, 1, 100, 1, 1, 1, 1] {
        for c in q.claim("w", n, 60_000).await.unwrap() {
            assert!(c.token > last, "{} after {last}", c.token);
            last = c.token;
        }
    }
    // A counter ahead of the clock (more than 1,024 a millisecond) keeps counting up.
    let mut c = raw().await;
    let ahead = last + 10_000_000;
    let _: () = redis::cmd("SET")
        .arg("{fo2}:token")
        .arg(ahead)
        .query_async(&mut c)
        .await
        .unwrap();
    let got = q.claim("w", 2, 60_000).await.unwrap();
    assert_eq!(got[0].token, ahead + 1);
    assert_eq!(got[1].token, ahead + 2);
}
