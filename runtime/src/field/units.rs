//! Durations and byte sizes as written in a pipeline spec.
//!
//! Invariants: a duration is a non-negative integer immediately followed by one unit
//! (`ms`, `s`, `m`, `h`; no spaces, no fractions, no bare numbers), so `"500ms"` and
//! `"10s"` are the only spellings of those values and millisecond resolution is exact.
//! A size is an integer followed by `B`, `KiB`, `MiB` or `GiB` (powers of 1024). Values
//! that overflow are refused, never wrapped, and so are durations above
//! [`MAX_DURATION`] and sizes above [`MAX_SIZE`]: every value a spec accepts is one the
//! runtime can compute with (event time is `i64` milliseconds) without overflow. Both
//! are parsed inside `Deserialize`, so a bad value is reported by toml with its line.

use std::fmt;
use std::time::Duration;

use serde::de::{self, Deserializer, Visitor};

const DURATION_HINT: &str = "a duration such as \"500ms\", \"10s\", \"5m\" or \"1h\"";
const SIZE_HINT: &str = "a size such as \"512KiB\", \"64MiB\" or \"1GiB\"";

/// Longest duration a spec may give: 100 years (876000h). Far past any window,
/// lateness, skew, interval or timeout a pipeline needs, and small enough that an event
/// time plus or minus a few of them stays far inside `i64` milliseconds (about
/// ±292 million years), the range the runtime's event-time arithmetic works in.
pub const MAX_DURATION: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
/// `MAX_DURATION` as a spec writes it.
const MAX_DURATION_TEXT: &str = "876000h";
/// Largest size a spec may give: 1 TiB (1024GiB). Every size in a spec bounds memory
/// or data on one machine; a sum or product of a few of them stays far inside `usize`.
pub const MAX_SIZE: usize = 1 << 40;
/// `MAX_SIZE` as a spec writes it.
const MAX_SIZE_TEXT: &str = "1024GiB";

/// Parses `"<integer><ms|s|m|h>"`, at most [`MAX_DURATION`].
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let (digits, unit) = split_number(text);
    let bad = || format!("invalid duration {text:?}: expected {DURATION_HINT}");
    let too_large =
        || format!("duration {text:?} is too large: at most {MAX_DURATION_TEXT:?} (100 years)");
    let millis_per_unit: u64 = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        _ => return Err(bad()),
    };
    let n: u64 = parse_digits(digits)
        .ok_or_else(bad)?
        .ok_or_else(too_large)?;
    let millis = n.checked_mul(millis_per_unit).ok_or_else(too_large)?;
    let duration = Duration::from_millis(millis);
    if duration > MAX_DURATION {
        return Err(too_large());
    }
    Ok(duration)
}

/// Parses `"<integer><B|KiB|MiB|GiB>"` into bytes, at most [`MAX_SIZE`].
pub fn parse_size(text: &str) -> Result<usize, String> {
    let (digits, unit) = split_number(text);
    let bad = || format!("invalid size {text:?}: expected {SIZE_HINT}");
    let too_large = || format!("size {text:?} is too large: at most {MAX_SIZE_TEXT:?} (1 TiB)");
    let shift = match unit {
        "B" => 0,
        "KiB" => 10,
        "MiB" => 20,
        "GiB" => 30,
        _ => return Err(bad()),
    };
    let n: usize = parse_digits(digits)
        .ok_or_else(bad)?
        .ok_or_else(too_large)?;
    let bytes = n.checked_mul(1usize << shift).ok_or_else(too_large)?;
    if bytes > MAX_SIZE {
        return Err(too_large());
    }
    Ok(bytes)
}

/// `None`: not a number; `Some(None)`: a number too large for `T`.
fn parse_digits<T: std::str::FromStr<Err = std::num::ParseIntError>>(
    digits: &str,
) -> Option<Option<T>> {
    match digits.parse::<T>() {
        Ok(n) => Some(Some(n)),
        Err(e) if *e.kind() == std::num::IntErrorKind::PosOverflow => Some(None),
        Err(_) => None,
    }
}

fn split_number(text: &str) -> (&str, &str) {
    let end = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    text.split_at(end)
}

/// Renders a duration the way a spec writes it (the largest exact unit).
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    for (unit, per) in [("h", 3_600_000u128), ("m", 60_000), ("s", 1_000)] {
        if ms != 0 && ms.is_multiple_of(per) {
            return format!("{}{unit}", ms / per);
        }
    }
    format!("{ms}ms")
}

struct DurationVisitor;

impl Visitor<'_> for DurationVisitor {
    type Value = Duration;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(DURATION_HINT)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Duration, E> {
        parse_duration(v).map_err(E::custom)
    }
}

struct SizeVisitor;

impl Visitor<'_> for SizeVisitor {
    type Value = usize;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(SIZE_HINT)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<usize, E> {
        parse_size(v).map_err(E::custom)
    }
}

/// `#[serde(deserialize_with = "crate::field::units::duration")]`
pub fn duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    d.deserialize_str(DurationVisitor)
}

/// Like [`duration`], refusing zero.
pub fn positive_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    let v = duration(d)?;
    if v.is_zero() {
        return Err(de::Error::custom(
            "a duration of 0 is not allowed here; it must be at least 1ms",
        ));
    }
    Ok(v)
}

/// `#[serde(deserialize_with = "crate::field::units::size")]`: bytes.
pub fn size<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    d.deserialize_str(SizeVisitor)
}

/// A duration that deserializes from the spec's notation, for `Spanned<HumanDuration>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HumanDuration(pub Duration);

impl<'de> serde::Deserialize<'de> for HumanDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        duration(d).map(HumanDuration)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("0ms"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        for bad in [
            "",
            "10",
            "s",
            "1.5s",
            "-1s",
            "10 s",
            "10sec",
            "1d",
            "99999999999999999999h",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?} accepted");
        }
        assert_eq!(parse_duration("876000h"), Ok(MAX_DURATION));
        assert_eq!(parse_duration("3153600000000ms"), Ok(MAX_DURATION));
        for huge in [
            "876001h",
            "3153600000001ms",
            "18446744073709551615ms",
            "18446744073709551616ms",
            "99999999999999999999h",
        ] {
            assert_eq!(
                parse_duration(huge),
                Err(format!(
                    "duration {huge:?} is too large: at most \"876000h\" (100 years)"
                ))
            );
        }
        assert_eq!(format_duration(Duration::from_millis(1500)), "1500ms");
        assert_eq!(format_duration(Duration::from_secs(120)), "2m");
        assert_eq!(format_duration(Duration::ZERO), "0ms");
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("64MiB"), Ok(64 << 20));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("512KiB"), Ok(512 << 10));
        assert_eq!(parse_size("100B"), Ok(100));
        for bad in ["64", "64MB", "64 MiB", "1.5GiB", "MiB"] {
            assert!(parse_size(bad).is_err(), "{bad:?} accepted");
        }
        assert_eq!(parse_size("1024GiB"), Ok(MAX_SIZE));
        for huge in [
            "1025GiB",
            "18446744073709551615B",
            "99999999999999999999GiB",
        ] {
            assert_eq!(
                parse_size(huge),
                Err(format!(
                    "size {huge:?} is too large: at most \"1024GiB\" (1 TiB)"
                ))
            );
        }
    }
}
