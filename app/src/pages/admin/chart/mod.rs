//! Line charts of the last hour, day or week, drawn as inline SVG by us: a few polylines, axes
//! and `<title>` tooltips need no chart library in the wasm, and the server renders them like
//! any other markup. Each is as wide as its container and 220 px high, its text 12 px at any
//! width (no viewBox scales it: `scale`), its colours the stylesheet's (light and dark).
//!
//! Everything drawn is a pure function of the buckets (times come from their `minute_ms`, never
//! from the clock), so the server's markup and the hydrating browser's are the same. Only the
//! value readout of a point is the browser's own, drawn when the pointer or a key asks.
//!
//! One file per job: `scale` (geometry, ticks, labels, the frame), `window` (the span and its
//! points), `parts` (the SVG, legend, axes, grouped markers, empty note, the counted series
//! and the last complete point every caption reads), `readout` (tooltips, and the value
//! readout the pointer or the keyboard opens), `throughput` and `distribution`
//! (one chart each, from its series to its markup), `answers` (answers by freshness and the
//! hit ratio, their table and words).

mod answers;
mod distribution;
#[cfg(test)]
mod marker_tests;
mod parts;
mod readout;
mod scale;
#[cfg(test)]
mod tests;
mod throughput;
mod window;

pub use answers::{
    answers_words, hit_ratio_words, window_total, AnswersChart, AnswersTable, HitRatioChart,
};
pub use distribution::{DistributionChart, Measure};
pub use parts::Marker;
pub use readout::ChartFocus;
pub use throughput::{Plot, ThroughputChart};
pub use window::Window;

use super::ui::duration as ui_duration;
