//! Line charts of the last hour or the last 24 hours, drawn as inline SVG by us: a few polylines, axes and `<title>`
//! tooltips need no chart library in the wasm, and the server renders them like any other
//! markup.
//!
//! Everything drawn is a pure function of the buckets (times come from their `minute_ms`, never
//! from the clock), so the server's markup and the hydrating browser's are the same.

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

use super::ui::duration;
use model::{Percentiles, ThroughputBucket as Bucket};

/// How much time the charts cover, and how wide each point is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Window {
    /// 60 one-minute points.
    #[default]
    Hour,
    /// 96 points of 15 minutes (the queue keeps a day of per-minute counters).
    Day,
    /// 168 points of an hour (older days come from the queue's hourly roll-up).
    Week,
}

impl Window {
    /// Every window, as the overview offers them.
    pub const ALL: [Window; 3] = [Window::Hour, Window::Day, Window::Week];

    /// Minutes covered.
    pub fn minutes(self) -> usize {
        match self {
            Window::Hour => 60,
            Window::Day => 1440,
            Window::Week => 7 * 1440,
        }
    }

    /// Minutes per point.
    pub fn per(self) -> usize {
        match self {
            Window::Hour => 1,
            Window::Day => 15,
            Window::Week => 60,
        }
    }

    /// "last hour", "last 24 hours", "last 7 days".
    pub fn words(self) -> &'static str {
        match self {
            Window::Hour => "last hour",
            Window::Day => "last 24 hours",
            Window::Week => "last 7 days",
        }
    }

    /// The value of the overview's `window` parameter.
    pub fn param(self) -> &'static str {
        match self {
            Window::Hour => "1h",
            Window::Day => "24h",
            Window::Week => "7d",
        }
    }

    /// `window=24h` is the day, `7d` the week; anything else the hour.
    pub fn parse(s: &str) -> Window {
        match s {
            "24h" => Window::Day,
            "7d" => Window::Week,
            _ => Window::Hour,
        }
    }

    /// How often a point comes: "per minute", "per quarter hour", "per hour".
    fn every(self) -> &'static str {
        match self {
            Window::Hour => "per minute",
            Window::Day => "per quarter hour",
            Window::Week => "per hour",
        }
    }

    /// The time a point covers: "14:05" for a minute, "14:00–14:15" for a quarter hour,
    /// "12-01 14:00–15:00" for an hour of the week.
    fn span_label(self, start_ms: i64) -> String {
        match self.per() {
            1 => utc_hhmm(start_ms),
            60 => format!(
                "{} {}–{}",
                utc_month_day(start_ms),
                utc_hhmm(start_ms),
                utc_hhmm(start_ms + 60 * MINUTE_MS)
            ),
            per => format!(
                "{}–{}",
                utc_hhmm(start_ms),
                utc_hhmm(start_ms + per as i64 * MINUTE_MS)
            ),
        }
    }
}

/// A moment worth seeing on the charts: a pause, a resume, a process start (a deploy).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Marker {
    pub at_ms: i64,
    /// Short: it is drawn at the top of the line, the whole text is its tooltip.
    pub label: String,
}

/// Vertical dashed lines at the markers inside the charts' span (up to the end of the last
/// point, which covers `per` minutes from its start), each with its label.
fn marker_lines(frame: Frame, markers: &[Marker], per: usize) -> impl IntoView {
    let Some((t0, t1)) = frame.span else {
        return view! { <g class="markers"></g> }.into_any();
    };
    let lines = markers
        .iter()
        .filter(|m| m.at_ms >= t0 && m.at_ms < t1 + per as i64 * MINUTE_MS)
        .map(|m| {
            let x = coord(frame.x(m.at_ms));
            let tip = format!("{} UTC · {}", utc_hhmm(m.at_ms), m.label);
            view! {
                <g class="marker" data-testid="chart-marker">
                    <line x1=x.clone() y1=coord(TOP) x2=x.clone() y2=coord(BOTTOM) stroke=MARKER stroke-width="1" stroke-dasharray="3 3" />
                    <text x=x y=coord(TOP + 8.0) font-size="9" fill=MARKER>{m.label.clone()}</text>
                    <title>{tip}</title>
                </g>
            }
        })
        .collect_view();
    view! { <g class="markers">{lines}</g> }.into_any()
}

/// The viewBox, and the plot area inside it: the margins hold the axes' labels.
const W: f64 = 600.0;
const H: f64 = 160.0;
const LEFT: f64 = 52.0;
const RIGHT: f64 = W - 16.0;
const TOP: f64 = 10.0;
const BOTTOM: f64 = H - 22.0;

const MINUTE_MS: i64 = 60_000;
const DAY_MS: i64 = 86_400_000;
/// At most this many time labels under the x axis.
const MAX_TIME_LABELS: i64 = 6;

const AXIS: &str = "#999";
const GRID: &str = "#e3e6ea";
const LABEL: &str = "#666";
const COMPLETED: &str = "#2e9e44";
const FAILED: &str = "#d33a2c";
const POLLED: &str = "#3b6fd6";
const TTR: &str = "#8a4fd1";
const P50: &str = "#1d7fb8";
const P95: &str = "#d9822b";
const P99: &str = "#b8325a";
const MARKER: &str = "#b07a00";

/// Y axis ticks from 0: 3 to 5 multiples of a 1, 2 or 5 × 10ⁿ step, the last one ≥ `max`.
fn nice_ticks(max: u64) -> Vec<u64> {
    let max = u128::from(max);
    let mut magnitude: u128 = 1;
    let step = loop {
        if let Some(step) = [1, 2, 5]
            .iter()
            .map(|m| m * magnitude)
            .find(|step| max.div_ceil(*step) <= 4)
        {
            break step;
        }
        magnitude *= 10;
    };
    let n = max.div_ceil(step).max(2);
    (0..=n)
        .map(|k| u64::try_from(k * step).unwrap_or(u64::MAX))
        .collect()
}

/// Where the time labels go: every whole 1, 2, 5, 10, 15, 30… minutes between `t0` and `t1`,
/// the finest spacing that gives at most [`MAX_TIME_LABELS`]; `t0` alone if none falls there.
fn time_ticks(t0: i64, t1: i64) -> Vec<i64> {
    if t1 < t0 {
        return Vec::new();
    }
    let count = |every: i64| {
        let first = t0.div_euclid(every) + i64::from(t0.rem_euclid(every) != 0);
        t1.div_euclid(every) - first + 1
    };
    let span_minutes = (i128::from(t1) - i128::from(t0)) / i128::from(MINUTE_MS);
    let every = [1, 2, 5, 10, 15, 30, 60, 120, 180, 240, 360, 720, 1440, 2880]
        .iter()
        .map(|m| m * MINUTE_MS)
        .find(|every| count(*every) <= MAX_TIME_LABELS)
        .unwrap_or_else(|| {
            let minutes = span_minutes / i128::from(MAX_TIME_LABELS - 1) + 1;
            i64::try_from(minutes * i128::from(MINUTE_MS)).unwrap_or(i64::MAX)
        });
    let mut t = t0.div_euclid(every).saturating_mul(every);
    if t < t0 {
        t = t.saturating_add(every);
    }
    let mut ticks = Vec::new();
    while t >= t0 && t <= t1 {
        ticks.push(t);
        match t.checked_add(every) {
            Some(next) => t = next,
            None => break,
        }
    }
    if ticks.is_empty() {
        ticks.push(t0);
    }
    ticks
}

/// "MM-DD" of a time in UTC (the civil calendar from days since 1970, after Howard Hinnant's
/// `civil_from_days`).
fn utc_month_day(ms: i64) -> String {
    let z = ms.div_euclid(DAY_MS) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    format!("{month:02}-{day:02}")
}

/// "HH:MM" of a time in UTC.
fn utc_hhmm(ms: i64) -> String {
    let minutes = ms.rem_euclid(DAY_MS) / MINUTE_MS;
    format!("{:02}:{:02}", minutes / 60, minutes % 60)
}

/// `x` with one decimal, without a trailing ".0".
fn one_decimal(x: f64) -> String {
    let s = format!("{x:.1}");
    match s.strip_suffix(".0") {
        Some(whole) => whole.to_owned(),
        None => s,
    }
}

/// A count as "850", "1.5k", "2M", "3G".
fn count_label(n: u64) -> String {
    match n {
        0..1_000 => n.to_string(),
        1_000..1_000_000 => format!("{}k", one_decimal(n as f64 / 1e3)),
        1_000_000..1_000_000_000 => format!("{}M", one_decimal(n as f64 / 1e6)),
        _ => format!("{}G", one_decimal(n as f64 / 1e9)),
    }
}

/// Y label of the throughput chart: "0", "50/min", "1.5k/min".
fn per_minute_label(n: u64) -> String {
    if n == 0 {
        "0".into()
    } else {
        format!("{}/min", count_label(n))
    }
}

/// Y label of the time-to-result chart: "0", "200ms", "1.5s", "100s".
fn ms_label(ms: u64) -> String {
    match ms {
        0 => "0".into(),
        1..1_000 => format!("{ms}ms"),
        _ => format!("{}s", one_decimal(ms as f64 / 1e3)),
    }
}

/// A coordinate as it goes into the markup.
fn coord(v: f64) -> String {
    format!("{v:.1}")
}

/// Maps minutes and values to the plot area.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Frame {
    /// First and last minute of the buckets; `None` without buckets.
    span: Option<(i64, i64)>,
    /// Value at the top of the plot (the last y tick, never 0).
    top: f64,
}

impl Frame {
    fn new(buckets: &[Bucket], top: u64) -> Self {
        let t0 = buckets.iter().map(|b| b.minute_ms).min();
        let t1 = buckets.iter().map(|b| b.minute_ms).max();
        Frame {
            span: t0.zip(t1),
            top: top.max(1) as f64,
        }
    }

    /// X of minute `t`: first minute at the left, last at the right, a lone one in the middle.
    fn x(&self, t: i64) -> f64 {
        match self.span {
            Some((t0, t1)) if t1 > t0 => {
                let f = (t as f64 - t0 as f64) / (t1 as f64 - t0 as f64);
                LEFT + f.clamp(0.0, 1.0) * (RIGHT - LEFT)
            }
            _ => (LEFT + RIGHT) / 2.0,
        }
    }

    /// Y of value `v`: 0 on the x axis, `top` at the top.
    fn y(&self, v: f64) -> f64 {
        BOTTOM - (v / self.top).clamp(0.0, 1.0) * (BOTTOM - TOP)
    }

    /// Half the width of each of `n` hover bands, one per bucket.
    fn half_band(&self, n: usize) -> f64 {
        match self.span {
            Some((t0, t1)) if t1 > t0 && n > 1 => (RIGHT - LEFT) / (n - 1) as f64 / 2.0,
            _ => (RIGHT - LEFT) / 2.0,
        }
    }
}

/// `points` attribute of a polyline.
fn points(xy: impl IntoIterator<Item = (f64, f64)>) -> String {
    xy.into_iter()
        .map(|(x, y)| format!("{x:.1},{y:.1}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The runs of consecutive `Some` values, as (index, value) pairs: one line each, so minutes
/// without data are gaps rather than drops to zero.
fn runs(values: &[Option<f64>]) -> Vec<Vec<(usize, f64)>> {
    let mut out: Vec<Vec<(usize, f64)>> = Vec::new();
    let mut current = Vec::new();
    for (i, v) in values.iter().enumerate() {
        match v {
            Some(v) => current.push((i, *v)),
            None if !current.is_empty() => out.push(std::mem::take(&mut current)),
            None => {}
        }
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

/// Grid lines and labels of the y axis; the line at 0 is the x axis.
fn y_axis(frame: Frame, ticks: &[u64], label: fn(u64) -> String) -> impl IntoView {
    let rows = ticks
        .iter()
        .map(|&v| {
            let y = frame.y(v as f64);
            let (class, stroke) = if v == 0 { ("axis", AXIS) } else { ("grid", GRID) };
            view! {
                <line class=class x1=coord(LEFT) y1=coord(y) x2=coord(RIGHT) y2=coord(y) stroke=stroke stroke-width="1" />
                <text x=coord(LEFT - 6.0) y=coord(y + 3.5) text-anchor="end" font-size="10" fill=LABEL>{label(v)}</text>
            }
        })
        .collect_view();
    view! {
        <g class="y-axis">
            <line x1=coord(LEFT) y1=coord(TOP) x2=coord(LEFT) y2=coord(BOTTOM) stroke=AXIS stroke-width="1" />
            {rows}
        </g>
    }
}

/// Time labels (UTC HH:MM) under the x axis.
fn x_axis(frame: Frame) -> impl IntoView {
    let ticks = frame
        .span
        .map(|(t0, t1)| time_ticks(t0, t1))
        .unwrap_or_default();
    // Over more than two days the labels fall on midnights: dates say more than "00:00".
    let days = frame.span.is_some_and(|(t0, t1)| t1 - t0 > 2 * DAY_MS);
    let labels = ticks
        .into_iter()
        .map(|t| {
            let x = coord(frame.x(t));
            let label = if days { utc_month_day(t) } else { utc_hhmm(t) };
            view! {
                <line x1=x.clone() y1=coord(BOTTOM) x2=x.clone() y2=coord(BOTTOM + 4.0) stroke=AXIS stroke-width="1" />
                <text x=x y=coord(H - 6.0) text-anchor="middle" font-size="10" fill=LABEL>{label}</text>
            }
        })
        .collect_view();
    view! { <g class="x-axis">{labels}</g> }
}

/// One invisible band per bucket over the plot's full height, whose `<title>` is the tooltip.
fn hover_bands(frame: Frame, tips: Vec<(i64, String)>) -> impl IntoView {
    let half = frame.half_band(tips.len());
    let bands = tips
        .into_iter()
        .map(|(t, tip)| {
            let x = frame.x(t);
            let (l, r) = ((x - half).max(LEFT), (x + half).min(RIGHT));
            view! {
                <rect x=coord(l) y=coord(TOP) width=coord(r - l) height=coord(BOTTOM - TOP) fill="#000" fill-opacity="0">
                    <title>{tip}</title>
                </rect>
            }
        })
        .collect_view();
    view! { <g class="tips">{bands}</g> }
}

/// A note in the middle of an empty plot.
fn empty_note(text: &'static str) -> impl IntoView {
    view! {
        <text x=coord((LEFT + RIGHT) / 2.0) y=coord((TOP + BOTTOM) / 2.0) text-anchor="middle" font-size="12" fill=LABEL>{text}</text>
    }
}

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

    fn of(self, b: &Bucket) -> Option<Percentiles> {
        match self {
            Measure::TimeToResult => b.ttr,
            Measure::Polls => b.polls,
            Measure::Latency => b.latency,
        }
    }

    fn test_id(self) -> &'static str {
        match self {
            Measure::TimeToResult => "ttr-chart",
            Measure::Polls => "polls-chart",
            Measure::Latency => "latency-chart",
        }
    }

    fn title(self) -> &'static str {
        match self {
            Measure::TimeToResult => "Time to result",
            Measure::Polls => "Polls per task",
            Measure::Latency => "Upstream call latency",
        }
    }

    fn axis_label(self) -> fn(u64) -> String {
        match self {
            Measure::Polls => count_label,
            _ => ms_label,
        }
    }

    fn value(self, v: f64) -> String {
        match self {
            Measure::Polls => one_decimal(v),
            _ => duration(v.round() as i64),
        }
    }

    /// What the values were taken from, for `n` of them.
    fn over(self, n: u64) -> String {
        match self {
            Measure::Latency if n == 1 => "over 1 call".into(),
            Measure::Latency => format!("over {n} calls"),
            _ => format!("over {n} completed"),
        }
    }

    fn nothing(self) -> &'static str {
        match self {
            Measure::Latency => "no upstream calls",
            _ => "nothing completed",
        }
    }
}

/// One line of a distribution chart.
struct Series {
    class: &'static str,
    name: &'static str,
    colour: &'static str,
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
            colour: P50,
            width: "2",
            values: pick(|p| p.p50),
        },
        Series {
            class: "s-p95",
            name: "p95",
            colour: P95,
            width: "1.5",
            values: pick(|p| p.p95),
        },
        Series {
            class: "s-p99",
            name: "p99",
            colour: P99,
            width: "1",
            values: pick(|p| p.p99),
        },
    ];
    if measure == Measure::TimeToResult {
        series.push(Series {
            class: "s-ttr",
            name: "average",
            colour: TTR,
            width: "1.5",
            values: buckets
                .iter()
                .map(|b| (b.ttr_count > 0).then(|| b.ttr_sum_ms as f64 / b.ttr_count as f64))
                .collect(),
        });
    }
    let max = series
        .iter()
        .flat_map(|s| s.values.iter().flatten())
        .copied()
        .fold(0.0, f64::max);
    let ticks = nice_ticks(max.ceil() as u64);
    let frame = Frame::new(&buckets, ticks.last().copied().unwrap_or(1));
    let at = |i: usize, v: f64| (frame.x(buckets[i].minute_ms), frame.y(v));
    let lines = series
        .iter()
        .map(|s| {
            let (class, colour, width) = (s.class, s.colour, s.width);
            runs(&s.values)
                .into_iter()
                .map(|run| {
                    if run.len() == 1 {
                        let (x, y) = at(run[0].0, run[0].1);
                        view! { <circle class=class cx=coord(x) cy=coord(y) r="2" fill=colour /> }
                            .into_any()
                    } else {
                        let pts = points(run.into_iter().map(|(i, v)| at(i, v)));
                        view! { <polyline class=class fill="none" stroke=colour stroke-width=width points=pts /> }
                            .into_any()
                    }
                })
                .collect_view()
        })
        .collect_view();
    let tips = buckets
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
        .collect();
    let latest = |s: &Series| s.values.iter().rev().flatten().next().copied();
    let any = series.iter().any(|s| latest(s).is_some());
    let empty = (!any).then(|| {
        let text = match (measure, window) {
            (Measure::Latency, Window::Hour) => "no upstream calls in the last hour",
            (Measure::Latency, Window::Day) => "no upstream calls in the last 24 hours",
            (Measure::Latency, Window::Week) => "no upstream calls in the last 7 days",
            (_, Window::Hour) => "nothing completed in the last hour",
            (_, Window::Day) => "nothing completed in the last 24 hours",
            (_, Window::Week) => "nothing completed in the last 7 days",
        };
        empty_note(text)
    });
    let every = window.every();
    let legend = series
        .iter()
        .map(|s| {
            let text = match latest(s) {
                Some(v) => format!(" {} {}", s.name, measure.value(v)),
                None => format!(" {}", s.name),
            };
            view! { <span class=s.class style=format!("color:{}", s.colour)>{text}</span> }
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
    let label = format!("{}, {}", measure.title().to_lowercase(), window.words());
    view! {
        <figure class="chart" data-testid=measure.test_id()>
            <svg width="600" height="160" viewBox=format!("0 0 {W} {H}") role="img" aria-label=label>
                {y_axis(frame, &ticks, measure.axis_label())}
                {x_axis(frame)}
                {marker_lines(frame, &markers, window.per())}
                {lines}
                {empty}
                {hover_bands(frame, tips)}
            </svg>
            <figcaption>
                <strong>{measure.title()}</strong>
                " (latest:" {legend} ")"
                {summary}
            </figcaption>
        </figure>
    }
    // Type-erased: the SVG's element types, nested in the overview's, overflow rustc's
    // query depth limit when the page is compiled to machine code.
    .into_any()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Midnight UTC of some day, so that minute labels are easy to read.
    const DAY: i64 = 19_000 * DAY_MS;

    fn at(h: i64, m: i64) -> i64 {
        DAY + (h * 60 + m) * MINUTE_MS
    }

    /// The last hour as stats() returns it: 60 consecutive minutes ending at `end`.
    fn hour(end: i64, f: impl Fn(usize) -> Bucket) -> Vec<Bucket> {
        (0..60)
            .map(|i| Bucket {
                minute_ms: end - (59 - i as i64) * MINUTE_MS,
                ..f(i)
            })
            .collect()
    }

    #[test]
    fn nice_ticks_are_small_round_steps_from_zero() {
        assert_eq!(nice_ticks(0), [0, 1, 2]);
        assert_eq!(nice_ticks(1), [0, 1, 2]);
        assert_eq!(nice_ticks(4), [0, 1, 2, 3, 4]);
        assert_eq!(nice_ticks(5), [0, 2, 4, 6]);
        assert_eq!(nice_ticks(10), [0, 5, 10]);
        assert_eq!(nice_ticks(11), [0, 5, 10, 15]);
        assert_eq!(nice_ticks(37), [0, 10, 20, 30, 40]);
        assert_eq!(nice_ticks(101), [0, 50, 100, 150]);
        assert_eq!(nice_ticks(1234), [0, 500, 1000, 1500]);
        assert_eq!(nice_ticks(20_000), [0, 5000, 10_000, 15_000, 20_000]);
    }

    #[test]
    fn nice_ticks_hold_for_every_max() {
        let maxes = (0..5000).chain([u64::MAX / 3, u64::MAX - 1, u64::MAX]);
        for max in maxes {
            let t = nice_ticks(max);
            assert!((3..=5).contains(&t.len()), "{max}: {t:?}");
            assert_eq!(t[0], 0);
            assert!(*t.last().unwrap() >= max, "{max}: {t:?}");
            let step = t[1];
            let mut mantissa = step;
            while mantissa.is_multiple_of(10) {
                mantissa /= 10;
            }
            assert!([1, 2, 5].contains(&mantissa), "{max}: step {step}");
            if max < u64::MAX / 2 {
                assert!(t.windows(2).all(|w| w[1] - w[0] == step), "{max}: {t:?}");
            }
        }
    }

    #[test]
    fn utc_times() {
        assert_eq!(utc_hhmm(0), "00:00");
        assert_eq!(utc_hhmm(at(14, 5)), "14:05");
        assert_eq!(utc_hhmm(at(23, 59) + 59_999), "23:59");
        assert_eq!(utc_hhmm(1_700_000_000_000), "22:13");
        assert_eq!(utc_hhmm(-MINUTE_MS), "23:59");
    }

    #[test]
    fn time_labels_fall_on_round_minutes() {
        let labels = |t0, t1| {
            time_ticks(t0, t1)
                .into_iter()
                .map(utc_hhmm)
                .collect::<Vec<_>>()
        };
        assert_eq!(
            labels(at(14, 1), at(15, 0)),
            ["14:10", "14:20", "14:30", "14:40", "14:50", "15:00"]
        );
        assert_eq!(
            labels(at(13, 7), at(14, 6)),
            ["13:10", "13:20", "13:30", "13:40", "13:50", "14:00"]
        );
        assert_eq!(
            labels(at(9, 0), at(9, 4)),
            ["09:00", "09:01", "09:02", "09:03", "09:04"]
        );
        assert_eq!(
            labels(at(9, 0), at(9, 9)),
            ["09:00", "09:02", "09:04", "09:06", "09:08"]
        );
        assert_eq!(labels(at(9, 3), at(9, 3)), ["09:03"]);
        // A whole day (the most stats() returns) gets a label every 4 hours.
        assert_eq!(
            labels(at(0, 0), at(23, 59)),
            ["00:00", "04:00", "08:00", "12:00", "16:00", "20:00"]
        );
        // Never more than six, and a time between minutes still gets its label.
        assert_eq!(time_ticks(at(9, 3) + 5, at(9, 3) + 10), [at(9, 3) + 5]);
        assert!(time_ticks(at(1, 0), at(0, 0)).is_empty());
        for minutes in 0..3000 {
            let n = time_ticks(at(0, 17), at(0, 17) + minutes * MINUTE_MS).len() as i64;
            assert!((1..=MAX_TIME_LABELS).contains(&n), "{minutes}: {n}");
        }
        assert!(time_ticks(i64::MIN, i64::MAX).len() as i64 <= MAX_TIME_LABELS);
    }

    #[test]
    fn labels() {
        assert_eq!(count_label(0), "0");
        assert_eq!(count_label(850), "850");
        assert_eq!(count_label(1500), "1.5k");
        assert_eq!(count_label(20_000), "20k");
        assert_eq!(count_label(2_000_000), "2M");
        assert_eq!(count_label(5_000_000_000), "5G");
        assert_eq!(per_minute_label(0), "0");
        assert_eq!(per_minute_label(50), "50/min");
        assert_eq!(per_minute_label(1500), "1.5k/min");
        assert_eq!(ms_label(0), "0");
        assert_eq!(ms_label(200), "200ms");
        assert_eq!(ms_label(1000), "1s");
        assert_eq!(ms_label(1500), "1.5s");
        assert_eq!(ms_label(100_000), "100s");
    }

    #[test]
    fn frame_maps_minutes_and_values_into_the_plot() {
        let buckets = hour(at(15, 0), |_| Bucket::default());
        let f = Frame::new(&buckets, 20);
        assert_eq!(f.x(at(14, 1)), LEFT);
        assert_eq!(f.x(at(15, 0)), RIGHT);
        assert!((f.x(at(14, 30)) - (LEFT + 29.0 / 59.0 * (RIGHT - LEFT))).abs() < 1e-9);
        assert_eq!(f.y(0.0), BOTTOM);
        assert_eq!(f.y(20.0), TOP);
        assert_eq!(f.y(10.0), (TOP + BOTTOM) / 2.0);
        assert!((f.half_band(60) * 2.0 * 59.0 - (RIGHT - LEFT)).abs() < 1e-9);

        // One bucket sits in the middle; none, or a top of 0, gives no NaN.
        let one = Frame::new(&buckets[..1], 0);
        assert_eq!(one.x(at(14, 1)), (LEFT + RIGHT) / 2.0);
        assert_eq!(one.y(0.0), BOTTOM);
        let none = Frame::new(&[], 0);
        assert_eq!(none.span, None);
        assert!(none.x(0).is_finite() && none.y(0.0).is_finite() && none.half_band(0).is_finite());
    }

    #[test]
    fn polylines_and_gaps() {
        assert_eq!(
            points([(52.0, 138.0), (60.25, 10.0)]),
            "52.0,138.0 60.2,10.0"
        );
        assert_eq!(points([]), "");
        let v = [None, Some(1.0), Some(2.0), None, None, Some(3.0), Some(4.0)];
        assert_eq!(
            runs(&v),
            [vec![(1, 1.0), (2, 2.0)], vec![(5, 3.0), (6, 4.0)]]
        );
        assert!(runs(&[None, None]).is_empty());
    }

    fn html(view: impl IntoView) -> String {
        let owner = Owner::new();
        owner.with(|| view.into_view().to_html())
    }

    #[test]
    fn renders_the_same_markup_every_time_without_nan() {
        let buckets = hour(at(15, 0), |i| Bucket {
            completed: i as u64 % 7,
            failed: u64::from(i % 10 == 0),
            polled: 12 + i as u64 % 5,
            ttr_sum_ms: if i % 3 == 0 { 0 } else { 1500 * i as u64 },
            ttr_count: if i % 3 == 0 { 0 } else { i as u64 },
            ..Bucket::default()
        });
        let tp = || html(view! { <ThroughputChart buckets=buckets.clone() /> });
        let ttr = || html(view! { <DistributionChart buckets=buckets.clone() /> });
        let (a, b) = (tp(), ttr());
        assert_eq!(a, tp());
        assert_eq!(b, ttr());
        for s in [&a, &b] {
            assert!(!s.contains("NaN") && !s.contains("inf"), "{s}");
            assert_eq!(s.matches("<title>").count(), 60, "{s}");
            assert!(s.contains(">14:10<") && s.contains(">15:00<"), "{s}");
            assert!(s.contains("(times in UTC)"), "{s}");
        }
        assert!(a.contains("data-testid=\"throughput-chart\""));
        assert!(a.contains(">20/min<"), "{a}");
        assert!(
            a.contains("<title>14:01 UTC · 0 completed, 1 failed, 12 polled</title>"),
            "{a}"
        );
        for class in ["s-completed", "s-failed", "s-polled"] {
            assert_eq!(
                a.matches(&format!("class=\"{class}\"")).count(),
                2,
                "{class}"
            );
        }
        assert!(b.contains("data-testid=\"ttr-chart\""));
        assert!(b.contains(">1.5s<"), "{b}");
        assert!(
            b.contains("<title>14:02 UTC · time to result average 1.5 s over 1 completed</title>"),
            "{b}"
        );
        assert!(b.contains("<title>14:04 UTC · nothing completed</title>"));
    }

    #[test]
    fn distribution_charts_draw_p50_p95_p99_and_say_them_on_hover() {
        let p = |p50, p95, p99| {
            Some(Percentiles {
                p50,
                p95,
                p99,
                count: 9,
            })
        };
        let buckets = hour(at(15, 0), |i| Bucket {
            latency: p(120, 900, 2500),
            polls: if i >= 30 { p(1, 3, 7) } else { None },
            ..Bucket::default()
        });
        let chart = |measure| html(view! { <DistributionChart buckets=buckets.clone() measure /> });
        let latency = chart(Measure::Latency);
        assert!(
            latency.contains("data-testid=\"latency-chart\""),
            "{latency}"
        );
        assert!(
            latency.contains(
                "<title>14:01 UTC · upstream call latency p50 120 ms, p95 900 ms, p99 2.5 s over 9 calls</title>"
            ),
            "{latency}"
        );
        for class in ["s-p50", "s-p95", "s-p99"] {
            assert_eq!(
                latency
                    .matches(&format!("class=\"{class}\"></polyline>"))
                    .count(),
                1,
                "{class}: {latency}"
            );
        }
        assert!(latency.contains(">3s<"), "the axis reaches p99: {latency}");
        assert!(
            !latency.contains("s-ttr"),
            "no average but for time to result"
        );
        let polls = chart(Measure::Polls);
        assert!(polls.contains("data-testid=\"polls-chart\""));
        assert!(
            polls.contains("<title>14:01 UTC · nothing completed</title>"),
            "{polls}"
        );
        assert!(
            polls.contains(
                "<title>14:31 UTC · polls per task p50 1, p95 3, p99 7 over 9 completed</title>"
            ),
            "{polls}"
        );
        let ttr = chart(Measure::TimeToResult);
        assert!(ttr.contains("nothing completed in the last hour"), "{ttr}");
        for s in [&latency, &polls, &ttr] {
            assert!(!s.contains("NaN") && !s.contains("inf"), "{s}");
        }
    }

    #[test]
    fn a_week_is_labelled_by_date_and_hour() {
        assert_eq!(utc_month_day(0), "01-01");
        assert_eq!(utc_month_day(DAY + 5 * MINUTE_MS), utc_month_day(DAY));
        // 2026-12-01 is day 20788 since 1970; 2024-02-29 is day 19782.
        assert_eq!(utc_month_day(20_788 * DAY_MS), "12-01");
        assert_eq!(utc_month_day(19_782 * DAY_MS + DAY_MS - 1), "02-29");
        assert_eq!(Window::parse("7d"), Window::Week);
        assert_eq!(Window::parse(Window::Week.param()), Window::Week);
        let start = 20_788 * DAY_MS;
        let week: Vec<Bucket> = (0..168)
            .map(|i| Bucket {
                minute_ms: start + i * 60 * MINUTE_MS,
                completed: 60,
                ..Bucket::default()
            })
            .collect();
        let html = html(view! { <ThroughputChart buckets=week window=Window::Week /> });
        assert!(
            html.contains(">12-03<") && html.contains(">12-07<"),
            "{html}"
        );
        assert!(!html.contains(">00:00<"), "{html}");
        assert!(
            html.contains(
                "<title>12-01 05:00–06:00 UTC · 60 completed, 0 failed, 0 polled</title>"
            ),
            "{html}"
        );
        assert!(
            html.contains(">1/min<"),
            "per-minute rate of an hour's point: {html}"
        );
    }

    #[test]
    fn renders_empty_and_idle_hours() {
        let idle = hour(at(15, 0), |_| Bucket::default());
        for buckets in [Vec::new(), idle] {
            let a = html(view! { <ThroughputChart buckets=buckets.clone() /> });
            let b = html(view! { <DistributionChart buckets=buckets.clone() /> });
            for s in [&a, &b] {
                assert!(!s.contains("NaN") && !s.contains("inf"), "{s}");
            }
            assert!(a.contains(">2/min<"), "{a}");
            assert!(b.contains("nothing completed in the last hour"), "{b}");
            assert!(!b.contains("<polyline"), "{b}");
        }
    }
}

#[cfg(test)]
mod marker_tests {
    use super::*;

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
        let html = view! { <ThroughputChart buckets=buckets.clone() window=Window::Hour markers=markers.clone() /> }.to_html();
        assert_eq!(
            html.matches("data-testid=\"chart-marker\"").count(),
            2,
            "{html}"
        );
        assert!(html.contains(">paused<") && html.contains(">resumed<"));
        assert!(!html.contains(">started<"));
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
        let html = view! { <ThroughputChart buckets=quarters window=Window::Day markers=late /> }
            .to_html();
        assert_eq!(
            html.matches("data-testid=\"chart-marker\"").count(),
            1,
            "{html}"
        );
    }
}
