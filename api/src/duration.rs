//! `metav1.Duration`: a Go duration string (`"10s"`, `"1m30s"`, `"250ms"`) on the wire.
//!
//! Negative values parse (Go accepts them); validation decides whether a field allows them,
//! so a user gets "must be non-negative" with a field path rather than a parse error.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

const NANOS_PER_SECOND: u64 = 1_000_000_000;

/// A signed duration with nanosecond precision, printed and parsed like Go's `time.Duration`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct GoDuration {
    nanos: i64,
}

/// Why a string is not a Go duration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid duration {text:?}: {reason}")]
pub struct DurationError {
    text: String,
    reason: &'static str,
}

impl GoDuration {
    /// Zero: "disabled" for the fields that allow it.
    pub const ZERO: Self = Self { nanos: 0 };

    /// A whole number of seconds.
    pub const fn from_secs(secs: i64) -> Self {
        Self { nanos: secs.saturating_mul(NANOS_PER_SECOND as i64) }
    }

    /// A number of nanoseconds.
    pub const fn from_nanos(nanos: i64) -> Self {
        Self { nanos }
    }

    /// The signed number of nanoseconds.
    pub const fn as_nanos(&self) -> i64 {
        self.nanos
    }

    /// True when below zero.
    pub const fn is_negative(&self) -> bool {
        self.nanos < 0
    }

    /// The duration as a std `Duration`, or `None` when negative.
    pub fn to_std(&self) -> Option<Duration> {
        u64::try_from(self.nanos).ok().map(Duration::from_nanos)
    }

    /// The duration rounded to whole seconds, half away from zero (Go's `Duration.Round(time.Second)`).
    pub fn round_to_seconds(&self) -> i64 {
        let secs = self.nanos / NANOS_PER_SECOND as i64;
        let rest = self.nanos % NANOS_PER_SECOND as i64;
        if rest.unsigned_abs() * 2 >= NANOS_PER_SECOND { secs + self.nanos.signum() } else { secs }
    }

    /// Parses Go's `time.ParseDuration` grammar: `[-+]?([0-9]*(\.[0-9]*)?[a-z]+)+`, or `0`.
    pub fn parse(text: &str) -> Result<Self, DurationError> {
        let fail = |reason| DurationError { text: text.to_owned(), reason };
        let (negative, mut rest) = match text.as_bytes().first() {
            Some(b'-') => (true, &text[1..]),
            Some(b'+') => (false, &text[1..]),
            _ => (false, text),
        };
        if rest == "0" {
            return Ok(Self::ZERO);
        }
        if rest.is_empty() {
            return Err(fail("empty duration"));
        }
        let mut total: u128 = 0;
        while !rest.is_empty() {
            let whole_len = rest.bytes().take_while(u8::is_ascii_digit).count();
            let (whole, after) = rest.split_at(whole_len);
            let (fraction, after) = match after.strip_prefix('.') {
                Some(after) => {
                    let len = after.bytes().take_while(u8::is_ascii_digit).count();
                    after.split_at(len)
                }
                None => ("", after),
            };
            if whole.is_empty() && fraction.is_empty() {
                return Err(fail("expected a number"));
            }
            let unit_len = after.bytes().position(|b| b == b'.' || b.is_ascii_digit()).unwrap_or(after.len());
            let (unit, after) = after.split_at(unit_len);
            let unit_nanos: u128 = match unit {
                "ns" => 1,
                "us" | "µs" | "μs" => 1_000,
                "ms" => 1_000_000,
                "s" => 1_000_000_000,
                "m" => 60_000_000_000,
                "h" => 3_600_000_000_000,
                "" => return Err(fail("missing unit")),
                _ => return Err(fail("unknown unit")),
            };
            let whole: u128 = if whole.is_empty() { 0 } else { whole.parse().map_err(|_| fail("overflow"))? };
            // Digits past nanosecond precision cannot change the result; keep the sum exact.
            let fraction = &fraction[..fraction.len().min(18)];
            let mut part = whole.checked_mul(unit_nanos).ok_or_else(|| fail("overflow"))?;
            if !fraction.is_empty() {
                let digits: u128 = fraction.parse().map_err(|_| fail("overflow"))?;
                part += digits * unit_nanos / 10_u128.pow(fraction.len() as u32);
            }
            total = total.checked_add(part).ok_or_else(|| fail("overflow"))?;
            if total > i64::MAX as u128 + u128::from(negative) {
                return Err(fail("overflow"));
            }
            rest = after;
        }
        let nanos = if negative { (-(total as i128)) as i64 } else { total as i64 };
        Ok(Self { nanos })
    }
}

impl fmt::Display for GoDuration {
    /// Go's `Duration.String()`: `0s`, `1.5ms`, `1m0s`, `1h2m3.5s`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.nanos < 0 {
            f.write_str("-")?;
        }
        let nanos = self.nanos.unsigned_abs();
        if nanos == 0 {
            return f.write_str("0s");
        }
        if nanos < NANOS_PER_SECOND {
            let (unit, precision) = match nanos {
                0..1_000 => ("ns", 0),
                1_000..1_000_000 => ("µs", 3),
                _ => ("ms", 6),
            };
            write_with_fraction(f, nanos, precision)?;
            return f.write_str(unit);
        }
        let seconds = nanos / NANOS_PER_SECOND;
        let (hours, minutes) = (seconds / 3600, seconds / 60 % 60);
        if hours > 0 {
            write!(f, "{hours}h")?;
        }
        if hours > 0 || minutes > 0 {
            write!(f, "{minutes}m")?;
        }
        write_with_fraction(f, nanos % (60 * NANOS_PER_SECOND), 9)?;
        f.write_str("s")
    }
}

/// Writes `value / 10^precision` with the fraction's trailing zeros (and a bare dot) dropped.
fn write_with_fraction(f: &mut fmt::Formatter<'_>, value: u64, precision: u32) -> fmt::Result {
    let scale = 10_u64.pow(precision);
    let (whole, fraction) = (value / scale, value % scale);
    write!(f, "{whole}")?;
    if fraction != 0 {
        let digits = format!("{fraction:0width$}", width = precision as usize);
        write!(f, ".{}", digits.trim_end_matches('0'))?;
    }
    Ok(())
}

impl FromStr for GoDuration {
    type Err = DurationError;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::parse(text)
    }
}

impl Serialize for GoDuration {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for GoDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = std::borrow::Cow::<'de, str>::deserialize(deserializer)?;
        Self::parse(&text).map_err(serde::de::Error::custom)
    }
}

impl JsonSchema for GoDuration {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Duration".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({"type": "string"})
    }
}

/// A duration in seconds as kubectl prints ages: `45s`, `5m`, `3h`, `2d` (the API server's table
/// and `kubectl numa` print them alike).
pub fn kubectl_age(seconds: u64) -> String {
    match seconds {
        0..120 => format!("{seconds}s"),
        120..7_200 => format!("{}m", seconds / 60),
        7_200..172_800 => format!("{}h", seconds / 3_600),
        _ => format!("{}d", seconds / 86_400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints_like_go() {
        // (input, nanoseconds, Go's String())
        let table: [(&str, i64, &str); 14] = [
            ("0", 0, "0s"),
            ("0s", 0, "0s"),
            ("10s", 10_000_000_000, "10s"),
            ("5s", 5_000_000_000, "5s"),
            ("90s", 90_000_000_000, "1m30s"),
            ("1m", 60_000_000_000, "1m0s"),
            ("1h", 3_600_000_000_000, "1h0m0s"),
            ("1h2m3.5s", 3_723_500_000_000, "1h2m3.5s"),
            ("1.5ms", 1_500_000, "1.5ms"),
            ("250ms", 250_000_000, "250ms"),
            ("3us", 3_000, "3µs"),
            ("7ns", 7, "7ns"),
            ("-1.5h", -5_400_000_000_000, "-1h30m0s"),
            (".5s", 500_000_000, "500ms"),
        ];
        for (input, nanos, printed) in table {
            let d = GoDuration::parse(input).unwrap_or_else(|e| panic!("{input}: {e}"));
            assert_eq!(d.as_nanos(), nanos, "{input}");
            assert_eq!(d.to_string(), printed, "{input}");
        }
    }

    #[test]
    fn rejects_what_go_rejects() {
        for bad in ["", "-", "10", "1x", "s", ".s", "1.2.3s", "10 s", "1e3s", "3000000h"] {
            assert!(GoDuration::parse(bad).is_err(), "{bad:?} should not parse");
        }
    }

    #[test]
    fn rounds_to_seconds_half_away_from_zero() {
        assert_eq!(GoDuration::parse("1499ms").unwrap().round_to_seconds(), 1);
        assert_eq!(GoDuration::parse("1500ms").unwrap().round_to_seconds(), 2);
        assert_eq!(GoDuration::parse("-1500ms").unwrap().round_to_seconds(), -2);
    }

    #[test]
    fn json_is_a_string() {
        let d: GoDuration = serde_json::from_str("\"1m30s\"").unwrap();
        assert_eq!(serde_json::to_string(&d).unwrap(), "\"1m30s\"");
        assert!(serde_json::from_str::<GoDuration>("30").is_err());
    }
}
