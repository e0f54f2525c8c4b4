//! Redis-time travel for tests: a lease, a wait or a breaker's cool-down made to have run
//! out one millisecond ago on Redis's clock (TIME, the one every script reads), by moving the
//! score or field the scripts read. Shared by the queue's tests and the server's process
//! tests (`#[path = "../../queue/tests/common/clock.rs"]`): it needs only `queue` and `redis`.
#![allow(dead_code)] // each test binary uses a different subset

use queue::Queue;

/// Moves the lease of `id` one millisecond into the past (Redis time), as if its holder had
/// died and its deadline had passed: what the reaper sees, by construction, without waiting
/// for a short lease to run out (a short lease also runs out too early on a slow machine).
/// Panics unless `id` holds a lease.
pub async fn expire_lease(q: &Queue, id: &str) {
    let tag = q.partition_tag(q.partition_of(id));
    let past = q.now_ms().await.unwrap() - 1;
    let mut c = q.connection();
    let changed = rescore_member(&mut c, &format!("{tag}:lease"), id, past).await;
    assert!(changed, "{id} holds no lease to expire");
    let _: () = redis::cmd("HSET")
        .arg(format!("{tag}:t:{id}"))
        .arg("ld")
        .arg(past)
        .query_async(&mut c)
        .await
        .unwrap();
}

/// Moves the whole-life deadline of task `id` one millisecond into the past (Redis time):
/// its next poll, failure or lost lease ends it (`deadline`).
pub async fn pass_deadline(q: &Queue, id: &str) {
    let tag = q.partition_tag(q.partition_of(id));
    let past = q.now_ms().await.unwrap() - 1;
    let _: () = redis::cmd("HSET")
        .arg(format!("{tag}:t:{id}"))
        .arg("dl")
        .arg(past)
        .query_async(&mut q.connection())
        .await
        .unwrap();
}

/// Makes the waiting task `id` (a retry in backoff, or a poll due later) due one millisecond
/// ago (Redis time), as if its wait had passed: the "after" half of a test with a long wait.
/// Panics unless `id` waits in the due zset.
pub async fn bring_due(q: &Queue, id: &str) {
    let tag = q.partition_tag(q.partition_of(id));
    let past = q.now_ms().await.unwrap() - 1;
    let mut c = q.connection();
    for (zset, must) in [("due", true), ("retry", false)] {
        let changed = rescore_member(&mut c, &format!("{tag}:{zset}"), id, past).await;
        assert!(changed || !must, "{id} does not wait in {tag}:{zset}");
    }
}

/// Gives `member` of the sorted set `key` the score `score` if it is there (ZADD XX CH);
/// true when it was there.
async fn rescore_member(
    c: &mut impl redis::aio::ConnectionLike,
    key: &str,
    member: &str,
    score: i64,
) -> bool {
    let changed: i64 = redis::cmd("ZADD")
        .arg(key)
        .arg("XX")
        .arg("CH")
        .arg(score)
        .arg(member)
        .query_async(c)
        .await
        .unwrap();
    changed == 1
}

/// Ends the cool-down of every open breaker of `q` now (its `to` one millisecond in the past,
/// Redis time), so the next claim probes: a long cool-down for the "still open" half of a test
/// and no wait for the "after" half. Returns how many partitions' breakers were open.
pub async fn end_cooldown(q: &Queue) -> usize {
    let past = q.now_ms().await.unwrap() - 1;
    let mut c = q.connection();
    let mut ended = 0;
    for i in 0..q.partitions() {
        let key = format!("{}:breaker", q.partition_tag(i));
        let st: Option<String> = redis::cmd("HGET")
            .arg(&key)
            .arg("st")
            .query_async(&mut c)
            .await
            .unwrap();
        if st.as_deref() == Some("open") {
            let _: () = redis::cmd("HSET")
                .arg(&key)
                .arg("to")
                .arg(past)
                .query_async(&mut c)
                .await
                .unwrap();
            ended += 1;
        }
    }
    ended
}
