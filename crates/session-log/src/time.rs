//! RFC 3339 timestamps for the event envelope, without a date-time dependency.

use std::time::{SystemTime, UNIX_EPOCH};

/// Formats a point in time as RFC 3339 in UTC with millisecond precision,
/// e.g. `2026-11-30T17:48:29.123Z`. Times before 1970 are clamped to the epoch.
pub fn format_rfc3339_utc(at: SystemTime) -> String {
    let since = at.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = since.as_secs();
    let millis = since.subsec_millis();
    let days = secs / 86_400;
    let rem = secs % 86_400;
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        rem / 3600,
        (rem % 3600) / 60,
        rem % 60
    )
}

/// Converts days since 1970-01-01 into a proleptic Gregorian (year, month, day), using the
/// era-based method (400-year cycles of 146,097 days).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn formats_known_instants() {
        assert_eq!(format_rfc3339_utc(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        // 2000-02-29 12:34:56.789 UTC: a leap day in a century leap year.
        let leap = UNIX_EPOCH + Duration::from_millis(951_827_696_789);
        assert_eq!(format_rfc3339_utc(leap), "2000-02-29T12:34:56.789Z");
        // 2026-11-30 17:48:29 UTC.
        let today = UNIX_EPOCH + Duration::from_secs(1_796_060_909);
        assert_eq!(format_rfc3339_utc(today), "2026-11-30T17:48:29.000Z");
    }
}
