//! Retry policy: how long to wait after a failed attempt, and when the
//! budget is spent.
//!
//! Two budgets are kept apart (spec 002): `max_attempts` bounds failures the
//! handler owns (exceptions, `RetryAfter`), `max_crashes` bounds attempts
//! lost because the worker process died. A claim increments `attempt`, so
//! the failures so far are `attempt - crashes`.

/// Retry delays never exceed a day, whatever the attempt number.
pub const MAX_BACKOFF_S: f64 = 86_400.0;

/// The jitter adds up to this fraction of the base delay.
pub const JITTER_FRACTION: f64 = 0.25;

/// Seconds to wait before the next attempt after failure number `failures`
/// (1 for the first failure): `2^failures`, plus up to 25 % jitter, capped at
/// 24 h. `unit` is a uniform sample in `[0, 1)`.
pub fn backoff_s(failures: u32, unit: f64) -> f64 {
    // 2^17 s already exceeds the cap; clamping the exponent keeps powi exact.
    let exponent = i32::try_from(failures.min(17)).expect("at most 17");
    let base = 2f64.powi(exponent).min(MAX_BACKOFF_S);
    let jitter = base * JITTER_FRACTION * unit.clamp(0.0, 1.0);
    (base + jitter).min(MAX_BACKOFF_S)
}

/// Whether a job whose current attempt just failed may run again.
pub fn has_attempts_left(attempt: i32, crashes: i32, max_attempts: i32) -> bool {
    failures_so_far(attempt, crashes) < max_attempts
}

/// Failures owned by the handler, counting the attempt that just ended.
pub fn failures_so_far(attempt: i32, crashes: i32) -> i32 {
    (attempt - crashes).max(0)
}

/// Whether one more crash exhausts the crash budget (`None` is unbounded).
pub fn crash_budget_exhausted(crashes_after: i32, max_crashes: Option<i32>) -> bool {
    max_crashes.is_some_and(|limit| crashes_after > limit)
}

/// A small, fast, seedable generator for jitter (`SplitMix64`). Not for
/// secrets; the seed comes from the Python layer, so the core reads no
/// entropy source itself and tests are reproducible.
#[derive(Clone, Debug)]
pub struct Jitter {
    state: u64,
}

impl Jitter {
    pub fn new(seed: u64) -> Self {
        Jitter { state: seed }
    }

    /// A uniform sample in `[0, 1)`.
    #[allow(clippy::cast_precision_loss)] // 53-bit values are exact in an f64
    pub fn next_unit(&mut self) -> f64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        // The top 53 bits fill an f64 mantissa exactly.
        (z >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
#[allow(clippy::float_cmp, clippy::cast_precision_loss)] // exact by construction
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_per_failure_without_jitter() {
        assert_eq!(backoff_s(1, 0.0), 2.0);
        assert_eq!(backoff_s(2, 0.0), 4.0);
        assert_eq!(backoff_s(10, 0.0), 1024.0);
    }

    #[test]
    fn jitter_adds_at_most_a_quarter() {
        assert_eq!(
            backoff_s(3, 0.999_999_999),
            8.0 + 8.0 * 0.25 * 0.999_999_999
        );
        assert!(backoff_s(3, 1.0) <= 10.0);
    }

    #[test]
    fn backoff_is_capped_at_a_day() {
        assert_eq!(backoff_s(17, 0.0), MAX_BACKOFF_S);
        assert!(backoff_s(16, 0.99) < MAX_BACKOFF_S);
        assert_eq!(backoff_s(400, 0.5), MAX_BACKOFF_S);
    }

    #[test]
    fn attempts_left_ignores_crashes() {
        assert!(has_attempts_left(1, 0, 2));
        assert!(!has_attempts_left(2, 0, 2));
        // Two claims, one of which crashed: only one failure so far.
        assert!(has_attempts_left(2, 1, 2));
    }

    #[test]
    fn crash_budget() {
        assert!(!crash_budget_exhausted(5, None));
        assert!(!crash_budget_exhausted(1, Some(1)));
        assert!(crash_budget_exhausted(2, Some(1)));
        assert!(crash_budget_exhausted(1, Some(0)));
    }

    #[test]
    fn jitter_is_uniform_enough_and_reproducible() {
        let mut a = Jitter::new(7);
        let mut b = Jitter::new(7);
        let samples: Vec<f64> = (0..10_000).map(|_| a.next_unit()).collect();
        assert!(samples.iter().all(|u| (0.0..1.0).contains(u)));
        let mean = samples.iter().sum::<f64>() / samples.len() as f64;
        assert!((mean - 0.5).abs() < 0.02, "mean {mean}");
        assert_eq!(samples[0], b.next_unit());
    }
}
