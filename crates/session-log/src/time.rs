//! Event timestamps: kept as milliseconds since the Unix epoch (cheap to take on every
//! append), written as RFC 3339 in UTC (`2026-11-30T17:48:29.123Z`) without a date-time
//! dependency and without the formatting machinery, which dominated a trivial call's cost.

use std::fmt;
use std::sync::LazyLock;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A point in time with millisecond precision, from 1970 on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp {
    millis: u64,
}

/// A timestamp text that is not RFC 3339.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{text}` is not an RFC 3339 timestamp such as 2026-11-30T17:48:29.123Z: {why}")]
pub struct InvalidTimestamp {
    /// The rejected text.
    pub text: String,
    /// What is wrong with it (`too short`, `before 1970`, …).
    pub why: &'static str,
}

impl Timestamp {
    /// The current time (the epoch if the clock is set before it).
    pub fn now() -> Self {
        Self::from_system_time(SystemTime::now())
    }

    /// The wall-clock time of a monotonic instant, so a caller that already read the
    /// monotonic clock (for timing) need not read the wall clock again — in virtual machines
    /// a clock read can cost more than the rest of a trivial call. Anchored once per
    /// process; later wall-clock adjustments are not followed.
    pub fn from_instant(at: Instant) -> Self {
        static ANCHOR: LazyLock<(Instant, u64)> =
            LazyLock::new(|| (Instant::now(), Timestamp::now().millis));
        let (anchor, anchor_millis) = *ANCHOR;
        let millis = match at.checked_duration_since(anchor) {
            Some(after) => {
                anchor_millis.saturating_add(u64::try_from(after.as_millis()).unwrap_or(u64::MAX))
            }
            None => anchor_millis.saturating_sub(
                u64::try_from(anchor.duration_since(at).as_millis()).unwrap_or(u64::MAX),
            ),
        };
        Self::from_millis(millis)
    }

    /// Converts a system time, clamping times before 1970 to the epoch.
    pub fn from_system_time(at: SystemTime) -> Self {
        let since = at.duration_since(UNIX_EPOCH).unwrap_or_default();
        Self {
            millis: u64::try_from(since.as_millis()).unwrap_or(u64::MAX),
        }
    }

    /// The instant as a system time.
    pub fn to_system_time(self) -> SystemTime {
        UNIX_EPOCH + std::time::Duration::from_millis(self.as_millis())
    }

    /// The last instant RFC 3339 can write: 9999-12-31T23:59:59.999Z.
    pub const MAX: Timestamp = Timestamp {
        millis: 253_402_300_799_999,
    };

    /// Milliseconds since the epoch, clamped to [`Timestamp::MAX`].
    pub fn from_millis(millis: u64) -> Self {
        Self {
            millis: millis.min(Self::MAX.millis),
        }
    }

    /// Milliseconds since the Unix epoch.
    pub fn as_millis(self) -> u64 {
        self.millis
    }

    /// The RFC 3339 text, always 24 bytes for years 0–9999.
    fn render(self) -> [u8; 24] {
        let secs = self.millis / 1000;
        let (year, month, day) = civil_from_days(secs / 86_400);
        let rem = secs % 86_400;
        let mut out = *b"0000-00-00T00:00:00.000Z";
        put(&mut out[0..4], year);
        put(&mut out[5..7], month);
        put(&mut out[8..10], day);
        put(&mut out[11..13], rem / 3600);
        put(&mut out[14..16], rem % 3600 / 60);
        put(&mut out[17..19], rem % 60);
        put(&mut out[20..23], self.millis % 1000);
        out
    }

    /// Parses RFC 3339 (`Z` or a `±HH:MM` offset; fractions beyond milliseconds are cut).
    pub fn parse(text: &str) -> Result<Self, InvalidTimestamp> {
        let fail = |why| InvalidTimestamp {
            text: text.to_owned(),
            why,
        };
        let bytes = text.as_bytes();
        if bytes.len() < 20 {
            return Err(fail("too short"));
        }
        let shape_ok = bytes[4] == b'-'
            && bytes[7] == b'-'
            && matches!(bytes[10], b'T' | b't' | b' ')
            && bytes[13] == b':'
            && bytes[16] == b':';
        if !shape_ok {
            return Err(fail("expected YYYY-MM-DDTHH:MM:SS"));
        }
        let num = |range: std::ops::Range<usize>| {
            digits(&bytes[range]).ok_or_else(|| fail("expected digits"))
        };
        let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
        let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
        if year < 1970 {
            return Err(fail("before 1970"));
        }
        if !(1..=12).contains(&month) || day == 0 || day > days_in_month(year, month) {
            return Err(fail("no such date"));
        }
        if hour > 23 || minute > 59 || second > 60 {
            return Err(fail("no such time of day"));
        }
        let mut at = 19;
        let mut millis = 0;
        if bytes[at] == b'.' {
            at += 1;
            let start = at;
            while at < bytes.len() && bytes[at].is_ascii_digit() {
                if at - start < 3 {
                    millis = millis * 10 + u64::from(bytes[at] - b'0');
                }
                at += 1;
            }
            if at == start {
                return Err(fail("a fraction needs digits"));
            }
            for _ in (at - start)..3 {
                millis *= 10;
            }
        }
        let offset_secs: i64 = match &bytes[at..] {
            [b'Z' | b'z'] => 0,
            [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
                let hours = digits(&[*h1, *h2]).ok_or_else(|| fail("bad offset"))?;
                let minutes = digits(&[*m1, *m2]).ok_or_else(|| fail("bad offset"))?;
                let magnitude =
                    i64::try_from(hours * 3600 + minutes * 60).map_err(|_| fail("bad offset"))?;
                if *sign == b'+' { magnitude } else { -magnitude }
            }
            _ => {
                return Err(fail(
                    "expected Z or an offset like +02:00 after the seconds",
                ));
            }
        };
        let local =
            days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second.min(59);
        let utc = i64::try_from(local).map_err(|_| fail("out of range"))? - offset_secs;
        let utc = u64::try_from(utc).map_err(|_| fail("before 1970"))?;
        Ok(Self {
            millis: utc * 1000 + millis,
        })
    }
}

fn put(slot: &mut [u8], mut value: u64) {
    for byte in slot.iter_mut().rev() {
        *byte = b'0' + (value % 10) as u8;
        value /= 10;
    }
}

fn digits(bytes: &[u8]) -> Option<u64> {
    bytes.iter().try_fold(0u64, |acc, &byte| {
        byte.is_ascii_digit()
            .then(|| acc * 10 + u64::from(byte - b'0'))
    })
}

fn days_in_month(year: u64, month: u64) -> u64 {
    match month {
        2 if year.is_multiple_of(4) && (!year.is_multiple_of(100) || year.is_multiple_of(400)) => {
            29
        }
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 to a proleptic Gregorian (year, month, day), by 400-year eras of
/// 146,097 days with years starting in March.
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + u64::from(month <= 2), month, day)
}

/// The inverse of [`civil_from_days`], for dates from 1970 on (earlier ones saturate to 0).
fn days_from_civil(year: u64, month: u64, day: u64) -> u64 {
    let year = if month <= 2 {
        year.saturating_sub(1)
    } else {
        year
    };
    let era = year / 400;
    let yoe = year - era * 400;
    let mp = if month > 2 { month - 3 } else { month + 9 };
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    (era * 146_097 + doe).saturating_sub(719_468)
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = self.render();
        // The buffer holds ASCII digits and separators only.
        f.write_str(std::str::from_utf8(&text).map_err(|_| fmt::Error)?)
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let text = self.render();
        serializer.serialize_str(std::str::from_utf8(&text).map_err(serde::ser::Error::custom)?)
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // A visitor, so the text is parsed where it lies instead of being copied first.
        struct TimestampVisitor;
        impl serde::de::Visitor<'_> for TimestampVisitor {
            type Value = Timestamp;
            fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
                formatter.write_str("an RFC 3339 timestamp")
            }
            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Timestamp, E> {
                Timestamp::parse(text).map_err(E::custom)
            }
        }
        deserializer.deserialize_str(TimestampVisitor)
    }
}

/// Formats a point in time as RFC 3339 in UTC with millisecond precision.
pub fn format_rfc3339_utc(at: SystemTime) -> String {
    Timestamp::from_system_time(at).to_string()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn formats_known_instants() {
        assert_eq!(format_rfc3339_utc(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        // A leap day in a century leap year.
        let leap = UNIX_EPOCH + Duration::from_millis(951_827_696_789);
        assert_eq!(format_rfc3339_utc(leap), "2000-02-29T12:34:56.789Z");
        let today = UNIX_EPOCH + Duration::from_secs(1_796_060_909);
        assert_eq!(format_rfc3339_utc(today), "2026-11-30T17:48:29.000Z");
    }

    #[test]
    fn parses_what_it_writes_and_offsets() {
        for millis in [0, 951_827_696_789, 1_796_060_909_123, 4_102_444_799_999] {
            let at = Timestamp::from_millis(millis);
            assert_eq!(Timestamp::parse(&at.to_string()), Ok(at));
        }
        let plus_two = Timestamp::parse("2026-11-30T19:48:29.5+02:00").unwrap();
        assert_eq!(plus_two.to_string(), "2026-11-30T17:48:29.500Z");
        let micros = Timestamp::parse("2026-11-30T17:48:29.123456Z").unwrap();
        assert_eq!(micros.to_string(), "2026-11-30T17:48:29.123Z");
        assert_eq!(
            Timestamp::parse("2026-11-30T17:48:29Z")
                .unwrap()
                .as_millis()
                % 1000,
            0
        );
    }

    #[test]
    fn instants_map_to_wall_time() {
        let before = Timestamp::now();
        let at = Timestamp::from_instant(Instant::now());
        let later = Timestamp::from_instant(Instant::now() + Duration::from_secs(2));
        let after = Timestamp::now();
        // Both clocks are read at millisecond precision: allow one millisecond either way.
        assert!(
            before.as_millis() <= at.as_millis() + 1 && at.as_millis() <= after.as_millis() + 1,
            "{before} {at} {after}"
        );
        assert!(later.as_millis() - at.as_millis() >= 2000);
    }

    #[test]
    fn times_past_year_9999_are_clamped_not_misprinted() {
        let far = Timestamp::from_millis(u64::MAX);
        assert_eq!(far, Timestamp::MAX);
        assert_eq!(far.to_string(), "9999-12-31T23:59:59.999Z");
        assert_eq!(Timestamp::parse(&far.to_string()), Ok(far));
    }

    #[test]
    fn refuses_what_is_not_a_timestamp() {
        for bad in [
            "",
            "yesterday",
            "2026-02-30T00:00:00Z",
            "2026-11-30T24:00:00Z",
            "2026-11-30T17:48:29",
            "2026-11-30T17:48:29.Z",
            "1969-12-31T23:59:59Z",
        ] {
            let error = Timestamp::parse(bad).unwrap_err();
            assert!(error.to_string().contains("RFC 3339"), "{bad}: {error}");
        }
    }
}
