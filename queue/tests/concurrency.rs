//! Concurrency: many claimers, many enqueuers, against a real redis-server.
use crate::common;

use common::*;
use futures::future::join_all;
use queue::{EnqueuePolicy, Enqueued};
use std::collections::{HashMap, HashSet};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_claimers_ten_thousand_tasks_each_claimed_once() {
    on_each_layout("conc8", async |conf: queue::QueueConfig| {
        let q = queue_with(conf).await;
        let policy = EnqueuePolicy::default();
        const N: usize = 10_000;
        for chunk in (0..N).collect::<Vec<_>>().chunks(500) {
            let futs = chunk.iter().map(|i| {
                let q = q.clone();
                let p = policy.clone();
                async move { q.enqueue(&format!("task {i}"), "p", &p).await }
            });
            for r in join_all(futs).await {
                assert!(matches!(r.unwrap(), Enqueued::Created(_)));
            }
        }
        assert_eq!(q.stats().await.unwrap().ready, N as u64);

        let mut handles = Vec::new();
        // All eight start claiming together (not as each happens to be spawned), so "every
        // claimer got a share" below does not rest on the order the runtime starts them in.
        let start = std::sync::Arc::new(tokio::sync::Barrier::new(8));
        for w in 0..8 {
            let q = q.clone();
            let start = start.clone();
            handles.push(tokio::spawn(async move {
                let me = format!("w{w}");
                let mut got = Vec::new();
                start.wait().await;
                loop {
                    let batch = q.claim(&me, 25, 60_000).await.unwrap();
                    if batch.is_empty() {
                        if q.stats().await.unwrap().ready == 0 {
                            break;
                        }
                        continue;
                    }
                    let done = batch.iter().map(|c| q.complete(&c.id, c.token, "r", 1));
                    for r in join_all(done).await {
                        r.unwrap();
                    }
                    got.extend(batch.into_iter().map(|c| (c.id, c.token)));
                }
                got
            }));
        }
        let mut ids = HashSet::new();
        let mut tokens = HashSet::new();
        let mut per_worker = HashMap::new();
        for (w, h) in handles.into_iter().enumerate() {
            let got = h.await.unwrap();
            per_worker.insert(w, got.len());
            for (id, token) in got {
                // Each partition hands out its own fencing tokens (one counter per slot).
                assert!(
                    tokens.insert((q.partition_of(&id), token)),
                    "a token was handed out twice"
                );
                assert!(ids.insert(id), "a task was claimed twice");
            }
        }
        assert_eq!(ids.len(), N, "tasks lost");
        let s = q.stats().await.unwrap();
        assert_eq!((s.ready, s.waiting, s.leased, s.dead), (0, 0, 0, 0));
        assert_eq!(s.results, N as u64);
        let completed: u64 = s.throughput.iter().map(|b| b.completed).sum();
        assert_eq!(completed, N as u64);
        // every claimer got a share (contention is spread, nobody starves)
        assert!(per_worker.values().all(|n| *n > 0), "{per_worker:?}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_concurrent_enqueues_one_created() {
    on_each_layout("conc50", async |conf: queue::QueueConfig| {
        let q = queue_with(conf).await;
        let futs = (0..50).map(|i| {
            let q = q.clone();
            // different whitespace, same normalised query
            let text = format!("{}same   query{}", " ".repeat(i % 3), " ".repeat(i % 2));
            async move { q.enqueue(&text, "p", &EnqueuePolicy::default()).await }
        });
        let mut created = 0;
        let mut joined = 0;
        let mut ids = HashSet::new();
        for r in join_all(futs).await {
            match r.unwrap() {
                Enqueued::Created(t) => {
                    created += 1;
                    ids.insert(t.id);
                }
                Enqueued::Joined(t) => {
                    joined += 1;
                    ids.insert(t.id);
                }
                other => panic!("no result yet: {other:?}"),
            }
        }
        assert_eq!((created, joined), (1, 49));
        assert_eq!(ids.len(), 1);
        assert_eq!(q.stats().await.unwrap().ready, 1);
    })
    .await;
}
