//! The throughput chart: completed / failed / polled per minute.

use leptos::prelude::*;

use super::parts::*;
use super::scale::*;
use super::{Marker, Window};
use model::ThroughputBucket as Bucket;

/// Completed / failed / polled per minute (over a wider point: its average per minute, the
/// tooltip giving the point's totals).
#[component]
pub fn ThroughputChart(
    buckets: Vec<Bucket>,
    #[prop(optional)] window: Window,
    #[prop(optional)] markers: Vec<Marker>,
) -> AnyView {
    let per = window.per() as f64;
    let max = buckets
        .iter()
        .map(|b| b.completed.max(b.failed).max(b.polled))
        .max()
        .unwrap_or(0);
    let ticks = nice_ticks((max as f64 / per).ceil() as u64);
    let frame = Frame::new(&buckets, ticks.last().copied().unwrap_or(1));
    let line = |f: fn(&Bucket) -> u64| {
        points(
            buckets
                .iter()
                .map(|b| (frame.x(b.minute_ms), frame.y(f(b) as f64 / per))),
        )
    };
    let (polled, completed, failed) = (
        line(|b| b.polled),
        line(|b| b.completed),
        line(|b| b.failed),
    );
    let tips = buckets
        .iter()
        .map(|b| {
            let tip = format!(
                "{} UTC · {} completed, {} failed, {} polled",
                window.span_label(b.minute_ms),
                b.completed,
                b.failed,
                b.polled
            );
            (b.minute_ms, tip)
        })
        .collect();
    let empty = buckets.is_empty().then(|| empty_note("no data"));
    let last = buckets.last().cloned().unwrap_or_default();
    let (label, now_words) = match window {
        Window::Hour => ("throughput per minute, last hour", "this minute"),
        Window::Day => ("throughput per minute, last 24 hours", "this quarter hour"),
        Window::Week => ("throughput per minute, last 7 days", "this hour"),
    };
    view! {
        <figure class="chart" data-testid="throughput-chart">
            <svg width="600" height="160" viewBox=format!("0 0 {W} {H}") role="img" aria-label=label>
                {y_axis(frame, &ticks, per_minute_label)}
                {x_axis(frame)}
                {marker_lines(frame, &markers, window.per())}
                <polyline class="s-polled" fill="none" stroke=POLLED stroke-width="1.5" points=polled />
                <polyline class="s-completed" fill="none" stroke=COMPLETED stroke-width="2" points=completed />
                <polyline class="s-failed" fill="none" stroke=FAILED stroke-width="1.5" points=failed />
                {empty}
                {hover_bands(frame, tips)}
            </svg>
            <figcaption>
                {format!("Tasks per minute, {} (times in UTC) · {now_words}: ", window.words())}
                <span class="s-completed" style=format!("color:{COMPLETED}")>{format!("{} completed", last.completed)}</span> ", "
                <span class="s-failed" style=format!("color:{FAILED}")>{format!("{} failed", last.failed)}</span> ", "
                <span class="s-polled" style=format!("color:{POLLED}")>{format!("{} polled", last.polled)}</span>
            </figcaption>
        </figure>
    }
    // Type-erased: the SVG's element types, nested in the overview's, overflow rustc's
    // query depth limit when the page is compiled to machine code.
    .into_any()
}
