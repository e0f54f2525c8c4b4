//! Turning Redis replies into model types. Nothing here panics: anything unexpected becomes
//! [`crate::QueueError::Corrupt`], because a damaged key must not take down a worker or the server.

use crate::error::{corrupt, Result};
use crate::model::{
    FailedCall, HistoryEntry, PollSummary, Priority, ResultStory, StoredResult, Task, TaskId,
    TaskState, TaskTrace, WorkerInfo,
};
use redis::Value;
use std::collections::HashMap;

pub(crate) type Fields = HashMap<String, String>;

pub(crate) fn string(v: &Value) -> Result<String> {
    match v {
        Value::BulkString(b) => {
            String::from_utf8(b.clone()).map_err(|_| corrupt("reply is not valid UTF-8"))
        }
        Value::SimpleString(s) => Ok(s.clone()),
        Value::VerbatimString { text, .. } => Ok(text.clone()),
        Value::Int(i) => Ok(i.to_string()),
        Value::Okay => Ok("OK".into()),
        other => Err(corrupt(format!("expected a string, got {other:?}"))),
    }
}

/// A string reply, or None for nil.
pub(crate) fn opt_string(v: &Value) -> Result<Option<String>> {
    match v {
        Value::Nil => Ok(None),
        other => string(other).map(Some),
    }
}

/// A task id read from Redis: anything that is not one is damage, not a task.
pub(crate) fn task_id(v: &Value) -> Result<TaskId> {
    parse_id(&string(v)?)
}

pub(crate) fn parse_id(s: &str) -> Result<TaskId> {
    TaskId::parse(s).map_err(|_| corrupt(format!("not a task id: {s:?}")))
}

pub(crate) fn int(v: &Value) -> Result<i64> {
    match v {
        Value::Int(i) => Ok(*i),
        Value::BulkString(_) | Value::SimpleString(_) => {
            let s = string(v)?;
            parse_i64(&s)
        }
        Value::Double(d) if d.fract() == 0.0 => Ok(*d as i64),
        other => Err(corrupt(format!("expected an integer, got {other:?}"))),
    }
}

/// Scores and counters are stored as decimal strings; zset scores may come back as "1.5e12".
pub(crate) fn parse_i64(s: &str) -> Result<i64> {
    if let Ok(i) = s.parse::<i64>() {
        return Ok(i);
    }
    match s.parse::<f64>() {
        Ok(f) if f.is_finite() && f.fract() == 0.0 => Ok(f as i64),
        _ => Err(corrupt(format!("not an integer: {s:?}"))),
    }
}

pub(crate) fn array(v: Value) -> Result<Vec<Value>> {
    match v {
        Value::Array(a) | Value::Set(a) => Ok(a),
        Value::Nil => Ok(Vec::new()),
        other => Err(corrupt(format!("expected an array, got {other:?}"))),
    }
}

/// The first element of a script's `{'status', ...}` reply, and the rest.
pub(crate) fn status(v: Value) -> Result<(String, Vec<Value>)> {
    let mut a = array(v)?;
    if a.is_empty() {
        return Err(corrupt("empty script reply"));
    }
    let rest = a.split_off(1);
    Ok((string(&a[0])?, rest))
}

/// A HGETALL reply (flat list or RESP3 map) as a map.
pub(crate) fn fields(v: Value) -> Result<Fields> {
    let mut out = Fields::new();
    match v {
        Value::Map(pairs) => {
            for (k, val) in pairs {
                out.insert(string(&k)?, string(&val)?);
            }
        }
        other => {
            let a = array(other)?;
            if a.len() % 2 != 0 {
                return Err(corrupt("odd field/value list"));
            }
            for pair in a.chunks(2) {
                out.insert(string(&pair[0])?, string(&pair[1])?);
            }
        }
    }
    Ok(out)
}

fn get<'a>(f: &'a Fields, k: &str) -> Result<&'a str> {
    f.get(k)
        .map(String::as_str)
        .ok_or_else(|| corrupt(format!("record lacks field {k:?}")))
}

fn get_i64(f: &Fields, k: &str) -> Result<i64> {
    match f.get(k) {
        None => Ok(0),
        Some(s) if s.is_empty() => Ok(0),
        Some(s) => parse_i64(s),
    }
}

fn get_u32(f: &Fields, k: &str) -> Result<u32> {
    u32::try_from(get_i64(f, k)?).map_err(|_| corrupt(format!("field {k:?} out of range")))
}

fn get_u64(f: &Fields, k: &str) -> Result<u64> {
    u64::try_from(get_i64(f, k)?).map_err(|_| corrupt(format!("field {k:?} out of range")))
}

fn opt(f: &Fields, k: &str) -> Option<String> {
    f.get(k).filter(|s| !s.is_empty()).cloned()
}

/// A task record (prelude.lua has the field table; omitted fields are defaults). The id comes
/// from the key; `partial` from the task's own partial key; `due_score` is its member score in
/// the due zset, None when it waits in a ready list (then it is due since `u`, else `c`).
pub(crate) fn task(
    id: &str,
    f: &Fields,
    partial: Option<String>,
    due_score: Option<i64>,
) -> Result<Task> {
    let state = match get(f, "s")?.parse::<TaskState>() {
        Ok(s @ (TaskState::Due | TaskState::Leased | TaskState::Dead)) => s,
        Ok(TaskState::Done) => return Err(corrupt("a task record in state done")),
        Err(e) => return Err(corrupt(e.to_string())),
    };
    let created = get_i64(f, "c")?;
    let updated = match get_i64(f, "u")? {
        0 => created,
        u => u,
    };
    Ok(Task {
        id: parse_id(id)?,
        query: get(f, "q")?.to_string(),
        payload: f.get("pl").cloned().unwrap_or_default(),
        state,
        refresh: f.get("rf").is_some(),
        trace: TaskTrace::from_fields(
            f.get("tc").map(String::as_str),
            f.get("tl").map(String::as_str),
        ),
        priority: if f.get("pr").map(String::as_str) == Some("bg") {
            Priority::Background
        } else {
            Priority::Interactive
        },
        created_ms: created,
        updated_ms: updated,
        attempts: get_u32(f, "a")?,
        polls: get_u32(f, "p")?,
        max_attempts: get_u32(f, "m")?,
        token: get_u64(f, "tk")?,
        worker: if state == TaskState::Leased {
            opt(f, "w")
        } else {
            None
        },
        last_error: opt(f, "e"),
        partial,
        deadline_ms: get_i64(f, "dl")?,
        due_ms: if state == TaskState::Due {
            Some(due_score.unwrap_or(updated))
        } else {
            None
        },
        lease_deadline_ms: if state == TaskState::Leased {
            Some(get_i64(f, "ld")?)
        } else {
            None
        },
        dead_reason: if state == TaskState::Dead {
            opt(f, "dr")
                .map(|r| {
                    r.parse()
                        .map_err(|e: model::UnknownName| corrupt(e.to_string()))
                })
                .transpose()?
        } else {
            None
        },
        tenant: f.get("tn").cloned().unwrap_or_default(),
        // As shown: a job URL's query string or fragment may carry a credential (a presigned
        // URL); the worker reads the whole of it from the claim, never from here.
        job: f
            .get("j")
            .map(|j| j.split(['?', '#']).next().unwrap_or_default().to_string()),
    })
}

/// A stored result and how it was completed, from its one string (prelude/records.lua
/// `pack_result`; complete.lua writes it; the lengths are in bytes):
/// `completed,created,polls,token,latency_ms,#worker,#query,claimed,first_poll,last_poll,
/// #tenant,asks\n` + worker + query + tenant + data, where `claimed`, `first_poll` and
/// `last_poll` are milliseconds before `completed` (empty when unknown). A result stored by an
/// older version has the first seven fields, or those and `asks`: no story beyond the worker
/// and token.
pub(crate) struct Packed {
    pub result: StoredResult,
    pub story: ResultStory,
}

pub(crate) fn packed_result(id: &str, s: &str) -> Result<Packed> {
    let bad = || corrupt(format!("result of {id}: bad format"));
    let (head, body) = s.split_once('\n').ok_or_else(bad)?;
    // An empty field is a story time that is not known: -1, never a real offset.
    let n: Vec<i64> = head
        .split(',')
        .map(|f| if f.is_empty() { Ok(-1) } else { parse_i64(f) })
        .collect::<Result<Vec<_>>>()?;
    let id = parse_id(id)?;
    // The last field of eight or twelve (asks counted for refresh-ahead) is the library's alone.
    let packed = match *n.as_slice() {
        [completed, created, polls, token, latency, wlen, qlen]
        | [completed, created, polls, token, latency, wlen, qlen, _] => build_packed(
            id,
            [completed, created, polls, token, latency],
            [0, 0, 0],
            [wlen, qlen, 0],
            body,
        ),
        [completed, created, polls, token, latency, wlen, qlen, claimed, first, last, tlen, _] => {
            let at = |before: i64| if before >= 0 { completed - before } else { 0 };
            build_packed(
                id,
                [completed, created, polls, token, latency],
                [at(claimed), at(first), at(last)],
                [wlen, qlen, tlen],
                body,
            )
        }
        _ => None,
    };
    let (result, story) = packed.ok_or_else(bad)?;
    Ok(Packed { result, story })
}

/// The parts of a stored result; None when the numbers or lengths do not fit the string.
fn build_packed(
    id: TaskId,
    [completed, created, polls, token, latency]: [i64; 5],
    [claimed, first_poll, last_poll]: [i64; 3],
    lens: [i64; 3],
    body: &str,
) -> Option<(StoredResult, ResultStory)> {
    let [wlen, qlen, tlen] = lens.map(|l| usize::try_from(l).ok());
    let (wlen, qlen, tlen) = (wlen?, qlen?, tlen?);
    let query_end = wlen.checked_add(qlen)?;
    let tenant_end = query_end.checked_add(tlen)?;
    let polls = u32::try_from(polls).ok()?;
    Some((
        StoredResult {
            id,
            query: body.get(wlen..query_end)?.to_string(),
            data: body.get(tenant_end..)?.to_string(),
            completed_ms: completed,
            created_ms: created,
            polls,
        },
        ResultStory {
            tenant: body.get(query_end..tenant_end)?.to_string(),
            worker: body.get(..wlen)?.to_string(),
            token: u64::try_from(token).ok()?,
            claimed_ms: claimed,
            latency_ms: u64::try_from(latency).ok()?,
            polls: poll_summary(polls, first_poll, last_poll),
        },
    ))
}

/// The polls summed up, when there were any and their times are known.
fn poll_summary(count: u32, first_ms: i64, last_ms: i64) -> Option<PollSummary> {
    (count > 0 && first_ms > 0 && last_ms >= first_ms).then_some(PollSummary {
        count,
        first_ms,
        last_ms,
    })
}

/// A record's polls summed up (fields `p`, `fp`, `lp`: reschedule.lua).
pub(crate) fn record_polls(f: &Fields) -> Result<Option<PollSummary>> {
    Ok(poll_summary(
        get_u32(f, "p")?,
        get_i64(f, "fp")?,
        get_i64(f, "lp")?,
    ))
}

/// A record's last ended claim (fields `lc`, `lw`, `tk`: reschedule.lua, fail.lua): its time,
/// worker and token; None when no claim has ended yet.
pub(crate) fn record_last_claim(f: &Fields) -> Result<Option<(i64, String, u64)>> {
    let at = get_i64(f, "lc")?;
    if at <= 0 {
        return Ok(None);
    }
    let worker = f.get("lw").cloned().unwrap_or_default();
    Ok(Some((at, worker, get_u64(f, "tk")?)))
}

/// A record's last failed call (fields `es`, `ed`, `eb`: fail.lua); None when it has none.
pub(crate) fn record_failed_call(f: &Fields) -> Result<Option<FailedCall>> {
    // Absent: never failed (or a record of an older version); empty: the last error was no
    // call of ours (an upstream's callback said "failed").
    if f.get("ed").is_none_or(|d| d.is_empty()) {
        return Ok(None);
    }
    let status = get_i64(f, "es")?;
    Ok(Some(FailedCall {
        http_status: (status > 0).then(|| u16::try_from(status).ok()).flatten(),
        took_ms: get_u64(f, "ed")?,
        body: f.get("eb").cloned().unwrap_or_default(),
    }))
}

pub(crate) fn worker(f: &Fields) -> Result<WorkerInfo> {
    Ok(WorkerInfo {
        id: get(f, "id")?.to_string(),
        host: f.get("host").cloned().unwrap_or_default(),
        pid: get_u32(f, "pid")?,
        started_ms: get_i64(f, "started")?,
        in_flight: get_u32(f, "in_flight")?,
        completed: get_u64(f, "completed")?,
        dead: get_u64(f, "dead")?,
        last_seen_ms: get_i64(f, "last_seen")?,
        // An entry of an older repoll has neither field: running, memory unknown.
        rss_bytes: f.get("rss").and_then(|s| s.parse().ok()),
        mode: f
            .get("mode")
            .and_then(|m| crate::model::WorkerMode::parse(m))
            .unwrap_or_default(),
        command: f
            .get("command")
            .and_then(|c| crate::model::WorkerCommand::parse(c)),
    })
}

pub(crate) fn web_process(f: &Fields) -> Result<crate::WebProcess> {
    Ok(crate::WebProcess {
        id: get(f, "id")?.to_string(),
        host: f.get("host").cloned().unwrap_or_default(),
        pid: get_u32(f, "pid")?,
        started_ms: get_i64(f, "started")?,
        last_seen_ms: get_i64(f, "last_seen")?,
    })
}

/// History entries are stored as "at|kind|detail".
pub(crate) fn history(s: &str) -> Result<HistoryEntry> {
    let mut it = s.splitn(3, '|');
    let at = it.next().ok_or_else(|| corrupt("empty history entry"))?;
    let kind = it
        .next()
        .ok_or_else(|| corrupt(format!("bad history entry {s:?}")))?;
    Ok(HistoryEntry {
        at_ms: parse_i64(at)?,
        kind: kind.to_string(),
        detail: it.next().unwrap_or("").to_string(),
    })
}

/// Fields of a possibly empty HGETALL: None when the key does not exist.
pub(crate) fn maybe_fields(v: Value) -> Result<Option<Fields>> {
    let f = fields(v)?;
    Ok(if f.is_empty() { None } else { Some(f) })
}
