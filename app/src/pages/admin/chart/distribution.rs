//! The distribution charts: p50 / p95 / p99 (and the average time to result) of a [`Measure`].

use leptos::prelude::*;

use super::parts::*;
use super::readout::Pointer;
use super::scale::*;
use super::{ui_duration as duration, Marker, Window};
use model::{Percentiles, ThroughputBucket as Bucket};

/// What a distribution chart shows: one of the three histograms the queue counts per minute.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Measure {
    /// Completion minus creation of the tasks completed (with their average).
    #[default]
    TimeToResult,
    /// Polls each completed task needed.
    Polls,
    /// Duration of the upstream calls (completions, polls and errors).
    Latency,
}

impl Measure {
    /// The three, in the order the overview shows them.
    pub const ALL: [Measure; 3] = [Measure::TimeToResult, Measure::Latency, Measure::Polls];

    pub(super) fn of(self, b: &Bucket) -> Option<Percentiles> {
        match self {
            Measure::TimeToResult => b.ttr,
            Measure::Polls => b.polls,
            Measure::Latency => b.latency,
        }
    }

    pub(super) fn test_id(self) -> &'static str {
        match self {
            Measure::TimeToResult => "ttr-chart",
            Measure::Polls => "polls-chart",
            Measure::Latency => "latency-chart",
        }
    }

    pub(super) fn title(self) -> &'static str {
        match self {
            Measure::TimeToResult => "Time to result",
            Measure::Polls => "Polls per task",
            Measure::Latency => "Upstream call latency",
        }
    }

    pub(super) fn axis_label(self) -> fn(u64) -> String {
        match self {
            Measure::Polls => count_label,
            _ => ms_label,
        }
    }

    pub(super) fn value(self, v: f64) -> String {
        match self {
            Measure::Polls => one_decimal(v),
            _ => duration(v.round() as i64),
        }
    }

    /// What the values were taken from, for `n` of them.
    pub(super) fn over(self, n: u64) -> String {
        match self {
            Measure::Latency if n == 1 => "over 1 call".into(),
            Measure::Latency => format!("over {n} calls"),
            _ => format!("over {n} completed"),
        }
    }

    pub(super) fn nothing(self) -> &'static str {
        match self {
            Measure::Latency => "no upstream calls",
            _ => "nothing completed",
        }
    }
}

/// One line of a distribution chart.
pub(super) struct Series {
    class: &'static str,
    name: &'static str,
    width: &'static str,
    values: Vec<Option<f64>>,
}

/// p50, p95 and p99 of a [`Measure`] per point (each read from the point's merged histogram,
/// within a bucket's width), plus the exact average for time to result; points with no value
/// are gaps.
#[component]
pub fn DistributionChart(
    buckets: Vec<Bucket>,
    #[prop(optional)] measure: Measure,
    #[prop(optional)] window: Window,
    #[prop(optional)] markers: Vec<Marker>,
) -> AnyView {
    let series = distribution_series(&buckets, measure);
    let max = series
        .iter()
        .flat_map(|s| s.values.iter().flatten())
        .copied()
        .fold(0.0, f64::max);
    let ticks = nice_ticks(max.ceil() as u64);
    let frame = Frame::new(&buckets, ticks.last().copied().unwrap_or(1));
    let (lines, dots): (Vec<_>, Vec<_>) = series
        .iter()
        .map(|s| run_lines(frame, &buckets, &s.values, s.class, s.width))
        .unzip();
    let pointer = Pointer::new(
        measure.test_id(),
        frame,
        distribution_tips(&buckets, &series, measure, window),
    );
    let keys = legend(series.iter().map(|s| Key {
        name: s.name,
        class: s.class,
        dash: None,
        width: s.width,
    }));
    let any = series.iter().any(|s| s.values.iter().any(Option::is_some));
    let empty = (!any).then(|| empty_note(nothing_in(measure, window)));
    let (legend, summary) = distribution_caption(&series, measure, window);
    let label = format!("{}, {}", measure.title().to_lowercase(), window.words());
    view! {
        <figure class="chart" data-testid=measure.test_id()>
            {keys}
            {chart_svg(
                label,
                pointer,
                view! { {y_axis(frame, &ticks, measure.axis_label())} {x_axis(frame)} {marker_lines(frame, &markers, window.per())} }.into_any(),
                lines.into_any(),
                view! { {dots} {empty} }.into_any(),
            )}
            <figcaption>
                <strong>{measure.title()}</strong>
                " (latest complete:" {legend} ")"
                {summary}
            </figcaption>
        </figure>
    }
    // Type-erased: the SVG's element types, nested in the overview's, overflow rustc's
    // query depth limit when the page is compiled to machine code.
    .into_any()
}

/// The lines of a distribution chart: p50, p95, p99, and for time to result the average.
fn distribution_series(buckets: &[Bucket], measure: Measure) -> Vec<Series> {
    let pick = |f: fn(&Percentiles) -> u64| -> Vec<Option<f64>> {
        buckets
            .iter()
            .map(|b| measure.of(b).map(|p| f(&p) as f64))
            .collect()
    };
    let mut series = vec![
        Series {
            class: "s-p50",
            name: "p50",
            width: "2",
            values: pick(|p| p.p50),
        },
        Series {
            class: "s-p95",
            name: "p95",
            width: "1.5",
            values: pick(|p| p.p95),
        },
        Series {
            class: "s-p99",
            name: "p99",
            width: "1",
            values: pick(|p| p.p99),
        },
    ];
    if measure == Measure::TimeToResult {
        series.push(Series {
            class: "s-ttr",
            name: "average",
            width: "1.5",
            values: buckets
                .iter()
                .map(|b| (b.ttr_count > 0).then(|| b.ttr_sum_ms as f64 / b.ttr_count as f64))
                .collect(),
        });
    }
    series
}

/// Per point, its tooltip: the percentiles (and average) and how many they are over.
fn distribution_tips(
    buckets: &[Bucket],
    series: &[Series],
    measure: Measure,
    window: Window,
) -> Vec<(i64, String)> {
    buckets
        .iter()
        .enumerate()
        .map(|(i, b)| {
            let p = measure.of(b);
            let average = series.get(3).and_then(|s| s.values[i]);
            let mut what = Vec::new();
            if let Some(p) = p {
                what.push(format!(
                    "p50 {}, p95 {}, p99 {}",
                    measure.value(p.p50 as f64),
                    measure.value(p.p95 as f64),
                    measure.value(p.p99 as f64)
                ));
            }
            if let Some(a) = average {
                what.push(format!("average {}", measure.value(a)));
            }
            let count = p.map(|p| p.count).unwrap_or(b.ttr_count);
            let text = if what.is_empty() {
                measure.nothing().to_string()
            } else {
                format!(
                    "{} {} {}",
                    measure.title().to_lowercase(),
                    what.join(", "),
                    measure.over(count)
                )
            };
            (
                b.minute_ms,
                format!("{} UTC · {text}", window.span_label(b.minute_ms)),
            )
        })
        .collect()
}

/// The series' latest value of a complete point (the last point, in progress, is left out),
/// if it has any.
fn latest(s: &Series) -> Option<f64> {
    s.values.iter().rev().skip(1).flatten().next().copied()
}

/// What an empty chart says.
fn nothing_in(measure: Measure, window: Window) -> &'static str {
    match (measure, window) {
        (Measure::Latency, Window::Hour) => "no upstream calls in the last hour",
        (Measure::Latency, Window::Day) => "no upstream calls in the last 24 hours",
        (Measure::Latency, Window::Week) => "no upstream calls in the last 7 days",
        (_, Window::Hour) => "nothing completed in the last hour",
        (_, Window::Day) => "nothing completed in the last 24 hours",
        (_, Window::Week) => "nothing completed in the last 7 days",
    }
}

/// The caption's legend (each series with its latest value) and summary (span, peak p99).
fn distribution_caption(
    series: &[Series],
    measure: Measure,
    window: Window,
) -> (impl IntoView, String) {
    let every = window.every();
    let legend = series
        .iter()
        .map(|s| {
            let text = match latest(s) {
                Some(v) => format!(" {} {}", s.name, measure.value(v)),
                None => format!(" {}", s.name),
            };
            view! { <span class=s.class>{text}</span> }
        })
        .collect_view();
    let peak = series
        .iter()
        .find(|s| s.name == "p99")
        .and_then(|s| s.values.iter().flatten().copied().reduce(f64::max));
    let summary = match peak {
        Some(peak) => format!(
            " · {every}, {} (times in UTC) · peak p99 {}",
            window.words(),
            measure.value(peak)
        ),
        None => format!(" · {every}, {} (times in UTC)", window.words()),
    };
    (legend, summary)
}
