//! Which failure, if any, one answer shows: a forced one from the overrides, or one rolled
//! against the configured rates with the simulator's seeded dice.

use rand::Rng;

use crate::SimArgs;

/// A failure the simulator can show instead of a normal answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// HTTP 500.
    Internal,
    /// HTTP 503.
    Unavailable,
    /// HTTP 429 with `Retry-After`.
    RateLimited,
    /// HTTP 200 with a body that is not JSON.
    Malformed,
    /// HTTP 200 with JSON lacking the `status` field.
    WrongShape,
    /// No answer for `--sim-hang-ms`, then 504.
    Hang,
    /// Headers, a few bytes, then the connection is cut.
    Reset,
    /// The handler panics: the simulator answers 500 for this request and carries on (only
    /// forced with `fail=panic`, never rolled; it shows the panic guard works).
    Panic,
}

impl Fault {
    /// The names [`Fault::from_name`] knows, for error messages.
    pub const NAMES: &'static str = "500, 503, 429, malformed, shape, hang, reset, panic";

    /// The fault named in a `fail=` override.
    pub fn from_name(name: &str) -> Option<Fault> {
        Some(match name {
            "500" => Fault::Internal,
            "503" => Fault::Unavailable,
            "429" => Fault::RateLimited,
            "malformed" => Fault::Malformed,
            "shape" => Fault::WrongShape,
            "hang" => Fault::Hang,
            "reset" => Fault::Reset,
            "panic" => Fault::Panic,
            _ => return None,
        })
    }

    /// Rolls the dice once: each rate is the probability of its fault (they are laid side by
    /// side on 0..1, so their sum should stay at or below 1).
    pub fn roll(args: &SimArgs, rng: &mut impl Rng) -> Option<Fault> {
        let r: f64 = rng.gen();
        let table = [
            (args.reset_rate, Fault::Reset),
            (args.hang_rate, Fault::Hang),
            (args.error_rate / 2.0, Fault::Internal),
            (args.error_rate / 2.0, Fault::Unavailable),
            (args.rate_limit_rate, Fault::RateLimited),
            (args.malformed_rate, Fault::Malformed),
            (args.wrong_shape_rate, Fault::WrongShape),
        ];
        let mut edge = 0.0;
        for (rate, fault) in table {
            edge += rate.max(0.0);
            if r < edge {
                return Some(fault);
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn no_rates_no_faults() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        let args = SimArgs::default();
        assert!((0..1000).all(|_| Fault::roll(&args, &mut rng).is_none()));
    }

    #[test]
    fn rates_are_roughly_honoured() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let args = SimArgs {
            error_rate: 0.3,
            malformed_rate: 0.1,
            ..SimArgs::default()
        };
        let n = 20_000;
        let faults: Vec<_> = (0..n)
            .filter_map(|_| Fault::roll(&args, &mut rng))
            .collect();
        let five = faults
            .iter()
            .filter(|f| matches!(f, Fault::Internal | Fault::Unavailable))
            .count() as f64;
        let bad = faults.iter().filter(|f| **f == Fault::Malformed).count() as f64;
        assert!((five / n as f64 - 0.3).abs() < 0.02, "{five}");
        assert!((bad / n as f64 - 0.1).abs() < 0.02, "{bad}");
    }
}
