//! Geometry and scales: the plot area, round ticks for counts and times,
//! the labels of values and UTC times, and the [`Frame`] mapping (minute, value) to a point.

use model::ThroughputBucket as Bucket;

/// The chart's geometry. The SVG is as wide as its container and [`H`] CSS pixels high, with
/// no viewBox scaling its text: x is in percent of the width (text, grid lines, markers and
/// hover bands take `x="12.5%"`; the lines are drawn in a nested SVG whose viewBox is
/// `0 0 100 H`, stretched sideways only, their strokes not scaled), y in pixels. So labels
/// keep their CSS size at 375 px as at 1920 px.
pub(super) const H: f64 = 220.0;
/// The plot spans [`LEFT`]..[`RIGHT`] percent of the width; the y labels sit inside it, over
/// their grid lines.
pub(super) const LEFT: f64 = 1.0;
pub(super) const RIGHT: f64 = 99.0;
/// Above the plot: the markers' labels (two rows, their baselines), then the top tick's label.
pub(super) const TOP: f64 = 44.0;
pub(super) const MARKER_ROWS: [f64; 2] = [14.0, 30.0];
pub(super) const BOTTOM: f64 = H - 24.0;
/// The size of every text in the charts, in CSS pixels (≥ 11 px as rendered, issue 29).
pub(super) const FONT_PX: &str = "12";
/// Markers closer than this share of the span are drawn as one, with their count.
pub(super) const MARKER_GROUP_SHARE: f64 = 0.08;

pub(super) const MINUTE_MS: i64 = 60_000;
pub(super) const DAY_MS: i64 = 86_400_000;
/// At most this many time labels under the x axis.
pub(super) const MAX_TIME_LABELS: i64 = 6;

/// Y axis ticks from 0: 3 to 5 multiples of a 1, 2 or 5 × 10ⁿ step, the last one ≥ `max`.
pub(super) fn nice_ticks(max: u64) -> Vec<u64> {
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
pub(super) fn time_ticks(t0: i64, t1: i64) -> Vec<i64> {
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
pub(super) fn utc_month_day(ms: i64) -> String {
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
pub(super) fn utc_hhmm(ms: i64) -> String {
    let minutes = ms.rem_euclid(DAY_MS) / MINUTE_MS;
    format!("{:02}:{:02}", minutes / 60, minutes % 60)
}

/// `x` with one decimal, without a trailing ".0".
pub(super) fn one_decimal(x: f64) -> String {
    let s = format!("{x:.1}");
    match s.strip_suffix(".0") {
        Some(whole) => whole.to_owned(),
        None => s,
    }
}

/// A count as "850", "1.5k", "2M", "3G".
pub(super) fn count_label(n: u64) -> String {
    match n {
        0..1_000 => n.to_string(),
        1_000..1_000_000 => format!("{}k", one_decimal(n as f64 / 1e3)),
        1_000_000..1_000_000_000 => format!("{}M", one_decimal(n as f64 / 1e6)),
        _ => format!("{}G", one_decimal(n as f64 / 1e9)),
    }
}

/// Y label of the throughput chart: "0", "50/min", "1.5k/min".
pub(super) fn per_minute_label(n: u64) -> String {
    if n == 0 {
        "0".into()
    } else {
        format!("{}/min", count_label(n))
    }
}

/// Y label of the time-to-result chart: "0", "200ms", "1.5s", "100s".
pub(super) fn ms_label(ms: u64) -> String {
    match ms {
        0 => "0".into(),
        1..1_000 => format!("{ms}ms"),
        _ => format!("{}s", one_decimal(ms as f64 / 1e3)),
    }
}

/// A y coordinate (CSS pixels) as it goes into the markup.
pub(super) fn coord(v: f64) -> String {
    format!("{v:.1}")
}

/// An x coordinate (percent of the width) as it goes into the markup: "12.34%".
pub(super) fn pct(v: f64) -> String {
    format!("{v:.2}%")
}

/// Maps minutes and values to the plot area.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Frame {
    /// First and last minute of the buckets; `None` without buckets.
    pub(super) span: Option<(i64, i64)>,
    /// Value at the top of the plot (the last y tick, never 0).
    pub(super) top: f64,
}

impl Frame {
    pub(super) fn new(buckets: &[Bucket], top: u64) -> Self {
        let t0 = buckets.iter().map(|b| b.minute_ms).min();
        let t1 = buckets.iter().map(|b| b.minute_ms).max();
        Frame {
            span: t0.zip(t1),
            top: top.max(1) as f64,
        }
    }

    /// X of minute `t`: first minute at the left, last at the right, a lone one in the middle.
    pub(super) fn x(&self, t: i64) -> f64 {
        match self.span {
            Some((t0, t1)) if t1 > t0 => {
                let f = (t as f64 - t0 as f64) / (t1 as f64 - t0 as f64);
                LEFT + f.clamp(0.0, 1.0) * (RIGHT - LEFT)
            }
            _ => (LEFT + RIGHT) / 2.0,
        }
    }

    /// Y of value `v`: 0 on the x axis, `top` at the top.
    pub(super) fn y(&self, v: f64) -> f64 {
        BOTTOM - (v / self.top).clamp(0.0, 1.0) * (BOTTOM - TOP)
    }

    /// Half the width of each of `n` hover bands, one per bucket.
    pub(super) fn half_band(&self, n: usize) -> f64 {
        match self.span {
            Some((t0, t1)) if t1 > t0 && n > 1 => (RIGHT - LEFT) / (n - 1) as f64 / 2.0,
            _ => (RIGHT - LEFT) / 2.0,
        }
    }
}

/// `points` attribute of a polyline.
pub(super) fn points(xy: impl IntoIterator<Item = (f64, f64)>) -> String {
    xy.into_iter()
        .map(|(x, y)| format!("{x:.1},{y:.1}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The runs of consecutive `Some` values, as (index, value) pairs: one line each, so minutes
/// without data are gaps rather than drops to zero.
pub(super) fn runs(values: &[Option<f64>]) -> Vec<Vec<(usize, f64)>> {
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
