//! Triage counts for the dashboard (issue 29; Oban Web's sidebar of counts): what a filter
//! selects, counted by tenant and — for dead and retrying work — by error class, and the dead
//! tasks grouped by error (class and normalised message) with each group's first and last
//! death. Both walk the filter's tasks with the bulk selection's one scan
//! (`Queue::scan_matching`), bounded: at most the `max_scan` members looked at (the dashboard
//! passes [`FACET_SCAN_MAX`]), and they say when they stopped there. The class and the group
//! of an error are `model::error_class`'s, the one place that reads an error for them.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::bulk::select::Walk;
use crate::bulk::{BulkFilter, BulkState};
use crate::error::Result;
use crate::Queue;

/// Members a facet count or a dead-work grouping looks at, at most: past it the counts are
/// of the first this many and say "10,000+".
pub const FACET_SCAN_MAX: u64 = 10_000;
/// Values of one facet kept (the largest counts).
pub const FACET_VALUES_MAX: usize = 20;
/// Dead-work groups kept (the largest).
pub const DEAD_GROUPS_MAX: usize = 100;

/// One value of a facet and how many tasks have it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FacetCount {
    /// The value as a filter takes it: a tenant name ("" = no tenant), a class slug.
    pub key: String,
    /// The value in words.
    pub label: String,
    /// Tasks with this value.
    pub count: u64,
}

/// A filter's tasks counted by tenant and by error class.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Facets {
    /// Tasks that matched (among those looked at).
    pub matched: u64,
    /// By tenant (who asked first), largest first, at most [`FACET_VALUES_MAX`].
    pub tenants: Vec<FacetCount>,
    /// By error class, largest first: dead tasks, and waiting ones that failed before
    /// (retrying); empty for other states.
    pub classes: Vec<FacetCount>,
    /// Members of the state's set looked at.
    pub looked: u64,
    /// Every member was looked at (false: the counts are of the first [`Facets::looked`]).
    pub complete: bool,
}

/// Dead tasks of one error group.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeadGroup {
    /// The group's key (`group:` filter).
    pub key: String,
    /// The class slug (`class:` filter).
    pub class: String,
    /// The class in words ("HTTP 503").
    pub class_label: String,
    /// The normalised message (numbers as `#`, without the call).
    pub message: String,
    /// Dead tasks in the group.
    pub count: u64,
    /// When the group's first task died (ms, Redis time).
    pub first_ms: i64,
    /// When its last task died.
    pub last_ms: i64,
}

/// The dead tasks grouped by error, largest group first.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeadGroups {
    /// The largest groups, at most [`DEAD_GROUPS_MAX`].
    pub groups: Vec<DeadGroup>,
    /// Groups past [`DEAD_GROUPS_MAX`] (their tasks are not in `groups`).
    pub more_groups: u64,
    /// Dead tasks that matched (among those looked at).
    pub matched: u64,
    /// Members of the dead set looked at.
    pub looked: u64,
    /// Every member was looked at.
    pub complete: bool,
}

/// Field indices of `bulk::select::FIELDS`.
const E: usize = 1;
const U: usize = 3;
const TN: usize = 5;
const DR: usize = 6;

fn field(f: &[Option<String>], i: usize) -> Option<&str> {
    f.get(i).and_then(|v| v.as_deref())
}

/// The largest `max` of a tally, as facet values (ties by key, for a stable order).
fn largest(tally: HashMap<String, (String, u64)>, max: usize) -> Vec<FacetCount> {
    let mut v: Vec<FacetCount> = tally
        .into_iter()
        .map(|(key, (label, count))| FacetCount { key, label, count })
        .collect();
    v.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.key.cmp(&b.key)));
    v.truncate(max);
    v
}

impl Queue {
    /// What `filter` selects, counted by tenant and (dead and retrying work) by error class,
    /// looking at no more than `max_scan` members.
    pub async fn facets(&self, filter: &BulkFilter, max_scan: u64) -> Result<Facets> {
        let classes_too = matches!(filter.state, BulkState::Dead | BulkState::Waiting);
        let mut tenants: HashMap<String, (String, u64)> = HashMap::new();
        let mut classes: HashMap<String, (String, u64)> = HashMap::new();
        let mut matched = 0u64;
        let (looked, complete) = self
            .scan_matching(filter, max_scan, Walk::NewestFirst, &mut |_, f| {
                matched += 1;
                let tenant = field(f, TN).unwrap_or_default();
                let label = if tenant.is_empty() { "none" } else { tenant };
                tenants
                    .entry(tenant.to_string())
                    .or_insert_with(|| (label.to_string(), 0))
                    .1 += 1;
                // A waiting task that never failed has no error to classify; a dead one always
                // has a class, from its error or else its reason (a deadline death has no
                // error), as the dead work's groups and the `class:` filter classify it.
                let failed = field(f, E).is_some_and(|e| !e.is_empty());
                if classes_too && (failed || filter.state == BulkState::Dead) {
                    let class = model::error_class::classify(field(f, E), field(f, DR));
                    classes
                        .entry(class.slug())
                        .or_insert_with(|| (class.label(), 0))
                        .1 += 1;
                }
            })
            .await?;
        Ok(Facets {
            matched,
            tenants: largest(tenants, FACET_VALUES_MAX),
            classes: largest(classes, FACET_VALUES_MAX),
            looked,
            complete,
        })
    }

    /// The dead tasks `filter` selects (its state is taken as dead), grouped by error, with
    /// each group's count and first and last death; no more than `max_scan` looked at.
    pub async fn dead_groups(&self, filter: &BulkFilter, max_scan: u64) -> Result<DeadGroups> {
        let filter = BulkFilter {
            state: BulkState::Dead,
            ..filter.clone()
        };
        let mut groups: HashMap<String, DeadGroup> = HashMap::new();
        let mut matched = 0u64;
        let (looked, complete) = self
            .scan_matching(&filter, max_scan, Walk::NewestFirst, &mut |_, f| {
                matched += 1;
                let at = field(f, U)
                    .or(field(f, 2))
                    .and_then(|v| v.parse::<i64>().ok())
                    .unwrap_or(0);
                let g = model::error_class::group_of(field(f, E), field(f, DR));
                let entry = groups.entry(g.key.clone()).or_insert_with(|| DeadGroup {
                    key: g.key,
                    class: g.class.slug(),
                    class_label: g.class.label(),
                    message: g.message,
                    count: 0,
                    first_ms: at,
                    last_ms: at,
                });
                entry.count += 1;
                entry.first_ms = entry.first_ms.min(at);
                entry.last_ms = entry.last_ms.max(at);
            })
            .await?;
        let mut all: Vec<DeadGroup> = groups.into_values().collect();
        all.sort_by(|a, b| b.count.cmp(&a.count).then_with(|| a.key.cmp(&b.key)));
        let more_groups = all.len().saturating_sub(DEAD_GROUPS_MAX) as u64;
        all.truncate(DEAD_GROUPS_MAX);
        Ok(DeadGroups {
            groups: all,
            more_groups,
            matched,
            looked,
            complete,
        })
    }
}
