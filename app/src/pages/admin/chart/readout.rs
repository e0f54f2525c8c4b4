//! Reading a chart's values. Every point has a band over the plot's full height whose
//! `<title>` is the native tooltip: what a page without JavaScript (and a test) reads. In the
//! browser the point the pointer is on, or the one chosen from the keyboard (the chart takes
//! focus; ← and → step, Home and End jump, Esc hides), also gets a readout drawn beside it —
//! a guide line and a box of its values, one a line — and its words go to a polite live
//! region for screen readers.
//!
//! The readout is one element per chart, made in the browser on demand: one per point in the
//! markup would repeat every tooltip in a box (~400 bytes a point, four charts of 168 points
//! on a week's overview).

use leptos::prelude::*;

use super::scale::*;

/// An average character of the readout's 12 px text (digits and lower case run about 6.2 px
/// in the stylesheet's sans-serif fonts): the box is sized from its longest line.
const CHAR_PX: f64 = 6.8;
/// The readout's line height.
const LINE_PX: f64 = 15.0;
/// Inner margin of the box, and its gap to the guide line.
const PAD_PX: f64 = 6.0;

/// What the readouts of a page's charts show, kept above the charts: a live page renders them
/// again at every change (each second under load), which makes each chart's state anew, and
/// the point being read, and the chart holding the keyboard, must outlive that. The overview
/// provides one; a chart without one keeps its own.
#[derive(Clone, Copy)]
pub struct ChartFocus {
    /// The chart (its test id) and the time of the point its readout shows.
    chosen: RwSignal<Option<(&'static str, i64)>>,
    /// The chart that has the keyboard.
    focused: RwSignal<Option<&'static str>>,
}

impl ChartFocus {
    pub fn new() -> Self {
        ChartFocus {
            chosen: RwSignal::new(None),
            focused: RwSignal::new(None),
        }
    }
}

impl Default for ChartFocus {
    fn default() -> Self {
        Self::new()
    }
}

/// A chart's points and the page's [`ChartFocus`].
#[derive(Clone, Copy)]
pub(super) struct Pointer {
    /// The chart's test id, its name in the [`ChartFocus`].
    id: &'static str,
    focus: ChartFocus,
    /// Each point's time and tooltip, oldest first.
    tips: StoredValue<Vec<(i64, String)>>,
    frame: Frame,
}

impl Pointer {
    pub(super) fn new(id: &'static str, frame: Frame, tips: Vec<(i64, String)>) -> Self {
        Pointer {
            id,
            focus: use_context::<ChartFocus>().unwrap_or_default(),
            tips: StoredValue::new(tips),
            frame,
        }
    }

    /// The chart's key handler: moves the readout, or leaves the key to the page.
    pub(super) fn key(self, ev: leptos::ev::KeyboardEvent) {
        let n = self.tips.with_value(Vec::len);
        if let Some(next) = step(self.at_untracked(), n, &ev.key()) {
            ev.prevent_default();
            self.choose(next);
        }
    }

    /// The index of the point chosen in this chart.
    fn at_untracked(self) -> Option<usize> {
        let (id, t) = self.focus.chosen.get_untracked()?;
        (id == self.id).then(|| self.index_of(t)).flatten()
    }

    /// The index of the point of time `t`, if the chart still has it.
    fn index_of(self, t: i64) -> Option<usize> {
        self.tips
            .with_value(|v| v.iter().position(|(at, _)| *at == t))
    }

    fn choose(self, i: Option<usize>) {
        let chosen = i.and_then(|i| {
            self.tips
                .with_value(|v| v.get(i).map(|(t, _)| (self.id, *t)))
        });
        self.focus.chosen.set(chosen);
    }

    pub(super) fn hide(self) {
        if self
            .focus
            .chosen
            .with_untracked(|c| c.is_some_and(|(id, _)| id == self.id))
        {
            self.focus.chosen.set(None);
        }
    }

    /// The chart takes or gives up the keyboard (a rebuild removes it without a blur).
    pub(super) fn focused(self, has: bool) {
        if has {
            self.focus.focused.set(Some(self.id));
        } else if self.has_keyboard() {
            self.focus.focused.set(None);
            self.hide();
        }
    }

    /// Whether this chart had the keyboard (before a rebuild).
    pub(super) fn has_keyboard(self) -> bool {
        self.focus.focused.get_untracked() == Some(self.id)
    }

    /// The chosen point's time and tooltip.
    fn chosen(self) -> Option<(i64, String)> {
        let (id, t) = self.focus.chosen.get()?;
        let i = (id == self.id).then(|| self.index_of(t)).flatten()?;
        self.tips.with_value(|v| v.get(i).cloned())
    }
}

/// Where a key moves the readout among `n` points: Some(new choice), or None for a key that
/// is not the chart's. From no choice an arrow starts at the last complete point (the one
/// the caption reads; the last is still in progress).
pub(super) fn step(at: Option<usize>, n: usize, key: &str) -> Option<Option<usize>> {
    if n == 0 {
        return None;
    }
    let start = n.saturating_sub(2);
    Some(match key {
        "ArrowRight" => Some(at.map_or(start, |i| (i + 1).min(n - 1))),
        "ArrowLeft" => Some(at.map_or(start, |i| i.saturating_sub(1))),
        "Home" => Some(0),
        "End" => Some(n - 1),
        "Escape" => None,
        _ => return None,
    })
}

/// A tooltip as the readout's lines: its parts (split at " · ") and their items (at ", "):
/// "14:01 UTC", "0 completed", "1 failed call", …
pub(super) fn readout_lines(tip: &str) -> Vec<&str> {
    tip.split(" · ").flat_map(|part| part.split(", ")).collect()
}

/// One invisible band per point over the plot's full height: its `<title>` is the tooltip,
/// and the pointer over it chooses it for the readout.
pub(super) fn hover_bands(p: Pointer) -> impl IntoView {
    let n = p.tips.with_value(Vec::len);
    let half = p.frame.half_band(n);
    let bands = p.tips.with_value(|tips| {
        tips.iter()
            .enumerate()
            .map(|(i, (t, tip))| {
                let x = p.frame.x(*t);
                let (l, r) = ((x - half).max(LEFT), (x + half).min(RIGHT));
                view! {
                    <rect x=pct(l) y=coord(TOP) width=pct(r - l) height=coord(BOTTOM - TOP)
                        fill="#000" fill-opacity="0" on:pointerenter=move |_| p.choose(Some(i))>
                        <title>{tip.clone()}</title>
                    </rect>
                }
            })
            .collect_view()
    });
    view! { <g class="tips" on:pointerleave=move |_| p.hide()>{bands}</g> }
}

/// The chosen point's readout: a guide line at the point and a box of its values beside it,
/// right of it in the chart's left half, left of it in the right half.
pub(super) fn readout(p: Pointer) -> impl IntoView {
    move || {
        p.chosen().map(|(t, tip)| {
            let x = p.frame.x(t);
            let lines = readout_lines(&tip);
            let widest = lines.iter().map(|l| l.chars().count()).max().unwrap_or(0);
            let w = widest as f64 * CHAR_PX + 2.0 * PAD_PX;
            let h = lines.len() as f64 * LINE_PX + PAD_PX;
            let shift = if x > 50.0 { -(w + PAD_PX) } else { PAD_PX };
            // pointer-events none: over the bands, the readout would take the pointer from
            // them (a leave, the readout gone, an enter, again).
            let text = lines
                .into_iter()
                .enumerate()
                .map(|(i, line)| {
                    let dy = if i == 0 { LINE_PX - 2.0 } else { LINE_PX };
                    view! { <tspan x=pct(x) dx=coord(PAD_PX) dy=coord(dy)>{line.to_string()}</tspan> }
                })
                .collect_view();
            view! {
                <g class="readout" data-testid="chart-readout" aria-hidden="true" pointer-events="none">
                    <line class="readout-guide" x1=pct(x) y1=coord(TOP) x2=pct(x) y2=coord(BOTTOM) stroke-width="1" />
                    <g transform=format!("translate({shift:.1} 0)")>
                        <rect class="readout-box" x=pct(x) y=coord(TOP) width=coord(w) height=coord(h) rx="4" />
                        <text y=coord(TOP) font-size=FONT_PX>{text}</text>
                    </g>
                </g>
            }
        })
    }
}

/// The chosen point's words for screen readers (the readout itself is hidden from them).
pub(super) fn live_words(p: Pointer) -> impl IntoView {
    view! {
        <p class="sr-only" aria-live="polite" data-testid="chart-readout-words">
            {move || p.chosen().map(|(_, tip)| tip).unwrap_or_default()}
        </p>
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::html;
    use super::super::{DistributionChart, ThroughputChart};
    use super::*;
    use model::ThroughputBucket as Bucket;

    #[test]
    fn keys_step_through_the_points_from_the_last_complete_one() {
        // Nothing chosen: an arrow starts at the last complete point (3 of 0..=4).
        assert_eq!(step(None, 5, "ArrowLeft"), Some(Some(3)));
        assert_eq!(step(None, 5, "ArrowRight"), Some(Some(3)));
        assert_eq!(step(Some(3), 5, "ArrowRight"), Some(Some(4)));
        assert_eq!(
            step(Some(4), 5, "ArrowRight"),
            Some(Some(4)),
            "stays at the end"
        );
        assert_eq!(
            step(Some(0), 5, "ArrowLeft"),
            Some(Some(0)),
            "stays at the start"
        );
        assert_eq!(step(Some(2), 5, "Home"), Some(Some(0)));
        assert_eq!(step(Some(2), 5, "End"), Some(Some(4)));
        assert_eq!(step(Some(2), 5, "Escape"), Some(None), "hidden");
        // Other keys are the page's (Tab leaves the chart), and an empty chart has none.
        assert_eq!(step(Some(2), 5, "Tab"), None);
        assert_eq!(step(None, 0, "ArrowLeft"), None);
        assert_eq!(step(None, 1, "ArrowLeft"), Some(Some(0)));
    }

    #[test]
    fn a_tooltip_reads_one_fact_a_line() {
        assert_eq!(
            readout_lines("14:01 UTC · 0 completed, 1 failed call, 0 dead tasks, 12 polled"),
            [
                "14:01 UTC",
                "0 completed",
                "1 failed call",
                "0 dead tasks",
                "12 polled"
            ]
        );
        assert_eq!(
            readout_lines("14:02 UTC · answers 3 · hit ratio 75 %"),
            ["14:02 UTC", "answers 3", "hit ratio 75 %"]
        );
    }

    #[test]
    fn each_chart_has_a_legend_of_its_lines_and_takes_the_keyboard() {
        let buckets: Vec<Bucket> = (0..3)
            .map(|i| Bucket {
                minute_ms: 1_700_000_040_000 + i * 60_000,
                completed: 2,
                ..Default::default()
            })
            .collect();
        let tp = html(|| view! { <ThroughputChart buckets=buckets.clone() /> });
        let legend = tp
            .split("data-testid=\"chart-legend\"")
            .nth(1)
            .and_then(|rest| rest.split("</ul>").next())
            .unwrap_or_else(|| panic!("a legend: {tp}"));
        for (class, name) in [
            ("s-completed", "completed"),
            ("s-failed", "failed calls"),
            ("s-dead", "dead tasks"),
            ("s-polled", "polled"),
        ] {
            assert!(
                legend.contains(&format!("<li class=\"{class}\">")),
                "{legend}"
            );
            assert!(legend.contains(&format!("</svg>{name}</li>")), "{legend}");
        }
        // The dead tasks' line is dashed in the chart, so in the legend.
        assert_eq!(
            legend.matches("stroke-dasharray=\"6 3\"").count(),
            1,
            "{legend}"
        );
        assert!(tp.contains("tabindex=\"0\""), "{tp}");
        // Drawn in the browser only: the server's markup has no readout, its words are empty.
        assert!(!tp.contains("chart-readout\""), "{tp}");
        let words = tp
            .split("data-testid=\"chart-readout-words\"")
            .nth(1)
            .and_then(|rest| rest.split_once('>')?.1.split("</p>").next())
            .expect("the readout's words");
        assert_eq!(words.trim(), "", "{tp}");
        let ttr = html(|| view! { <DistributionChart buckets=buckets /> });
        assert!(ttr.contains("</svg>average</li>"), "{ttr}");
        assert!(ttr.contains("</svg>p99</li>"), "{ttr}");
    }
}
