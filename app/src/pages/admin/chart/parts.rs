//! What every chart draws around its lines: axes with grid, the hover bands that carry the
//! tooltips, the markers (pause, resume, deploy), the note of an empty chart.

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

use super::scale::*;

/// A moment worth seeing on the charts: a pause, a resume, a process start (a deploy).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Marker {
    pub at_ms: i64,
    /// Short: it is drawn at the top of the line, the whole text is its tooltip.
    pub label: String,
}

/// Vertical dashed lines at the markers inside the charts' span (up to the end of the last
/// point, which covers `per` minutes from its start), each with its label.
pub(super) fn marker_lines(frame: Frame, markers: &[Marker], per: usize) -> impl IntoView {
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

/// Grid lines and labels of the y axis; the line at 0 is the x axis.
pub(super) fn y_axis(frame: Frame, ticks: &[u64], label: fn(u64) -> String) -> impl IntoView {
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
pub(super) fn hover_bands(frame: Frame, tips: Vec<(i64, String)>) -> impl IntoView {
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
pub(super) fn empty_note(text: &'static str) -> impl IntoView {
    view! {
        <text x=coord((LEFT + RIGHT) / 2.0) y=coord((TOP + BOTTOM) / 2.0) text-anchor="middle" font-size="12" fill=LABEL>{text}</text>
    }
}
