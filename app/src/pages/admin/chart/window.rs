//! The span the charts cover ([`Window`]): hour, day or week, how wide a point is, and how a
//! point's time is said.

use serde::{Deserialize, Serialize};

use super::scale::*;

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
    pub(super) fn every(self) -> &'static str {
        match self {
            Window::Hour => "per minute",
            Window::Day => "per quarter hour",
            Window::Week => "per hour",
        }
    }

    /// What one point is: "minute", "quarter hour", "hour".
    pub(super) fn point_words(self) -> &'static str {
        match self {
            Window::Hour => "minute",
            Window::Day => "quarter hour",
            Window::Week => "hour",
        }
    }

    /// The time a point covers: "14:05" for a minute, "14:00–14:15" for a quarter hour,
    /// "12-01 14:00–15:00" for an hour of the week.
    pub(super) fn span_label(self, start_ms: i64) -> String {
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
