//! `Zipf`: ranks `1..=n` drawn with probability proportional to `1 / rank^s`, the key
//! skew of real traffic (a few hot keys, a long tail), for the generator.
//!
//! Invariants:
//! - Exact, not approximated: rejection-inversion (Hörmann and Derflinger, "Rejection-
//!   inversion to generate variates from monotone discrete distributions", 1996), the
//!   method Apache Commons RNG uses. A proposal is drawn from the continuous hat
//!   `h(x) = x^-s` by inverting its integral `H`, rounded to the nearest rank `k`, and
//!   accepted when it falls under the histogram of the pmf; the expected number of
//!   proposals per sample is below 1.1 for every `s > 0` and `n`.
//! - Constant memory and O(1) expected time per sample whatever `n` (no table of `n`
//!   probabilities), so ten million keys cost what ten do.
//! - A pure function of the uniforms it is fed: the generator feeds a splitmix64 stream
//!   seeded by the record's hash, so a record's key stays a function of `(config, i)`.

/// A Zipf distribution over ranks `1..=n` with exponent `s > 0`, its constants computed.
#[derive(Debug, Clone, PartialEq)]
pub struct Zipf {
    n: u64,
    exponent: f64,
    /// `H(1.5) - 1`: the upper end of the proposals' range (H is decreasing in u terms).
    h_integral_x1: f64,
    /// `H(n + 0.5)`: the lower end.
    h_integral_n: f64,
    /// Proposals within this distance below their rank are accepted without the test.
    squeeze: f64,
}

impl Zipf {
    /// `n >= 1` ranks, exponent `s`, finite and positive (the spec refuses any other).
    pub fn new(n: u64, exponent: f64) -> Self {
        debug_assert!(n >= 1 && exponent.is_finite() && exponent > 0.0);
        let mut zipf = Zipf {
            n,
            exponent,
            h_integral_x1: 0.0,
            h_integral_n: 0.0,
            squeeze: 0.0,
        };
        zipf.h_integral_x1 = zipf.h_integral(1.5) - 1.0;
        zipf.h_integral_n = zipf.h_integral(n as f64 + 0.5);
        zipf.squeeze = 2.0 - zipf.h_integral_inverse(zipf.h_integral(2.5) - zipf.h(2.0));
        zipf
    }

    /// Whether this is the distribution of `n` ranks with `exponent`.
    pub fn is(&self, n: u64, exponent: f64) -> bool {
        self.n == n && self.exponent == exponent
    }

    /// One rank in `1..=n`; `uniform` yields independent draws from `[0, 1)`.
    pub fn sample(&self, mut uniform: impl FnMut() -> f64) -> u64 {
        loop {
            let u = self.h_integral_n + uniform() * (self.h_integral_x1 - self.h_integral_n);
            let x = self.h_integral_inverse(u);
            // The cast saturates; the clamp keeps a rounding at either end in range.
            let k = ((x + 0.5) as u64).clamp(1, self.n);
            let kf = k as f64;
            if kf - x <= self.squeeze || u >= self.h_integral(kf + 0.5) - self.h(kf) {
                return k;
            }
        }
    }

    /// The hat, `x^-s`.
    fn h(&self, x: f64) -> f64 {
        (-self.exponent * x.ln()).exp()
    }

    /// `H(x)`, an integral of the hat: `(x^(1-s) - 1) / (1 - s)`, and `ln x` at `s = 1`,
    /// computed without cancellation near `s = 1`.
    fn h_integral(&self, x: f64) -> f64 {
        let log_x = x.ln();
        expm1_over_x((1.0 - self.exponent) * log_x) * log_x
    }

    /// The inverse of [`Self::h_integral`].
    fn h_integral_inverse(&self, x: f64) -> f64 {
        // Rounding can take t just below -1, where the inverse is undefined.
        let t = (x * (1.0 - self.exponent)).max(-1.0);
        (ln1p_over_x(t) * x).exp()
    }
}

/// `ln(1 + x) / x`, continuous at 0.
fn ln1p_over_x(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.ln_1p() / x
    } else {
        1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x))
    }
}

/// `(e^x - 1) / x`, continuous at 0.
fn expm1_over_x(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.exp_m1() / x
    } else {
        1.0 + x * 0.5 * (1.0 + x / 3.0 * (1.0 + 0.25 * x))
    }
}

/// A uniform draw from `[0, 1)` from 64 random bits (their top 53).
pub fn unit_interval(bits: u64) -> f64 {
    (bits >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A splitmix64 stream of uniforms, as the generator feeds.
    fn uniforms(seed: u64) -> impl FnMut() -> f64 {
        let mut state = seed;
        move || unit_interval(super::super::splitmix64(&mut state))
    }

    /// The exact pmf of rank `k`.
    fn pmf(n: u64, s: f64, k: u64) -> f64 {
        let norm: f64 = (1..=n).map(|r| (r as f64).powf(-s)).sum();
        (k as f64).powf(-s) / norm
    }

    #[test]
    fn frequencies_match_the_pmf() {
        const DRAWS: usize = 400_000;
        for (n, s) in [(1_000u64, 1.1), (50, 1.0), (10_000, 0.5), (200, 2.5)] {
            let zipf = Zipf::new(n, s);
            let mut next = uniforms(7);
            let mut counts = vec![0usize; n as usize + 1];
            for _ in 0..DRAWS {
                let k = zipf.sample(&mut next);
                assert!((1..=n).contains(&k), "rank {k} of {n}");
                counts[k as usize] += 1;
            }
            // Chi-square over the ranks with an expected count of at least 20 each,
            // the rest pooled: with df below 1,000 this bound fails by chance with
            // probability far below 1e-6, and a wrong exponent or an off-by-one in
            // the ranks exceeds it many times over.
            let (mut chi2, mut df, mut rest_seen, mut rest_expected) = (0.0, 0usize, 0.0, 0.0);
            for k in 1..=n {
                let expected = pmf(n, s, k) * DRAWS as f64;
                let seen = counts[k as usize] as f64;
                if expected >= 20.0 {
                    chi2 += (seen - expected).powi(2) / expected;
                    df += 1;
                } else {
                    rest_seen += seen;
                    rest_expected += expected;
                }
            }
            if rest_expected > 0.0 {
                chi2 += (rest_seen - rest_expected).powi(2) / rest_expected;
            }
            let bound = df as f64 + 7.0 * (2.0 * df as f64).sqrt() + 30.0;
            assert!(
                chi2 < bound,
                "n {n}, s {s}: chi-square {chi2:.1} over {df} ranks"
            );
        }
    }

    #[test]
    fn one_rank_and_huge_ranks_stay_in_range() {
        let one = Zipf::new(1, 1.1);
        let mut next = uniforms(1);
        assert!((0..1000).all(|_| one.sample(&mut next) == 1));
        let huge = Zipf::new(u64::MAX / 2, 1.1);
        assert!((0..1000).all(|_| (1..=u64::MAX / 2).contains(&huge.sample(&mut next))));
        // Uniforms at the ends of [0, 1) give the last and the first rank.
        let ten = Zipf::new(10, 1.1);
        assert_eq!(ten.sample(|| 0.0), 10);
        assert_eq!(ten.sample(|| 1.0 - f64::EPSILON), 1);
    }
}
