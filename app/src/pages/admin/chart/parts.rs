//! What every chart draws around its lines: the SVG itself ([`chart_svg`], with the hover
//! bands and readout of `readout`), its legend, axes with grid, the markers (pause, resume,
//! deploy, breaker opened) grouped when close, the note of an empty chart; and the counted
//! series a line chart plots ([`Series`], [`series_lines`]).

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

use super::readout::{hover_bands, live_words, readout, Pointer};
use super::scale::*;
use model::ThroughputBucket as Bucket;

/// A moment worth seeing on the charts: a pause, a resume, a process start (a deploy).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Marker {
    pub at_ms: i64,
    /// Short: it is drawn at the top of the line, the whole text is its tooltip.
    pub label: String,
}

/// Markers close together, drawn as one line at the first of them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct MarkerGroup {
    pub(super) members: Vec<Marker>,
}

impl MarkerGroup {
    pub(super) fn at_ms(&self) -> i64 {
        self.members[0].at_ms
    }

    /// "paused" for one; "3 × started" for several of a kind, "3 events" for a mix.
    pub(super) fn label(&self) -> String {
        let first = &self.members[0].label;
        match self.members.len() {
            1 => first.clone(),
            n if self.members.iter().all(|m| m.label == *first) => format!("{n} × {first}"),
            n => format!("{n} events"),
        }
    }

    /// Every member, one a line: "14:05 UTC · paused".
    pub(super) fn tip(&self) -> String {
        self.members
            .iter()
            .map(|m| format!("{} UTC · {}", utc_hhmm(m.at_ms), m.label))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// The markers from `t0` up to (not including) `end`, oldest first, grouped: a marker less
/// than [`MARKER_GROUP_SHARE`] of the span after its group's first joins that group, so their
/// lines and labels never pile up into one blob.
pub(super) fn group_markers(markers: &[Marker], t0: i64, end: i64) -> Vec<MarkerGroup> {
    let mut inside: Vec<Marker> = markers
        .iter()
        .filter(|m| m.at_ms >= t0 && m.at_ms < end)
        .cloned()
        .collect();
    inside.sort_by_key(|m| m.at_ms);
    let gap = ((end - t0) as f64 * MARKER_GROUP_SHARE) as i64;
    let mut groups: Vec<MarkerGroup> = Vec::new();
    for m in inside {
        match groups.last_mut() {
            Some(g) if m.at_ms - g.at_ms() < gap => g.members.push(m),
            _ => groups.push(MarkerGroup { members: vec![m] }),
        }
    }
    groups
}

/// Vertical dashed lines at the markers inside the charts' span (up to the end of the last
/// point, which covers `per` minutes from its start), grouped, each with its label: the
/// words, or on a narrow screen (CSS) only the count; the tooltip lists them all.
pub(super) fn marker_lines(frame: Frame, markers: &[Marker], per: usize) -> impl IntoView {
    let Some((t0, t1)) = frame.span else {
        return view! { <g class="markers"></g> }.into_any();
    };
    let lines = group_markers(markers, t0, t1 + per as i64 * MINUTE_MS)
        .into_iter()
        .enumerate()
        .map(|(i, g)| {
            let at = frame.x(g.at_ms());
            let x = pct(at);
            // Labels take two rows in turn: neighbours are at least MARKER_GROUP_SHARE apart,
            // those on one row twice that, wider than a label.
            let y = MARKER_ROWS[i % 2];
            // A label near the right edge is written leftwards from its line.
            let (anchor, dx) = if at > 85.0 { ("end", "-3") } else { ("start", "3") };
            view! {
                <g class="marker" data-testid="chart-marker" data-count=g.members.len()>
                    <line x1=x.clone() y1=coord(y + 3.0) x2=x.clone() y2=coord(BOTTOM) stroke-width="1" stroke-dasharray="3 3" />
                    <text x=x y=coord(y) dx=dx text-anchor=anchor font-size=FONT_PX>
                        <tspan class="marker-words">{g.label()}</tspan>
                        <tspan class="marker-count">{g.members.len()}</tspan>
                    </text>
                    <title>{g.tip()}</title>
                </g>
            }
        })
        .collect_view();
    view! { <g class="markers">{lines}</g> }.into_any()
}

/// Grid lines and labels of the y axis (each label inside the plot at its left, centred on
/// its line); the line at 0 is the x axis.
pub(super) fn y_axis(frame: Frame, ticks: &[u64], label: fn(u64) -> String) -> impl IntoView {
    let rows = ticks
        .iter()
        .map(|&v| {
            let y = frame.y(v as f64);
            let class = if v == 0 { "axis" } else { "grid" };
            view! {
                <line class=class x1=pct(LEFT) y1=coord(y) x2=pct(RIGHT) y2=coord(y) stroke-width="1" />
                <text x="4" y=coord(y + 3.5) font-size=FONT_PX>{label(v)}</text>
            }
        })
        .collect_view();
    view! { <g class="y-axis">{rows}</g> }
}

/// Time labels (UTC HH:MM) under the x axis; the first and last keep inside the chart.
pub(super) fn x_axis(frame: Frame) -> impl IntoView {
    let ticks = frame
        .span
        .map(|(t0, t1)| time_ticks(t0, t1))
        .unwrap_or_default();
    // Over more than two days the labels fall on midnights: dates say more than "00:00".
    let days = frame.span.is_some_and(|(t0, t1)| t1 - t0 > 2 * DAY_MS);
    let labels = ticks
        .into_iter()
        .map(|t| {
            let at = frame.x(t);
            let anchor = match at {
                a if a < 5.0 => "start",
                a if a > 95.0 => "end",
                _ => "middle",
            };
            let label = if days { utc_month_day(t) } else { utc_hhmm(t) };
            view! {
                <line x1=pct(at) y1=coord(BOTTOM) x2=pct(at) y2=coord(BOTTOM + 4.0) stroke-width="1" />
                <text x=pct(at) y=coord(H - 6.0) text-anchor=anchor font-size=FONT_PX>{label}</text>
            }
        })
        .collect_view();
    view! { <g class="x-axis">{labels}</g> }
}

/// A note in the middle of an empty plot.
pub(super) fn empty_note(text: &'static str) -> impl IntoView {
    view! {
        <text class="empty-note" x="50%" y=coord((TOP + BOTTOM) / 2.0) text-anchor="middle" font-size=FONT_PX>{text}</text>
    }
}

/// The chart's SVG, full width and [`H`] pixels high: axes and markers behind, then the
/// polylines in a nested SVG stretched sideways to the width (`0 0 100 H`, their strokes not
/// scaled), then lone points and what lies on top (empty note), the hover bands and the
/// readout of the point chosen (`readout`); the chart takes focus for its keys. After it, the
/// readout's words for screen readers.
pub(super) fn chart_svg(
    label: String,
    pointer: Pointer,
    behind: AnyView,
    lines: AnyView,
    front: AnyView,
) -> impl IntoView {
    let svg = NodeRef::<leptos::svg::Svg>::new();
    // A live update re-renders the chart in place; where it makes a new element instead (the
    // page's data once failed, then came back) while the old one had the keyboard, the new one
    // takes it back (the focus had fallen to the body with the old one).
    Effect::new(move |_| {
        let Some(el) = svg.get() else { return };
        let lost = document()
            .active_element()
            .is_none_or(|a| a.tag_name() == "BODY");
        if pointer.has_keyboard() && lost {
            let _ = el.focus();
        }
    });
    view! {
        <svg class="chart-svg" width="100%" height=coord(H) role="img" aria-label=label
            tabindex="0" aria-keyshortcuts="ArrowLeft ArrowRight Home End Escape" node_ref=svg
            on:keydown=move |ev| pointer.key(ev)
            on:focus=move |_| pointer.focused(true) on:blur=move |_| pointer.focused(false)>
            {behind}
            <svg class="lines" x="0" y="0" width="100%" height=coord(H)
                viewBox=format!("0 0 100 {H}") preserveAspectRatio="none">
                {lines}
            </svg>
            {front}
            {hover_bands(pointer)}
            {readout(pointer)}
        </svg>
        {live_words(pointer)}
    }
}

/// One entry of a chart's legend: a line's name, its colour (CSS class), dash and width.
pub(super) struct Key {
    pub(super) name: &'static str,
    pub(super) class: &'static str,
    pub(super) dash: Option<&'static str>,
    pub(super) width: &'static str,
}

/// The legend over a chart: each line drawn as it is in the chart, with its name.
pub(super) fn legend(keys: impl IntoIterator<Item = Key>) -> impl IntoView {
    let keys = keys
        .into_iter()
        .map(|k| {
            view! {
                <li class=k.class>
                    <svg class="swatch" width="24" height="10" aria-hidden="true">
                        <line x1="1" y1="5" x2="23" y2="5" stroke-width=k.width stroke-dasharray=k.dash />
                    </svg>
                    {k.name}
                </li>
            }
        })
        .collect_view();
    view! { <ul class="chart-legend" data-testid="chart-legend">{keys}</ul> }
}

/// One counted series of a line chart: its words (captions, tooltips, table), its CSS class
/// (its colour, light and dark, is the stylesheet's), dashed or not, and its count.
pub(super) struct Series {
    pub(super) name: &'static str,
    /// The name for one ("1 dead task" of "dead tasks").
    pub(super) one: &'static str,
    pub(super) class: &'static str,
    pub(super) dash: Option<&'static str>,
    pub(super) of: fn(&Bucket) -> u64,
}

impl Series {
    /// Its entry in the legend.
    pub(super) fn key(&self) -> Key {
        Key {
            name: self.name,
            class: self.class,
            dash: self.dash,
            width: "2",
        }
    }

    /// "3 dead tasks", "1 dead task".
    pub(super) fn words(&self, b: &Bucket) -> String {
        let n = (self.of)(b);
        format!("{n} {}", if n == 1 { self.one } else { self.name })
    }
}

/// The largest count of any series at any point.
pub(super) fn series_max(buckets: &[Bucket], series: &[&Series]) -> u64 {
    buckets
        .iter()
        .flat_map(|b| series.iter().map(move |s| (s.of)(b)))
        .max()
        .unwrap_or(0)
}

/// One polyline per series, its count per minute at each point (over a point of `per`
/// minutes, its average per minute).
pub(super) fn series_lines(
    frame: Frame,
    buckets: &[Bucket],
    series: &[&Series],
    per: f64,
) -> AnyView {
    // The point in progress (the current minute, quarter hour or hour) is left out: drawn, its
    // partial count made the line drop towards 0 at the right edge, which read as "traffic
    // stopped" (issue 43 row 8). Its values are in its tooltip.
    let drawn = match buckets.len() {
        0 | 1 => buckets,
        n => &buckets[..n - 1],
    };
    series
        .iter()
        .map(|s| {
            let pts = points(
                drawn
                    .iter()
                    .map(|b| (frame.x(b.minute_ms), frame.y((s.of)(b) as f64 / per))),
            );
            view! {
                <polyline class=s.class fill="none" stroke-width="2" stroke-dasharray=s.dash
                    vector-effect="non-scaling-stroke" points=pts />
            }
        })
        .collect_view()
        .into_any()
}

/// The last point whose span is over: the buckets end with the one in progress (the current
/// minute, quarter hour or hour), which a caption must not read as "0 completed".
pub(super) fn last_complete(buckets: &[Bucket]) -> Option<&Bucket> {
    buckets.len().checked_sub(2).map(|i| &buckets[i])
}

/// A series with gaps (a point without a value breaks the line): its runs as polylines (for
/// [`chart_svg`]'s stretched lines) and its lone values as dots (drawn in the chart itself,
/// so they stay round).
pub(super) fn run_lines(
    frame: Frame,
    buckets: &[Bucket],
    values: &[Option<f64>],
    class: &'static str,
    width: &'static str,
) -> (AnyView, AnyView) {
    let at = |i: usize, v: f64| (frame.x(buckets[i].minute_ms), frame.y(v));
    let (lone, long): (Vec<_>, Vec<_>) = runs(values).into_iter().partition(|r| r.len() == 1);
    let lines = long
        .into_iter()
        .map(|run| {
            let pts = points(run.into_iter().map(|(i, v)| at(i, v)));
            view! {
                <polyline class=class fill="none" stroke-width=width
                    vector-effect="non-scaling-stroke" points=pts />
            }
        })
        .collect_view()
        .into_any();
    let dots = lone
        .into_iter()
        .map(|run| {
            let (x, y) = at(run[0].0, run[0].1);
            view! { <circle class=class cx=pct(x) cy=coord(y) r="3" /> }
        })
        .collect_view()
        .into_any();
    (lines, dots)
}
