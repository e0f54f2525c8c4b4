//! The throughput chart: completed, failed calls, dead tasks and polled per minute, all of
//! them or the one the overview's chooser picks ([`Plot`]).

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

use super::parts::*;
use super::readout::Pointer;
use super::scale::*;
use super::{Marker, Window};
use model::ThroughputBucket as Bucket;

/// The throughput's series, in the order of captions and tooltips. A task that dies after
/// five failed calls is 5 failed calls and 1 dead task.
const SERIES: [Series; 4] = [
    Series {
        name: "completed",
        one: "completed",
        class: "s-completed",
        dash: None,
        of: |b| b.completed,
    },
    Series {
        name: "failed calls",
        one: "failed call",
        class: "s-failed",
        dash: None,
        of: |b| b.failed,
    },
    Series {
        name: "dead tasks",
        one: "dead task",
        class: "s-dead",
        dash: Some("6 3"),
        of: |b| b.dead,
    },
    Series {
        name: "polled",
        one: "polled",
        class: "s-polled",
        dash: None,
        of: |b| b.polled,
    },
];

/// What the throughput chart plots: every series, or one of them alone (its own scale, so a
/// few dead tasks are not flattened under thousands of polls).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Plot {
    #[default]
    All,
    Completed,
    Failed,
    Dead,
    Polled,
}

impl Plot {
    /// Every choice, as the overview offers them.
    pub const ALL: [Plot; 5] = [
        Plot::All,
        Plot::Completed,
        Plot::Failed,
        Plot::Dead,
        Plot::Polled,
    ];

    /// The value of the overview's `plot` parameter ("" for all).
    pub fn param(self) -> &'static str {
        match self {
            Plot::All => "",
            Plot::Completed => "completed",
            Plot::Failed => "failed",
            Plot::Dead => "dead",
            Plot::Polled => "polled",
        }
    }

    /// `plot=dead` and the like; anything else is every series.
    pub fn parse(s: &str) -> Plot {
        Plot::ALL
            .into_iter()
            .find(|p| *p != Plot::All && p.param() == s)
            .unwrap_or_default()
    }

    /// "all", "completed", "failed calls", "dead tasks", "polled".
    pub fn words(self) -> &'static str {
        match self.series() {
            [one] => one.name,
            _ => "all",
        }
    }

    fn series(self) -> &'static [Series] {
        match self {
            Plot::All => &SERIES,
            Plot::Completed => &SERIES[0..1],
            Plot::Failed => &SERIES[1..2],
            Plot::Dead => &SERIES[2..3],
            Plot::Polled => &SERIES[3..4],
        }
    }
}

/// A point's counts for its tooltip and caption: "3 completed, 5 failed calls, 1 dead task,
/// 40 polled".
fn counts_words(b: &Bucket) -> String {
    SERIES
        .iter()
        .map(|s| s.words(b))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Completed / failed calls / dead tasks / polled per minute (over a wider point: its
/// average per minute, the tooltip giving the point's totals); the caption reads the last
/// complete point, never the one in progress.
#[component]
pub fn ThroughputChart(
    buckets: Vec<Bucket>,
    #[prop(optional)] window: Window,
    #[prop(optional)] markers: Vec<Marker>,
    #[prop(optional)] plot: Plot,
) -> AnyView {
    let per = window.per() as f64;
    let shown: Vec<&Series> = plot.series().iter().collect();
    let ticks = nice_ticks((series_max(&buckets, &shown) as f64 / per).ceil() as u64);
    let frame = Frame::new(&buckets, ticks.last().copied().unwrap_or(1));
    let lines = series_lines(frame, &buckets, &shown, per);
    let keys = legend(shown.iter().map(|s| s.key()));
    let tips = buckets
        .iter()
        .map(|b| {
            let tip = format!(
                "{} UTC · {}",
                window.span_label(b.minute_ms),
                counts_words(b)
            );
            (b.minute_ms, tip)
        })
        .collect();
    let pointer = Pointer::new("throughput-chart", frame, tips);
    let empty = buckets.is_empty().then(|| empty_note("no data"));
    let label = match plot {
        Plot::All => format!("throughput per minute, {}", window.words()),
        _ => format!("{} per minute, {}", plot.words(), window.words()),
    };
    let summary = match last_complete(&buckets) {
        Some(b) => {
            let legend = shown
                .iter()
                .enumerate()
                .map(|(i, s)| {
                    view! {
                        {(i > 0).then_some(", ")}
                        <span class=format!("{} num", s.class)>{s.words(b)}</span>
                    }
                })
                .collect_view();
            view! {
                {format!("{} (the last complete {}): ", window.span_label(b.minute_ms), window.point_words())}
                {legend}
            }
            .into_any()
        }
        None => "nothing complete yet".into_any(),
    };
    view! {
        <figure class="chart" data-testid="throughput-chart" data-plot=plot.param()>
            {keys}
            {chart_svg(
                label,
                pointer,
                view! { {y_axis(frame, &ticks, per_minute_label)} {x_axis(frame)} {marker_lines(frame, &markers, window.per())} }.into_any(),
                lines,
                view! { {empty} }.into_any(),
            )}
            <figcaption data-testid="throughput-caption">
                {format!("Tasks per minute, {} (times in UTC) · ", window.words())}
                {summary}
            </figcaption>
        </figure>
    }
    // Type-erased: the SVG's element types, nested in the overview's, overflow rustc's
    // query depth limit when the page is compiled to machine code.
    .into_any()
}
