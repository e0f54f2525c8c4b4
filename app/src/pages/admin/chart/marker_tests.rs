//! The charts' markers in the rendered markup: those inside the span drawn with their label,
//! the last point's span included (moved out of `tests` to keep each file to one job).

use super::scale::*;
use super::tests::html;
use super::*;
use leptos::prelude::*;
use model::ThroughputBucket as Bucket;

#[test]
fn markers_inside_the_span_are_drawn_with_their_label() {
    let t0 = 19_000 * DAY_MS;
    let buckets: Vec<Bucket> = (0..60)
        .map(|i| Bucket {
            minute_ms: t0 + i * MINUTE_MS,
            ..Bucket::default()
        })
        .collect();
    let markers = vec![
        Marker {
            at_ms: t0 + 30 * MINUTE_MS + 5_000,
            label: "paused".into(),
        },
        Marker {
            at_ms: t0 + 59 * MINUTE_MS + 30_000,
            label: "resumed".into(),
        },
        Marker {
            at_ms: t0 - DAY_MS,
            label: "started".into(),
        },
    ];
    let hour = html(
        || view! { <ThroughputChart buckets=buckets.clone() window=Window::Hour markers=markers.clone() /> },
    );
    assert_eq!(
        hour.matches("data-testid=\"chart-marker\"").count(),
        2,
        "{hour}"
    );
    assert!(hour.contains(">paused<") && hour.contains(">resumed<"));
    assert!(!hour.contains(">started<"));
    // A day's last point covers a quarter hour: a marker 10 minutes into it is drawn.
    let quarters: Vec<Bucket> = (0..96)
        .map(|i| Bucket {
            minute_ms: t0 + i * 15 * MINUTE_MS,
            ..Bucket::default()
        })
        .collect();
    let last = quarters.last().unwrap().minute_ms;
    let late = vec![Marker {
        at_ms: last + 10 * MINUTE_MS,
        label: "paused".into(),
    }];
    let day =
        html(|| view! { <ThroughputChart buckets=quarters window=Window::Day markers=late /> });
    assert_eq!(
        day.matches("data-testid=\"chart-marker\"").count(),
        1,
        "{day}"
    );
}
