//! Property test: random operation sequences against a tiny in-memory model of the queue.
//! Everything is due now (delays 0) and leases are long, so the model needs no clock.
//! The lean layout's shapes are in it: background enqueues (a second ready list), a
//! completion that claims the next tasks in the same call, and a claim by a worker whose
//! BLPOP took a wake-up entry; after every step the wake-up list holds at least one entry
//! per ready task (no ready task is ever left without a wake-up).
use crate::common;

use common::*;
use proptest::prelude::*;
use queue::*;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};

const KEYS: usize = 3;
const MAX_ATTEMPTS: u32 = 2;

#[derive(Clone, Debug)]
enum Op {
    Enqueue(usize),
    EnqueueBackground(usize),
    Claim(usize),
    /// A worker's BLPOP takes a wake-up entry (if there is one), then it claims.
    WokenClaim(usize),
    /// Complete key k (its live token, or a stale one) and claim up to n more in one call.
    CompleteAndClaim(usize, bool, usize),
    Complete(usize, bool),
    Fail(usize),
    Reschedule(usize),
    Release(usize),
    Cancel(usize),
    Retry(usize),
    Pause,
    Resume,
    PurgeDead,
    RetryAllDead,
}

fn op() -> impl Strategy<Value = Op> {
    let k = 0..KEYS;
    prop_oneof![
        3 => k.clone().prop_map(Op::Enqueue),
        2 => k.clone().prop_map(Op::EnqueueBackground),
        3 => (1..3usize).prop_map(Op::Claim),
        2 => (1..3usize).prop_map(Op::WokenClaim),
        2 => (k.clone(), any::<bool>(), 0..3usize).prop_map(|(k, s, n)| Op::CompleteAndClaim(k, s, n)),
        3 => (k.clone(), any::<bool>()).prop_map(|(k, s)| Op::Complete(k, s)),
        2 => k.clone().prop_map(Op::Fail),
        2 => k.clone().prop_map(Op::Reschedule),
        1 => k.clone().prop_map(Op::Release),
        1 => k.clone().prop_map(Op::Cancel),
        1 => k.clone().prop_map(Op::Retry),
        1 => Just(Op::Pause),
        1 => Just(Op::Resume),
        1 => Just(Op::PurgeDead),
        1 => Just(Op::RetryAllDead),
    ]
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum M {
    Absent,
    Due(u32),
    Leased(u64, u32),
    Dead,
    Done,
}

fn query(k: usize) -> String {
    format!("prop key {k}")
}

static CASE: AtomicUsize = AtomicUsize::new(0);

/// One case's queue (and a raw connection to read its wake-up list) beside the model it must
/// agree with after every step.
struct Case {
    q: Queue,
    raw: redis::aio::MultiplexedConnection,
    wake_key: String,
    ids: Vec<TaskId>,
    index: HashMap<TaskId, usize>,
    m: [M; KEYS],
    paused: bool,
    last_token: u64,
    pol: EnqueuePolicy,
    bg: EnqueuePolicy,
}

async fn run_case(ops: Vec<Op>) {
    let mut c = Case::start().await;
    for op in ops {
        c.apply(op).await;
        // the whole observable state agrees with the model after every step
        c.check_against_the_model().await;
    }
}

impl Case {
    /// A fresh queue (its own name) and an empty model.
    async fn start() -> Case {
        let name = format!("prop{}", CASE.fetch_add(1, Ordering::Relaxed));
        let q = queue(&name).await;
        let ids: Vec<TaskId> = (0..KEYS).map(|k| TaskId::of_query(&query(k))).collect();
        let index: HashMap<TaskId, usize> = ids
            .iter()
            .cloned()
            .enumerate()
            .map(|(i, id)| (id, i))
            .collect();
        let pol = EnqueuePolicy {
            deadline_ms: 0,
            max_attempts: MAX_ATTEMPTS,
            ..EnqueuePolicy::default()
        };
        let bg = EnqueuePolicy {
            priority: Priority::Background,
            ..pol.clone()
        };
        Case {
            q,
            raw: raw().await,
            wake_key: format!("{{{name}}}:wakeups"),
            ids,
            index,
            m: [M::Absent; KEYS],
            paused: false,
            last_token: 0,
            pol,
            bg,
        }
    }

    /// Runs `op` on the queue, checks its answer against the model and updates the model.
    async fn apply(&mut self, op: Op) {
        let (q, m) = (&self.q, &mut self.m);
        match op {
            Op::Enqueue(k) | Op::EnqueueBackground(k) => {
                let p = if matches!(op, Op::Enqueue(_)) {
                    &self.pol
                } else {
                    &self.bg
                };
                let r = q.enqueue(&query(k), "p", p).await.unwrap();
                match (m[k], r) {
                    (M::Absent | M::Dead, Enqueued::Created(_)) => m[k] = M::Due(0),
                    (M::Due(_) | M::Leased(..), Enqueued::Joined(_)) => {}
                    (M::Done, Enqueued::Stored(_)) => {}
                    (s, r) => panic!("enqueue in {s:?} gave {r:?}"),
                }
            }
            Op::Claim(n) | Op::WokenClaim(n) => {
                let woken = matches!(op, Op::WokenClaim(_)) && {
                    let took: Option<String> = redis::cmd("LPOP")
                        .arg(&self.wake_key)
                        .query_async(&mut self.raw)
                        .await
                        .unwrap();
                    took.is_some()
                };
                let got = q.claim_woken("w", n, 600_000, woken).await.unwrap();
                take_claimed(m, &self.index, &mut self.last_token, self.paused, n, got);
            }
            Op::CompleteAndClaim(k, stale, n) => self.complete_and_claim(k, stale, n).await,
            Op::Complete(k, stale) => self.complete(k, stale).await,
            Op::Fail(k) => self.fail(k).await,
            Op::Reschedule(k) => {
                let r = q
                    .reschedule(&self.ids[k], leased_token(m[k]), 0, None, 1)
                    .await;
                match m[k] {
                    M::Leased(_, a) => {
                        assert!(r.unwrap() > 0);
                        m[k] = M::Due(a);
                    }
                    _ => assert!(matches!(r, Err(QueueError::StaleToken))),
                }
            }
            op => self.apply_admin(op).await,
        }
    }

    /// The token a completion of key `k` sends: its live one (`true`: the completion must
    /// succeed) or, if `stale` or not leased, one the queue must refuse.
    fn token_to_complete(&self, k: usize, stale: bool) -> (u64, bool) {
        match self.m[k] {
            M::Leased(t, _) if !stale => (t, true),
            M::Leased(t, _) => (t + 1_000_000, false),
            _ => (self.last_token, false),
        }
    }

    async fn complete_and_claim(&mut self, k: usize, stale: bool, n: usize) {
        let (tok, ok) = self.token_to_complete(k, stale);
        let item = Completion {
            id: self.ids[k].clone(),
            token: tok,
            result: "r".into(),
            latency_ms: 1,
        };
        let (r, got) = self
            .q
            .complete_and_claim(&[item], "w", n, 600_000)
            .await
            .unwrap();
        // The next tasks are chosen before this completion is written: the task
        // completed here is never among them.
        if ok {
            r[0].as_ref().unwrap();
        } else {
            assert!(matches!(r[0], Err(QueueError::StaleToken)), "{r:?}");
        }
        take_claimed(
            &mut self.m,
            &self.index,
            &mut self.last_token,
            self.paused,
            n,
            got,
        );
        if ok {
            self.m[k] = M::Done;
        }
    }

    async fn complete(&mut self, k: usize, stale: bool) {
        let (tok, ok) = self.token_to_complete(k, stale);
        let r = self.q.complete(&self.ids[k], tok, "r", 1).await;
        if ok {
            r.unwrap();
            self.m[k] = M::Done;
        } else {
            assert!(matches!(r, Err(QueueError::StaleToken)), "{r:?}");
        }
    }

    async fn fail(&mut self, k: usize) {
        let m = &mut self.m;
        let r = self
            .q
            .fail(&self.ids[k], leased_token(m[k]), "e", Retry::After(0), 1)
            .await;
        match m[k] {
            M::Leased(_, a) if a + 1 >= MAX_ATTEMPTS => {
                assert!(matches!(r.unwrap(), Failed::Dead { .. }));
                m[k] = M::Dead;
            }
            M::Leased(_, a) => {
                assert!(
                    matches!(r.unwrap(), Failed::Retrying { attempts, .. } if attempts == a + 1)
                );
                m[k] = M::Due(a + 1);
            }
            _ => assert!(matches!(r, Err(QueueError::StaleToken))),
        }
    }

    /// The operations of an admin rather than a worker: release, cancel, retry, pause,
    /// resume, purge the dead, retry all dead.
    async fn apply_admin(&mut self, op: Op) {
        let (q, m) = (&self.q, &mut self.m);
        match op {
            Op::Release(k) => {
                let r = q.release(&self.ids[k], None, "admin").await.unwrap();
                match m[k] {
                    M::Leased(_, a) => {
                        assert!(r);
                        m[k] = M::Due(a);
                    }
                    _ => assert!(!r),
                }
            }
            Op::Cancel(k) => {
                let r = q.cancel(&self.ids[k], "admin").await.unwrap();
                match m[k] {
                    M::Due(_) | M::Leased(..) | M::Dead => {
                        assert!(r);
                        m[k] = M::Absent;
                    }
                    _ => assert!(!r),
                }
            }
            Op::Retry(k) => {
                let r = q.retry(&self.ids[k], "admin").await.unwrap();
                if m[k] == M::Dead {
                    assert!(r);
                    m[k] = M::Due(0);
                } else {
                    assert!(!r, "retry in {:?}", m[k]);
                }
            }
            Op::Pause => {
                q.pause("admin").await.unwrap();
                self.paused = true;
            }
            Op::Resume => {
                q.resume("admin").await.unwrap();
                self.paused = false;
            }
            Op::PurgeDead => {
                let n = q.purge(PurgeTarget::Dead, "admin").await.unwrap();
                let dead = m.iter().filter(|s| **s == M::Dead).count();
                assert_eq!(n as usize, dead);
                for s in m.iter_mut().filter(|s| **s == M::Dead) {
                    *s = M::Absent;
                }
            }
            Op::RetryAllDead => {
                let n = q.retry_all_dead("admin").await.unwrap();
                let dead = m.iter().filter(|s| **s == M::Dead).count();
                assert_eq!(n as usize, dead);
                for s in m.iter_mut().filter(|s| **s == M::Dead) {
                    *s = M::Due(0);
                }
            }
            op => unreachable!("{op:?} is a worker's operation"),
        }
    }

    /// The queue's counts, wake-up list and every task agree with the model.
    async fn check_against_the_model(&mut self) {
        let (q, ids, m, paused) = (&self.q, &self.ids, &self.m, self.paused);
        let s = q.stats().await.unwrap();
        let count = |f: fn(&M) -> bool| m.iter().filter(|x| f(x)).count() as u64;
        assert_eq!(s.ready, count(|x| matches!(x, M::Due(_))), "{m:?}");
        assert_eq!(s.leased, count(|x| matches!(x, M::Leased(..))));
        assert_eq!(s.dead, count(|x| *x == M::Dead));
        assert_eq!(s.results, count(|x| *x == M::Done));
        assert_eq!(s.paused, paused);
        let entries: u64 = redis::cmd("LLEN")
            .arg(&self.wake_key)
            .query_async(&mut self.raw)
            .await
            .unwrap();
        // While paused, workers may take entries and claim nothing; resume pushes one entry
        // per ready task, so the bound holds again from there.
        assert!(
            paused || entries >= s.ready,
            "{entries} wake-up entries for {} ready tasks",
            s.ready
        );
        for k in 0..KEYS {
            let t = q.get(&ids[k]).await.unwrap().and_then(|d| d.task);
            match (m[k], t) {
                (M::Absent | M::Done, None) => {}
                (M::Due(a), Some(t)) => assert_eq!((t.state, t.attempts), (TaskState::Due, a)),
                (M::Leased(tok, _), Some(t)) => {
                    assert_eq!((t.state, t.token), (TaskState::Leased, tok))
                }
                (M::Dead, Some(t)) => assert_eq!(t.state, TaskState::Dead),
                (s, t) => panic!("model {s:?}, redis {t:?}"),
            }
        }
    }
}

/// Checks a claim's answer against the model (`n` asked) and leases the claimed keys in it.
fn take_claimed(
    m: &mut [M; KEYS],
    index: &HashMap<TaskId, usize>,
    last_token: &mut u64,
    paused: bool,
    n: usize,
    got: Vec<Claimed>,
) {
    let due = m.iter().filter(|s| matches!(s, M::Due(_))).count();
    let want = if paused { 0 } else { n.min(due) };
    assert_eq!(got.len(), want, "claim {n} with {due} due, paused {paused}");
    for c in got {
        let k = index[&c.id];
        let M::Due(a) = m[k] else {
            panic!("claimed {k} in {:?}", m[k])
        };
        assert_eq!(c.attempts, a);
        assert!(c.token > *last_token, "tokens must increase");
        *last_token = c.token;
        m[k] = M::Leased(c.token, a);
    }
}

fn leased_token(s: M) -> u64 {
    match s {
        M::Leased(t, _) => t,
        _ => 1,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, failure_persistence: None, ..ProptestConfig::default() })]
    #[test]
    fn random_operations_match_the_model(ops in proptest::collection::vec(op(), 1..30)) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(run_case(ops));
    }
}
