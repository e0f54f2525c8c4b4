//! The event stream: each slot's newest entries, merged newest first.

use redis::Value;

use crate::decode::{self, array, parse_i64, string};
use crate::error::{corrupt, Result};
use crate::model::Event;
use crate::slot::Slot;
use crate::Queue;

use super::merge;

impl Queue {
    /// Newest `count` entries of the global event stream, newest first.
    pub async fn events(&self, count: usize) -> Result<Vec<Event>> {
        let all = self.fan(|s| async move { s.events(count).await }).await?;
        Ok(merge::events(all, count.clamp(1, 10_000)))
    }
}

impl Slot {
    /// This slot's newest `count` events (1 to 10,000), newest first.
    pub(crate) async fn events(&self, count: usize) -> Result<Vec<Event>> {
        let mut c = self.conn.clone();
        let v: Value = redis::cmd("XREVRANGE")
            .arg(&self.keys().events)
            .arg("+")
            .arg("-")
            .arg("COUNT")
            .arg(count.clamp(1, 10_000))
            .query_async(&mut c)
            .await?;
        let mut out = Vec::new();
        for entry in array(v)? {
            let e = array(entry)?;
            let [sid, body] = e.as_slice() else {
                return Err(corrupt("events: bad entry"));
            };
            let f = decode::fields(body.clone())?;
            let g = |n: &str| f.get(n).cloned().unwrap_or_default();
            out.push(Event {
                stream_id: string(sid)?,
                at_ms: parse_i64(&g("at"))?,
                kind: g("kind"),
                id: match g("id") {
                    id if id.is_empty() => None,
                    id => Some(decode::parse_id(&id)?),
                },
                detail: g("detail"),
            });
        }
        Ok(out)
    }
}
