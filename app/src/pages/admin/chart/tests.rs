//! The charts' unit tests: scales and labels, then the rendered markup of both charts and
//! the markers (pure functions of the buckets, so the same markup every time).

use leptos::prelude::{IntoView, Owner, RenderHtml};

/// The markup of the view `make` builds, built inside a reactive owner (a chart keeps its
/// readout's state in signals).
pub(super) fn html<V: IntoView>(make: impl FnOnce() -> V) -> String {
    let owner = Owner::new();
    owner
        .with(|| make().into_view().to_html())
        .replace("<!>", "")
}

mod scales_and_rendering {
    use super::super::*;
    use super::super::{distribution::*, scale::*};
    use leptos::prelude::*;
    use model::{Percentiles, ThroughputBucket as Bucket};

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

    /// The markup, without the hydration markers (`<!>`) erased components leave behind.
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
        let tp = || super::html(|| view! { <ThroughputChart buckets=buckets.clone() /> });
        let ttr = || super::html(|| view! { <DistributionChart buckets=buckets.clone() /> });
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
            a.contains(
                "<title>14:01 UTC · 0 completed, 1 failed call, 0 dead tasks, 12 polled</title>"
            ),
            "{a}"
        );
        for class in ["s-completed", "s-failed", "s-dead", "s-polled"] {
            assert_eq!(
                a.matches(&format!("class=\"{class}\"></polyline>")).count(),
                1,
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
        let chart = |measure| {
            super::html(|| view! { <DistributionChart buckets=buckets.clone() measure /> })
        };
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
        let html = super::html(|| view! { <ThroughputChart buckets=week window=Window::Week /> });
        assert!(
            html.contains(">12-03<") && html.contains(">12-07<"),
            "{html}"
        );
        assert!(!html.contains(">00:00<"), "{html}");
        assert!(
            html.contains(
                "<title>12-01 05:00–06:00 UTC · 60 completed, 0 failed calls, 0 dead tasks, 0 polled</title>"
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
            let a = super::html(|| view! { <ThroughputChart buckets=buckets.clone() /> });
            let b = super::html(|| view! { <DistributionChart buckets=buckets.clone() /> });
            for s in [&a, &b] {
                assert!(!s.contains("NaN") && !s.contains("inf"), "{s}");
            }
            assert!(a.contains(">2/min<"), "{a}");
            assert!(b.contains("nothing completed in the last hour"), "{b}");
            assert!(!b.contains("<polyline"), "{b}");
        }
    }
}

/// Issue 29 row 5: charts you can read — markers grouped, captions of the last complete
/// minute, dead tasks apart from failed calls, full-width SVG with text ≥ 11 px, the chooser.
mod readable {
    use super::super::parts::{group_markers, last_complete};
    use super::super::scale::*;
    use super::super::*;
    use leptos::prelude::*;
    use model::ThroughputBucket as Bucket;

    const T0: i64 = 19_000 * DAY_MS;

    fn hour(f: impl Fn(i64) -> Bucket) -> Vec<Bucket> {
        (0..60)
            .map(|i| Bucket {
                minute_ms: T0 + i * MINUTE_MS,
                ..f(i)
            })
            .collect()
    }

    fn marker(minute: i64, secs: i64, label: &str) -> Marker {
        Marker {
            at_ms: T0 + minute * MINUTE_MS + secs * 1000,
            label: label.into(),
        }
    }

    /// The markup, without the hydration markers (`<!>`) erased components leave behind.
    #[test]
    fn markers_close_together_are_one_with_their_count_and_all_of_them_in_its_tooltip() {
        // A pause, a deploy and a resume within two minutes (8 % of an hour is 4.8 minutes),
        // then a pause 20 minutes later, and one outside the hour.
        let markers = vec![
            marker(31, 0, "started"),
            marker(30, 5, "paused"),
            marker(32, 40, "resumed"),
            marker(52, 0, "paused"),
            marker(-5, 0, "started"),
        ];
        let groups = group_markers(&markers, T0, T0 + 60 * MINUTE_MS);
        let sizes: Vec<usize> = groups.iter().map(|g| g.members.len()).collect();
        assert_eq!(sizes, [3, 1]);
        assert_eq!(groups[0].at_ms(), T0 + 30 * MINUTE_MS + 5000);
        assert_eq!(groups[0].label(), "3 events");
        assert_eq!(groups[1].label(), "paused");
        assert_eq!(
            groups[0].tip(),
            "00:30 UTC · paused\n00:31 UTC · started\n00:32 UTC · resumed"
        );
        // Several of a kind say so.
        let deploy = [marker(10, 0, "started"), marker(11, 0, "started")];
        assert_eq!(
            group_markers(&deploy, T0, T0 + 60 * MINUTE_MS)[0].label(),
            "2 × started"
        );
        let chart = super::html(
            || view! { <ThroughputChart buckets=hour(|_| Bucket::default()) markers=markers.clone() /> },
        );
        assert_eq!(
            chart.matches("data-testid=\"chart-marker\"").count(),
            2,
            "{chart}"
        );
        assert!(chart.contains("data-count=\"3\""), "{chart}");
        assert!(chart.contains(">3 events<"), "{chart}");
        assert!(
            chart.contains(
                "<title>00:30 UTC · paused\n00:31 UTC · started\n00:32 UTC · resumed</title>"
            ),
            "{chart}"
        );
    }

    #[test]
    fn the_point_in_progress_is_not_drawn() {
        // Steady traffic; the minute in progress has counted 0 so far: the line must not
        // drop to it at the right edge (issue 43 row 8).
        let buckets = hour(|i| Bucket {
            completed: if i == 59 { 0 } else { 5 },
            ..Bucket::default()
        });
        let tp = super::html(|| view! { <ThroughputChart buckets=buckets /> });
        let pts = tp
            .split("<polyline")
            .skip(1)
            .find(|p| p.contains("class=\"s-completed\""))
            .and_then(|line| line.split("points=\"").nth(1)?.split('"').next())
            .expect("the completed line's points");
        assert_eq!(pts.split(' ').count(), 59, "{pts}");
        let ys: std::collections::BTreeSet<&str> = pts
            .split(' ')
            .filter_map(|xy| xy.split(',').nth(1))
            .collect();
        assert_eq!(ys.len(), 1, "a flat line: {pts}");
    }

    #[test]
    fn captions_read_the_last_complete_minute_never_the_one_in_progress() {
        // The last minute has just begun (nothing yet); the one before counted 7 completed.
        let buckets = hour(|i| Bucket {
            completed: if i == 58 { 7 } else { 0 },
            failed: if i == 58 { 5 } else { 0 },
            dead: if i == 58 { 1 } else { 0 },
            polled: if i == 59 { 0 } else { 40 },
            fresh: if i == 58 { 3 } else { 0 },
            ..Bucket::default()
        });
        assert_eq!(last_complete(&buckets), Some(&buckets[58]));
        assert_eq!(last_complete(&buckets[..1]), None);
        let tp = super::html(|| view! { <ThroughputChart buckets=buckets.clone() /> });
        assert!(tp.contains("00:58 (the last complete minute): "), "{tp}");
        assert!(tp.contains(">7 completed<"), "{tp}");
        assert!(
            tp.contains(">5 failed calls<") && tp.contains(">1 dead task<"),
            "{tp}"
        );
        assert!(!tp.contains(">0 completed<"), "{tp}");
        let answers = super::html(|| view! { <AnswersChart buckets=buckets.clone() /> });
        assert!(
            answers.contains("00:58 (the last complete minute): "),
            "{answers}"
        );
        assert!(answers.contains(">3 fresh<"), "{answers}");
        // A day's last quarter hour is in progress too.
        let quarters: Vec<Bucket> = (0..96)
            .map(|i| Bucket {
                minute_ms: T0 + i * 15 * MINUTE_MS,
                completed: if i == 94 { 30 } else { 0 },
                ..Bucket::default()
            })
            .collect();
        let day = super::html(|| view! { <ThroughputChart buckets=quarters window=Window::Day /> });
        assert!(
            day.contains("23:30–23:45 (the last complete quarter hour): ")
                && day.contains(">30 completed<"),
            "{day}"
        );
    }

    #[test]
    fn a_dead_task_is_one_dead_task_beside_its_failed_calls() {
        let buckets = hour(|i| Bucket {
            failed: if i == 10 { 5 } else { 0 },
            dead: if i == 10 { 1 } else { 0 },
            ..Bucket::default()
        });
        let chart = super::html(|| view! { <ThroughputChart buckets /> });
        assert!(
            chart.contains(
                "<title>00:10 UTC · 0 completed, 5 failed calls, 1 dead task, 0 polled</title>"
            ),
            "{chart}"
        );
        assert_eq!(chart.matches("class=\"s-dead\"></polyline>").count(), 1);
    }

    #[test]
    fn charts_are_full_width_with_text_of_at_least_eleven_pixels() {
        let buckets = hour(|i| Bucket {
            completed: i as u64,
            ..Bucket::default()
        });
        let markers = vec![marker(20, 0, "paused")];
        let all = [
            super::html(
                || view! { <ThroughputChart buckets=buckets.clone() markers=markers.clone() /> },
            ),
            super::html(
                || view! { <DistributionChart buckets=buckets.clone() markers=markers.clone() /> },
            ),
            super::html(
                || view! { <AnswersChart buckets=buckets.clone() markers=markers.clone() /> },
            ),
            super::html(
                || view! { <HitRatioChart buckets=buckets.clone() markers=markers.clone() /> },
            ),
        ];
        for chart in &all {
            assert!(chart.contains("<svg width=\"100%\""), "{chart}");
            // The outer SVG has no viewBox: its text is never scaled down with the chart.
            let outer = &chart[chart.find("<svg").unwrap()..];
            let outer = &outer[..outer.find('>').unwrap()];
            assert!(!outer.contains("viewBox"), "{outer}");
            let sizes: Vec<f64> = chart
                .split("font-size=\"")
                .skip(1)
                .map(|s| s[..s.find('"').unwrap()].parse().unwrap())
                .collect();
            assert!(!sizes.is_empty());
            assert!(sizes.iter().all(|s| *s >= 11.0), "{sizes:?}");
            assert!(!chart.contains("<text") || chart.matches("<text").count() == sizes.len());
        }
    }

    #[test]
    fn the_chooser_plots_one_series_alone() {
        assert_eq!(Plot::parse("dead"), Plot::Dead);
        assert_eq!(Plot::parse(Plot::Failed.param()), Plot::Failed);
        assert_eq!(Plot::parse("nonsense"), Plot::All);
        assert_eq!(Plot::Dead.words(), "dead tasks");
        let buckets = hour(|i| Bucket {
            polled: 1000,
            dead: u64::from(i == 3),
            ..Bucket::default()
        });
        let dead =
            super::html(|| view! { <ThroughputChart buckets=buckets.clone() plot=Plot::Dead /> });
        assert_eq!(dead.matches("<polyline").count(), 1, "{dead}");
        assert!(dead.contains("class=\"s-dead\"></polyline>"), "{dead}");
        // Its own scale: one dead task is not flattened under a thousand polls.
        assert!(
            dead.contains(">2/min<") && !dead.contains(">1k/min<"),
            "{dead}"
        );
        let all = super::html(|| view! { <ThroughputChart buckets /> });
        assert_eq!(all.matches("<polyline").count(), 4, "{all}");
    }
}
