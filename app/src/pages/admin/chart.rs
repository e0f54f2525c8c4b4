//! Line charts of the last hour, drawn as inline SVG by us: a few polylines need no chart
//! library in the wasm, and the server renders them like any other markup.

use leptos::prelude::*;

use super::model::Bucket;

const W: f64 = 600.0;
const H: f64 = 120.0;
const PAD: f64 = 4.0;

/// `points` attribute of a polyline of `values`, scaled to `max`.
fn points(values: &[f64], max: f64) -> String {
    let n = values.len().max(2) - 1;
    values
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let x = i as f64 * W / n as f64;
            let y = H - PAD - (v / max) * (H - 2.0 * PAD);
            format!("{x:.1},{y:.1}")
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Completed / failed / polled per minute.
#[component]
pub fn ThroughputChart(buckets: Vec<Bucket>) -> impl IntoView {
    let series = |f: fn(&Bucket) -> u64| buckets.iter().map(|b| f(b) as f64).collect::<Vec<_>>();
    let completed = series(|b| b.completed);
    let failed = series(|b| b.failed);
    let polled = series(|b| b.polled);
    let max = completed
        .iter()
        .chain(&failed)
        .chain(&polled)
        .copied()
        .fold(1.0, f64::max);
    let last = buckets.last().cloned().unwrap_or_default();
    view! {
        <figure class="chart" data-testid="throughput-chart">
            <svg width="600" height="120" viewBox=format!("0 0 {W} {H}") role="img" aria-label="throughput per minute, last hour">
                <line x1="0" y1=H - PAD x2=W y2=H - PAD class="axis" stroke="#999" stroke-width="1" />
                <polyline class="s-polled" fill="none" stroke="#3b6fd6" stroke-width="1.5" points=points(&polled, max) />
                <polyline class="s-completed" fill="none" stroke="#2e9e44" stroke-width="2" points=points(&completed, max) />
                <polyline class="s-failed" fill="none" stroke="#d33a2c" stroke-width="1.5" points=points(&failed, max) />
            </svg>
            <figcaption>
                {format!("per minute, last hour (max {}) · this minute: ", max as u64)}
                <span class="s-completed" style="color:#2e9e44">{format!("{} completed", last.completed)}</span> ", "
                <span class="s-failed" style="color:#d33a2c">{format!("{} failed", last.failed)}</span> ", "
                <span class="s-polled" style="color:#3b6fd6">{format!("{} polled", last.polled)}</span>
            </figcaption>
        </figure>
    }
}

/// Average time to result of the tasks completed in each minute.
#[component]
pub fn TimeToResultChart(buckets: Vec<Bucket>) -> impl IntoView {
    let avg: Vec<f64> = buckets
        .iter()
        .map(|b| {
            if b.ttr_count == 0 {
                0.0
            } else {
                b.ttr_sum_ms as f64 / b.ttr_count as f64
            }
        })
        .collect();
    let max = avg.iter().copied().fold(1.0, f64::max);
    let latest = avg.iter().rev().find(|v| **v > 0.0).copied().unwrap_or(0.0);
    view! {
        <figure class="chart" data-testid="ttr-chart">
            <svg width="600" height="120" viewBox=format!("0 0 {W} {H}") role="img" aria-label="time to result, last hour">
                <line x1="0" y1=H - PAD x2=W y2=H - PAD class="axis" stroke="#999" stroke-width="1" />
                <polyline class="s-ttr" fill="none" stroke="#8a4fd1" stroke-width="2" points=points(&avg, max) />
            </svg>
            <figcaption>
                {format!(
                    "average time to result per minute (max {}, latest {})",
                    super::ui::duration(max as i64),
                    super::ui::duration(latest as i64),
                )}
            </figcaption>
        </figure>
    }
}
