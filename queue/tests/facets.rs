//! The dashboard's triage counts on a private redis-server (issue 29): a filter's tasks by
//! tenant and error class, the dead work grouped by error with counts and first and last
//! death, and the bound on how many tasks one count looks at.
use crate::common;

use std::time::Instant;

use common::*;
use queue::*;

/// Claims every ready task of `q` and fails it with `error` (`retry`: again later, else dead).
async fn fail_all(q: &Queue, error: &str, retry: Retry) -> usize {
    let mut n = 0;
    loop {
        let claimed = q.claim("w", 200, 60_000).await.unwrap();
        if claimed.is_empty() {
            return n;
        }
        for c in claimed {
            q.fail(&c.id, c.token, error, retry, 5).await.unwrap();
            n += 1;
        }
    }
}

async fn enqueue_n(q: &Queue, prefix: &str, n: usize, tenant: &str) {
    let p = EnqueuePolicy {
        tenant: tenant.into(),
        ..EnqueuePolicy::default()
    };
    for i in 0..n {
        q.enqueue(&format!("{prefix}-{i}"), "", &p).await.unwrap();
    }
}

fn count(of: &[FacetCount], key: &str) -> u64 {
    of.iter()
        .find(|c| c.key == key)
        .map(|c| c.count)
        .unwrap_or(0)
}

#[tokio::test]
async fn facets_count_by_tenant_and_error_class() {
    on_each_layout("facets", async |conf: QueueConfig| {
        let q = queue_with(conf).await;
        enqueue_n(&q, "a", 3, "acme").await;
        fail_all(&q, "GET http://h/v1/x: HTTP 503: busy", Retry::Dead).await;
        enqueue_n(&q, "b", 2, "").await;
        fail_all(&q, "timeout after 5000 ms", Retry::Dead).await;
        enqueue_n(&q, "c", 4, "beta").await;
        fail_all(&q, "upstream failed: no such order", Retry::Dead).await;
        // Retrying work (waiting, failed before) and waiting work that never failed.
        enqueue_n(&q, "r", 2, "acme").await;
        fail_all(&q, "bad body: expected value", Retry::After(3_600_000)).await;
        enqueue_n(&q, "w", 1, "acme").await;
        // (the last one stays ready: due now, never claimed)

        let dead = BulkFilter::default();
        let f = q.facets(&dead, FACET_SCAN_MAX).await.unwrap();
        assert_eq!((f.matched, f.looked, f.complete), (9, 9, true));
        assert_eq!(count(&f.tenants, "acme"), 3);
        assert_eq!(count(&f.tenants, "beta"), 4);
        assert_eq!(count(&f.tenants, ""), 2);
        assert_eq!(
            f.tenants.iter().find(|c| c.key.is_empty()).unwrap().label,
            "none"
        );
        assert_eq!(count(&f.classes, "http-503"), 3);
        assert_eq!(count(&f.classes, "timeout"), 2);
        assert_eq!(count(&f.classes, "upstream-failed"), 4);
        assert_eq!(f.classes[0].key, "upstream-failed", "largest first");
        assert_eq!(f.classes[0].label, "upstream said failed");

        // The facets respect the rest of the filter: a class, a tenant.
        let narrowed = BulkFilter {
            class: Some("http-503".into()),
            ..BulkFilter::default()
        };
        assert_eq!(
            q.facets(&narrowed, FACET_SCAN_MAX).await.unwrap().matched,
            3
        );
        assert_eq!(q.bulk_select(&narrowed, 0).await.unwrap().matched, 3);
        let beta = BulkFilter {
            tenant: Some("beta".into()),
            ..BulkFilter::default()
        };
        let fb = q.facets(&beta, FACET_SCAN_MAX).await.unwrap();
        assert_eq!((fb.matched, count(&fb.classes, "upstream-failed")), (4, 4));

        // Waiting: the retrying tasks by class; the one that never failed has none.
        let waiting = BulkFilter {
            state: BulkState::Waiting,
            ..BulkFilter::default()
        };
        let fw = q.facets(&waiting, FACET_SCAN_MAX).await.unwrap();
        assert_eq!(fw.matched, 2, "{fw:?}");
        assert_eq!(count(&fw.classes, "bad-body"), 2);
        let ready = BulkFilter {
            state: BulkState::Ready,
            ..BulkFilter::default()
        };
        let fr = q.facets(&ready, FACET_SCAN_MAX).await.unwrap();
        assert_eq!((fr.matched, count(&fr.tenants, "acme")), (1, 1));
        assert!(fr.classes.is_empty(), "no classes for ready work");
    })
    .await;
}

/// Raw dead records in an unpartitioned queue: (id, error, died at).
async fn raw_dead(q: &Queue, records: &[(String, String, i64)]) {
    let mut c = raw().await;
    let tag = q.partition_tag(0);
    for chunk in records.chunks(1000) {
        let mut p = redis::pipe();
        for (id, error, at) in chunk {
            p.cmd("HSET")
                .arg(format!("{tag}:t:{id}"))
                .arg(&[
                    ("q", id.as_str()),
                    ("s", "dead"),
                    ("e", error.as_str()),
                    ("dr", "max_attempts"),
                ])
                .arg("c")
                .arg(at - 1000)
                .arg("u")
                .arg(*at)
                .ignore();
            p.cmd("ZADD")
                .arg(format!("{tag}:dead"))
                .arg(*at)
                .arg(id)
                .ignore();
        }
        p.query_async::<()>(&mut c).await.unwrap();
    }
}

#[tokio::test]
async fn dead_work_groups_by_error_with_counts_first_and_last() {
    let q = queue("dead_groups").await;
    let mut records = Vec::new();
    for i in 0..5 {
        // One group: the call and the numbers differ, the normalised message does not.
        records.push((
            format!("{:032x}", 0x100 + i),
            format!("GET http://h/v1/{i}: HTTP 503: retry in {} s", 10 + i),
            1_000_000 + i as i64 * 1000,
        ));
    }
    for i in 0..2 {
        records.push((
            format!("{:032x}", 0x200 + i),
            "HTTP 500: internal".to_string(),
            2_000_000 + i as i64,
        ));
    }
    records.push((format!("{:032x}", 0x300), "boom".into(), 3_000_000));
    raw_dead(&q, &records).await;
    let g = q
        .dead_groups(&BulkFilter::default(), FACET_SCAN_MAX)
        .await
        .unwrap();
    assert_eq!((g.matched, g.complete, g.groups.len()), (8, true, 3));
    let first = &g.groups[0];
    assert_eq!(first.class, "http-503");
    assert_eq!(first.class_label, "HTTP 503");
    assert_eq!(first.message, "HTTP 503: retry in # s");
    assert_eq!(
        (first.count, first.first_ms, first.last_ms),
        (5, 1_000_000, 1_004_000)
    );
    assert_eq!(
        (g.groups[1].count, g.groups[1].class.as_str()),
        (2, "http-500")
    );
    assert_eq!(
        (g.groups[2].count, g.groups[2].class.as_str()),
        (1, "other")
    );
    // The group's key selects exactly its tasks for a bulk action.
    let by_group = BulkFilter {
        group: Some(first.key.clone()),
        ..BulkFilter::default()
    };
    let sel = q.bulk_select(&by_group, usize::MAX).await.unwrap();
    assert_eq!(sel.matched, 5);
    let mut ids: Vec<String> = sel.ids.iter().map(|i| i.to_string()).collect();
    ids.sort();
    assert_eq!(
        ids,
        records[..5].iter().map(|r| r.0.clone()).collect::<Vec<_>>()
    );
    // In words, the group is its class and message and one of its tasks, never its hash
    // alone (issue 43 row 3: after a purge, the audit entry must say what was removed).
    let sample = sel.sample.as_ref().expect("a sample of the group");
    let sample_id = sample.id.to_string();
    assert!(records[..5].iter().any(|r| r.0 == sample_id));
    assert_eq!(
        by_group.describe_with(Some(sample)),
        format!(
            "dead, error group HTTP 503 \"HTTP 503: retry in # s\" ({}), e.g. task {}",
            first.key,
            &sample_id[..12]
        )
    );
}

/// The bound: past FACET_SCAN_MAX members, a count looks at that many and says it stopped.
/// The time one count of 10,000 takes is printed (for the commit), never asserted.
#[tokio::test]
async fn facet_counts_stop_at_the_cap() {
    let q = queue("facets_cap").await;
    let n = FACET_SCAN_MAX as usize + 50;
    let records: Vec<_> = (0..n)
        .map(|i| {
            let error = if i % 2 == 0 {
                "HTTP 503: busy"
            } else {
                "timeout after 5000 ms"
            };
            (
                format!("{:032x}", i + 1),
                error.to_string(),
                1_000_000 + i as i64,
            )
        })
        .collect();
    raw_dead(&q, &records).await;
    let started = Instant::now();
    let f = q
        .facets(&BulkFilter::default(), FACET_SCAN_MAX)
        .await
        .unwrap();
    eprintln!(
        "facets of {} dead tasks took {:?}",
        f.looked,
        started.elapsed()
    );
    assert_eq!(
        (f.looked, f.matched, f.complete),
        (FACET_SCAN_MAX, FACET_SCAN_MAX, false)
    );
    assert_eq!(
        count(&f.classes, "http-503") + count(&f.classes, "timeout"),
        FACET_SCAN_MAX
    );
    let started = Instant::now();
    let g = q
        .dead_groups(&BulkFilter::default(), FACET_SCAN_MAX)
        .await
        .unwrap();
    eprintln!(
        "dead groups of {} dead tasks took {:?}",
        g.looked,
        started.elapsed()
    );
    assert_eq!(
        (g.looked, g.complete, g.groups.len()),
        (FACET_SCAN_MAX, false, 2)
    );
    // Under the cap: complete.
    let all = q
        .facets(&BulkFilter::default(), n as u64 + 1)
        .await
        .unwrap();
    assert_eq!((all.matched, all.complete), (n as u64, true));
}

/// Bounded, the counts describe the newest deaths (an outage's, at 3 a.m.), not the oldest
/// leftovers: with 30 old timeouts and 20 newer HTTP 503s, a look at 20 sees only the 503s,
/// and the dead work's one group ends at the newest death.
#[tokio::test]
async fn bounded_counts_read_the_newest_deaths_first() {
    let q = queue("facets_newest").await;
    let old = (0..30).map(|i| {
        (
            format!("{:032x}", i + 1),
            "timeout after 5000 ms",
            1_000 + i,
        )
    });
    let new = (0..20).map(|i| (format!("{:032x}", i + 100), "HTTP 503: busy", 9_000 + i));
    let records: Vec<(String, String, i64)> = old
        .chain(new)
        .map(|(id, e, at)| (id, e.to_string(), at))
        .collect();
    raw_dead(&q, &records).await;
    let f = q.facets(&BulkFilter::default(), 20).await.unwrap();
    assert_eq!((f.looked, f.complete), (20, false));
    assert_eq!(count(&f.classes, "http-503"), 20);
    assert_eq!(count(&f.classes, "timeout"), 0);
    let g = q.dead_groups(&BulkFilter::default(), 20).await.unwrap();
    assert_eq!(g.groups.len(), 1);
    assert_eq!((g.groups[0].first_ms, g.groups[0].last_ms), (9_000, 9_019));
}

/// The Error facet counts every dead task in the class the dead work's groups and the
/// `class:` filter give it: a task that died at its deadline has no error, and is counted as
/// `deadline` (issue 43, row 11: the facet left out the group Dead work showed).
#[tokio::test]
async fn the_error_facet_counts_deaths_without_an_error_by_their_reason() {
    let q = queue("facet_deadline").await;
    let mut c = raw().await;
    let tag = q.partition_tag(0);
    for (i, (error, reason)) in [
        ("", "deadline"),
        ("", "deadline"),
        ("HTTP 503: busy", "max_attempts"),
    ]
    .into_iter()
    .enumerate()
    {
        let id = format!("{:032x}", 0x900 + i);
        redis::pipe()
            .cmd("HSET")
            .arg(format!("{tag}:t:{id}"))
            .arg(&[
                ("q", id.as_str()),
                ("s", "dead"),
                ("e", error),
                ("dr", reason),
            ])
            .arg("u")
            .arg(1_000_000 + i as i64)
            .ignore()
            .cmd("ZADD")
            .arg(format!("{tag}:dead"))
            .arg(1_000_000 + i as i64)
            .arg(&id)
            .ignore()
            .query_async::<()>(&mut c)
            .await
            .unwrap();
    }
    let dead = BulkFilter::default();
    let f = q.facets(&dead, FACET_SCAN_MAX).await.unwrap();
    let groups = q.dead_groups(&dead, FACET_SCAN_MAX).await.unwrap();
    for g in &groups.groups {
        assert_eq!(
            count(&f.classes, &g.class),
            g.count,
            "{g:?} in {:?}",
            f.classes
        );
    }
    assert_eq!(count(&f.classes, "deadline"), 2, "{:?}", f.classes);
    let by_class = BulkFilter {
        class: Some("deadline".into()),
        ..BulkFilter::default()
    };
    assert_eq!(
        q.bulk_select(&by_class, usize::MAX).await.unwrap().matched,
        2
    );
}
