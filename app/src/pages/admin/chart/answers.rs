//! The answers charts: how asks were answered per point — from a fresh stored result, a stale
//! one, a remembered failure (negative) or nothing stored (a miss: a task created or joined) —
//! with the refreshes started ahead and the refreshes that failed; the hit ratio per point;
//! and the same figures as a table and in words, for whoever does not read the lines.
//!
//! The hit ratio is (fresh + stale + negative) / every answer: the share of asks answered
//! from the store without waiting for the upstream.

use leptos::prelude::*;

use super::parts::*;
use super::readout::Pointer;
use super::scale::*;
use super::{Marker, Window};
use model::ThroughputBucket as Bucket;

/// The counts drawn per point; refreshes are dashed: they are work started, not answers.
const KINDS: [Series; 6] = [
    Series {
        name: "fresh",
        one: "fresh",
        class: "s-fresh",
        dash: None,
        of: |b| b.fresh,
    },
    Series {
        name: "stale",
        one: "stale",
        class: "s-stale",
        dash: None,
        of: |b| b.stale,
    },
    Series {
        name: "negative",
        one: "negative",
        class: "s-negative",
        dash: None,
        of: |b| b.negative,
    },
    Series {
        name: "miss",
        one: "miss",
        class: "s-miss",
        dash: None,
        of: |b| b.miss,
    },
    Series {
        name: "refreshed ahead",
        one: "refreshed ahead",
        class: "s-ahead",
        dash: Some("5 3"),
        of: |b| b.ahead,
    },
    Series {
        name: "refresh failed",
        one: "refresh failed",
        class: "s-refresh-failed",
        dash: Some("2 2"),
        of: |b| b.refresh_failed,
    },
];

/// The window's counters summed (its histograms are not).
pub fn window_total(buckets: &[Bucket]) -> Bucket {
    let mut t = Bucket::default();
    for b in buckets {
        t.add_counts(b);
    }
    t
}

/// The hit ratio of a span: "87.5 %", rounded down so that "100 %" means every answer was a
/// hit; "—" without answers.
pub fn hit_ratio_words(b: &Bucket) -> String {
    match b.hit_ratio_pct() {
        Some(r) => format!("{} %", one_decimal((r * 10.0).floor() / 10.0)),
        None => "—".into(),
    }
}

/// The answers of a span in words: "700 of 800 answers from the store (600 fresh, 80 stale,
/// 20 negative), 100 misses; refreshes: 12 started ahead, 3 failed".
pub fn answers_words(b: &Bucket) -> String {
    let refreshes = format!(
        "refreshes: {} started ahead, {} failed",
        b.ahead, b.refresh_failed
    );
    if b.answers() == 0 {
        return format!("no answers; {refreshes}");
    }
    format!(
        "{} of {} answers from the store ({} fresh, {} stale, {} negative), {} {}; {refreshes}",
        b.hits(),
        b.answers(),
        b.fresh,
        b.stale,
        b.negative,
        b.miss,
        if b.miss == 1 { "miss" } else { "misses" }
    )
}

/// A point's counts for its tooltip: "4 fresh, 1 stale, 0 negative, 2 miss, 0 refreshed
/// ahead, 0 refresh failed".
fn counts_words(b: &Bucket) -> String {
    KINDS
        .iter()
        .map(|k| k.words(b))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Answers per minute by kind (over a wider point: its average per minute, the tooltip giving
/// the point's totals), and the refreshes dashed.
#[component]
pub fn AnswersChart(
    buckets: Vec<Bucket>,
    #[prop(optional)] window: Window,
    #[prop(optional)] markers: Vec<Marker>,
) -> AnyView {
    let per = window.per() as f64;
    let shown: Vec<&Series> = KINDS.iter().collect();
    let ticks = nice_ticks((series_max(&buckets, &shown) as f64 / per).ceil() as u64);
    let frame = Frame::new(&buckets, ticks.last().copied().unwrap_or(1));
    let lines = series_lines(frame, &buckets, &shown, per);
    let keys = legend(shown.iter().map(|s| s.key()));
    let tips = buckets
        .iter()
        .map(|b| {
            let tip = format!(
                "{} UTC · {} · hit ratio {}",
                window.span_label(b.minute_ms),
                counts_words(b),
                hit_ratio_words(b)
            );
            (b.minute_ms, tip)
        })
        .collect();
    let pointer = Pointer::new("answers-chart", frame, tips);
    let empty = buckets.is_empty().then(|| empty_note("no data"));
    let summary = match last_complete(&buckets) {
        Some(b) => {
            let legend = KINDS
                .iter()
                .enumerate()
                .map(|(i, k)| {
                    view! {
                        {(i > 0).then_some(", ")}
                        <span class=format!("{} num", k.class)>{k.words(b)}</span>
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
    let label = format!("answers per minute by freshness, {}", window.words());
    view! {
        <figure class="chart" data-testid="answers-chart">
            {keys}
            {chart_svg(
                label,
                pointer,
                view! { {y_axis(frame, &ticks, per_minute_label)} {x_axis(frame)} {marker_lines(frame, &markers, window.per())} }.into_any(),
                lines,
                view! { {empty} }.into_any(),
            )}
            <figcaption>
                {format!("Answers per minute, {} (times in UTC) · ", window.words())}
                {summary}
            </figcaption>
        </figure>
    }
    // Type-erased, as the other charts: nested in the overview's, the SVG's element types
    // overflow rustc's query depth limit.
    .into_any()
}

/// The hit ratio per point, 0 to 100 %; points without answers are gaps.
#[component]
pub fn HitRatioChart(
    buckets: Vec<Bucket>,
    #[prop(optional)] window: Window,
    #[prop(optional)] markers: Vec<Marker>,
) -> AnyView {
    let ticks = [0, 25, 50, 75, 100];
    let frame = Frame::new(&buckets, 100);
    let values: Vec<Option<f64>> = buckets.iter().map(Bucket::hit_ratio_pct).collect();
    let (lines, dots) = run_lines(frame, &buckets, &values, "s-hit-ratio", "2");
    let tips = buckets
        .iter()
        .map(|b| {
            let tip = format!(
                "{} UTC · hit ratio {} ({} of {} answers)",
                window.span_label(b.minute_ms),
                hit_ratio_words(b),
                b.hits(),
                b.answers()
            );
            (b.minute_ms, tip)
        })
        .collect();
    let pointer = Pointer::new("hit-ratio-chart", frame, tips);
    let total = window_total(&buckets);
    let empty = values
        .iter()
        .all(Option::is_none)
        .then(|| empty_note("no answers"));
    let label = format!("hit ratio {}, {}", window.every(), window.words());
    view! {
        <figure class="chart" data-testid="hit-ratio-chart">
            {legend([Key { name: "hit ratio", class: "s-hit-ratio", dash: None, width: "2" }])}
            {chart_svg(
                label,
                pointer,
                view! { {y_axis(frame, &ticks, percent_label)} {x_axis(frame)} {marker_lines(frame, &markers, window.per())} }.into_any(),
                lines,
                view! { {dots} {empty} }.into_any(),
            )}
            <figcaption>
                {format!("Hit ratio {}, {} (times in UTC) · over the window: ", window.every(), window.words())}
                <span class="s-hit-ratio num">{hit_ratio_words(&total)}</span>
                <span class="num">{format!(" ({} of {} answers)", total.hits(), total.answers())}</span>
            </figcaption>
        </figure>
    }
    .into_any()
}

/// The answers charts' figures as a table, one row per point that counted anything (idle
/// points are left out), folded away under its summary.
#[component]
pub fn AnswersTable(buckets: Vec<Bucket>, #[prop(optional)] window: Window) -> AnyView {
    let rows: Vec<Bucket> = buckets
        .into_iter()
        .filter(|b| b.answers() + b.ahead + b.refresh_failed > 0)
        .collect();
    let empty = rows.is_empty();
    let body = rows
        .into_iter()
        .map(|b| {
            let cells = KINDS
                .iter()
                .map(|k| view! { <td class="num">{(k.of)(&b)}</td> })
                .collect_view();
            view! {
                <tr>
                    <td class="num">{window.span_label(b.minute_ms)}</td>
                    {cells}
                    <td class="num">{hit_ratio_words(&b)}</td>
                </tr>
            }
        })
        .collect_view();
    let head = KINDS
        .iter()
        .map(|k| view! { <th scope="col">{k.name}</th> })
        .collect_view();
    view! {
        <details class="answers-table" data-testid="answers-table">
            <summary>{format!("Answers {} as a table, {} (points without any are left out)", window.every(), window.words())}</summary>
            {empty.then(|| view! { <p class="empty">"No answers and no refreshes in this window."</p> })}
            <div class="table-scroll" class:hidden=empty>
                <table>
                    <thead>
                        <tr><th scope="col">"UTC"</th>{head}<th scope="col">"hit ratio"</th></tr>
                    </thead>
                    <tbody>{body}</tbody>
                </table>
            </div>
        </details>
    }
    .into_any()
}

/// Y label of the hit ratio chart: "0", "50 %", "100 %".
fn percent_label(v: u64) -> String {
    if v == 0 {
        "0".into()
    } else {
        format!("{v} %")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(fresh: u64, stale: u64, negative: u64, miss: u64) -> Bucket {
        Bucket {
            fresh,
            stale,
            negative,
            miss,
            ..Bucket::default()
        }
    }

    #[test]
    fn hit_ratio_counts_every_answer_from_the_store_and_rounds_down() {
        assert_eq!(hit_ratio_words(&b(6, 1, 1, 2)), "80 %");
        assert_eq!(hit_ratio_words(&b(1, 0, 0, 2)), "33.3 %");
        // 1999 of 2000 is not "100 %".
        assert_eq!(hit_ratio_words(&b(1999, 0, 0, 1)), "99.9 %");
        assert_eq!(hit_ratio_words(&b(0, 3, 0, 0)), "100 %");
        assert_eq!(hit_ratio_words(&b(0, 0, 0, 5)), "0 %");
        assert_eq!(hit_ratio_words(&Bucket::default()), "—");
    }

    #[test]
    fn the_window_in_words_sums_its_points() {
        let mut one = b(600, 80, 20, 99);
        one.ahead = 12;
        let mut two = b(0, 0, 0, 1);
        two.refresh_failed = 3;
        let t = window_total(&[one, two]);
        assert_eq!(
            answers_words(&t),
            "700 of 800 answers from the store (600 fresh, 80 stale, 20 negative), 100 misses; \
             refreshes: 12 started ahead, 3 failed"
        );
        assert_eq!(
            answers_words(&Bucket::default()),
            "no answers; refreshes: 0 started ahead, 0 failed"
        );
    }
}
