//! RFC 3339 UTC timestamps at one-second resolution, by hand.
//!
//! A voice records when it was made. Formatting and parsing
//! `YYYY-MM-DDTHH:MM:SSZ` is two calendar conversions (Howard Hinnant's
//! `days_from_civil` / `civil_from_days`), so no date crate is pulled in for
//! it. Seconds resolution keeps a record equal to itself after a round trip
//! through the file.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Seconds since the Unix epoch, shown and stored as RFC 3339 UTC.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(i64);

/// A string that is not an RFC 3339 UTC timestamp this crate accepts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not an RFC 3339 UTC time like 2026-01-31T12:00:00Z")]
pub struct TimestampError(pub String);

impl Timestamp {
    /// The current time, truncated to the second.
    pub fn now() -> Timestamp {
        Timestamp::from_system_time(SystemTime::now())
    }

    /// `t` truncated to the second (times before 1970 are negative).
    pub fn from_system_time(t: SystemTime) -> Timestamp {
        match t.duration_since(UNIX_EPOCH) {
            Ok(d) => Timestamp(d.as_secs() as i64),
            Err(e) => Timestamp(-(e.duration().as_secs_f64().ceil() as i64)),
        }
    }

    /// Seconds since 1970-01-01T00:00:00Z.
    pub fn from_unix_seconds(secs: i64) -> Timestamp {
        Timestamp(secs)
    }

    pub fn unix_seconds(self) -> i64 {
        self.0
    }

    pub fn to_system_time(self) -> SystemTime {
        if self.0 >= 0 {
            UNIX_EPOCH + Duration::from_secs(self.0 as u64)
        } else {
            UNIX_EPOCH - Duration::from_secs(self.0.unsigned_abs())
        }
    }

    /// Parses `YYYY-MM-DDTHH:MM:SS[.frac](Z|+00:00)` (also lower-case `t`/`z`
    /// or a space for `T`); a fraction is dropped; other offsets are refused
    /// because every timestamp this crate writes is UTC.
    pub fn parse(s: &str) -> Result<Timestamp, TimestampError> {
        parse(s).ok_or_else(|| TimestampError(s.to_owned()))
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let days = self.0.div_euclid(86_400);
        let secs = self.0.rem_euclid(86_400);
        let (y, m, d) = civil_from_days(days);
        write!(
            f,
            "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
            secs / 3600,
            secs / 60 % 60,
            secs % 60
        )
    }
}

impl std::str::FromStr for Timestamp {
    type Err = TimestampError;
    fn from_str(s: &str) -> Result<Self, TimestampError> {
        Timestamp::parse(s)
    }
}

fn parse(s: &str) -> Option<Timestamp> {
    let b = s.as_bytes();
    if b.len() < 20 || !s.is_ascii() {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let part = &s[r];
        if part.bytes().all(|c| c.is_ascii_digit()) {
            part.parse().ok()
        } else {
            None
        }
    };
    let sep_ok = b[4] == b'-'
        && b[7] == b'-'
        && matches!(b[10], b'T' | b't' | b' ')
        && b[13] == b':'
        && b[16] == b':';
    if !sep_ok {
        return None;
    }
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let mut rest = &s[19..];
    if let Some(frac) = rest.strip_prefix('.') {
        let digits = frac.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        rest = &frac[digits..];
    }
    if !matches!(rest, "Z" | "z" | "+00:00" | "-00:00") {
        return None;
    }
    // 60 for a leap second is valid RFC 3339; it folds into the next minute.
    if !(1..=12).contains(&mo) || d < 1 || d > days_in_month(y, mo) || h > 23 || mi > 59 {
        return None;
    }
    if sec > 60 {
        return None;
    }
    Some(Timestamp(
        days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + sec,
    ))
}

fn is_leap(y: i64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if is_leap(y) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of the proleptic Gregorian date `y-m-d`.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The inverse of [`days_from_civil`].
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (
        if m <= 2 {
            yoe + era * 400 + 1
        } else {
            yoe + era * 400
        },
        m,
        d,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_instants() {
        assert_eq!(Timestamp(0).to_string(), "1970-01-01T00:00:00Z");
        // 2000-02-29 (a leap day in a century leap year) 12:34:56.
        assert_eq!(Timestamp(951_827_696).to_string(), "2000-02-29T12:34:56Z");
        assert_eq!(Timestamp(-1).to_string(), "1969-12-31T23:59:59Z");
        assert_eq!(
            Timestamp::parse("2026-12-01T10:34:23Z").unwrap().0,
            1_796_121_263
        );
    }

    #[test]
    fn round_trips_every_day_across_centuries() {
        let mut t = -2_208_988_800; // 1900-01-01
        while t < 4_102_444_800 {
            // 2100-01-01
            let ts = Timestamp(t + 3_723);
            assert_eq!(Timestamp::parse(&ts.to_string()), Ok(ts));
            t += 86_400 * 7 + 1;
        }
    }

    #[test]
    fn accepts_fraction_and_zero_offset_refuses_the_rest() {
        let base = Timestamp::parse("2026-01-31T12:00:00Z").unwrap();
        assert_eq!(Timestamp::parse("2026-01-31T12:00:00.999Z"), Ok(base));
        assert_eq!(Timestamp::parse("2026-01-31t12:00:00+00:00"), Ok(base));
        for bad in [
            "",
            "2026-01-31",
            "2026-01-31T12:00:00",
            "2026-01-31T12:00:00+02:00",
            "2026-02-30T12:00:00Z",
            "2026-13-01T12:00:00Z",
            "2026-01-31T24:00:00Z",
            "2026-01-31T12:00:00.Z",
            "2026-01-31T12:0a:00Z",
            "+026-01-31T12:00:00Z",
        ] {
            assert!(Timestamp::parse(bad).is_err(), "{bad}");
        }
    }
}
