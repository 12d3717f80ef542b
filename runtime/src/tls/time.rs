//! Conversions between the time types of std, x509-parser and rcgen.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

/// A Unix timestamp (seconds, possibly negative) as a `SystemTime`; saturates instead of failing
/// so that an absurd date in a certificate can never panic.
pub(crate) fn from_unix_seconds(seconds: i64) -> SystemTime {
    let offset = Duration::from_secs(seconds.unsigned_abs());
    let time = if seconds >= 0 { UNIX_EPOCH.checked_add(offset) } else { UNIX_EPOCH.checked_sub(offset) };
    time.unwrap_or(UNIX_EPOCH)
}

/// RFC 3339 text for logs and error messages (`2026-11-22T05:28:07Z`).
pub(crate) fn rfc3339(time: SystemTime) -> String {
    OffsetDateTime::from(time).format(&Rfc3339).unwrap_or_else(|_| format!("{time:?}"))
}

/// `now + delta` in rcgen's type, saturating at the end of representable time.
pub(crate) fn offset_from_now(now: SystemTime, delta: Duration) -> OffsetDateTime {
    let now = OffsetDateTime::from(now);
    time::Duration::try_from(delta)
        .ok()
        .and_then(|delta| now.checked_add(delta))
        .unwrap_or_else(|| rcgen::date_time_ymd(9999, 12, 31))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unix_seconds_round_trip_on_both_sides_of_the_epoch() {
        assert_eq!(from_unix_seconds(86_400), UNIX_EPOCH + Duration::from_secs(86_400));
        assert_eq!(from_unix_seconds(-86_400), UNIX_EPOCH - Duration::from_secs(86_400));
        assert_eq!(from_unix_seconds(0), UNIX_EPOCH);
    }

    #[test]
    fn rfc3339_is_utc_text() {
        assert_eq!(rfc3339(UNIX_EPOCH + Duration::from_secs(86_400)), "1970-01-02T00:00:00Z");
    }
}
