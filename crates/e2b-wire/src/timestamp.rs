//! `google.protobuf.Timestamp`, with the proto3 JSON form the SDKs' parsers demand.
//!
//! Why not `pbjson_types::Timestamp`: it writes `2026-01-01T00:00:00.500+00:00`, and the npm SDK's
//! parser (`@bufbuild/protobuf`) accepts a fraction only before a `Z`
//! (`(?:Z|\.([0-9]{3,9})Z|[+-]hh:mm)`), so every listed file's `modifiedTime` would fail to
//! parse there. Proto3 JSON prescribes what is written here: UTC with `Z`, and 0, 3, 6 or 9
//! fractional digits. Any RFC 3339 offset is accepted when reading.

use std::fmt::Write as _;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

/// A point in time: seconds since the Unix epoch and the nanoseconds past that second
/// (`0..1_000_000_000`, also before the epoch). Proto3 JSON can express years 1 to 9999 only;
/// encoding one outside them is an error, as it is for envd's Go encoder.
#[derive(Clone, Copy, PartialEq, Eq, Hash, prost::Message)]
pub struct Timestamp {
    #[prost(int64, tag = "1")]
    pub seconds: i64,
    #[prost(int32, tag = "2")]
    pub nanos: i32,
}

/// 0001-01-01T00:00:00Z and 9999-12-31T23:59:59Z, proto3 JSON's range.
const MIN_SECONDS: i64 = -62_135_596_800;
const MAX_SECONDS: i64 = 253_402_300_799;

impl From<SystemTime> for Timestamp {
    fn from(time: SystemTime) -> Self {
        let (seconds, nanos) = match time.duration_since(UNIX_EPOCH) {
            Ok(after) => (
                i64::try_from(after.as_secs()).unwrap_or(i64::MAX),
                after.subsec_nanos(),
            ),
            // Before the epoch: step back a whole second and count nanoseconds forward from it.
            Err(before) => {
                let before = before.duration();
                let whole = before.as_secs() as i64 + i64::from(before.subsec_nanos() > 0);
                let forward = Duration::from_secs(whole as u64) - before;
                (-whole, forward.subsec_nanos())
            }
        };
        Timestamp {
            seconds,
            nanos: nanos as i32,
        }
    }
}

impl Timestamp {
    /// The proto3 JSON text, or why there is none.
    fn to_rfc3339(self) -> Result<String, String> {
        if !(MIN_SECONDS..=MAX_SECONDS).contains(&self.seconds) {
            return Err(format!(
                "timestamp {} s is outside years 1 to 9999",
                self.seconds
            ));
        }
        if !(0..1_000_000_000).contains(&self.nanos) {
            return Err(format!("timestamp nanos {} out of range", self.nanos));
        }
        let date_time =
            OffsetDateTime::from_unix_timestamp(self.seconds).map_err(|error| error.to_string())?;
        let mut text = format!(
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
            date_time.year(),
            u8::from(date_time.month()),
            date_time.day(),
            date_time.hour(),
            date_time.minute(),
            date_time.second()
        );
        let nanos = self.nanos;
        // Writing to a String cannot fail.
        let _ = match nanos {
            0 => Ok(()),
            _ if nanos % 1_000_000 == 0 => write!(text, ".{:03}", nanos / 1_000_000),
            _ if nanos % 1_000 == 0 => write!(text, ".{:06}", nanos / 1_000),
            _ => write!(text, ".{nanos:09}"),
        };
        text.push('Z');
        Ok(text)
    }

    fn from_rfc3339(text: &str) -> Result<Timestamp, String> {
        let date_time = OffsetDateTime::parse(text, &Rfc3339)
            .map_err(|error| format!("timestamp {text:?} is not RFC 3339: {error}"))?;
        let timestamp = Timestamp {
            seconds: date_time.unix_timestamp(),
            nanos: date_time.nanosecond() as i32,
        };
        match (MIN_SECONDS..=MAX_SECONDS).contains(&timestamp.seconds) {
            true => Ok(timestamp),
            false => Err(format!("timestamp {text:?} is outside years 1 to 9999")),
        }
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let text = self.to_rfc3339().map_err(serde::ser::Error::custom)?;
        serializer.serialize_str(&text)
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Timestamp::from_rfc3339(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json(seconds: i64, nanos: i32) -> String {
        serde_json::to_string(&Timestamp { seconds, nanos }).unwrap()
    }

    #[test]
    fn written_in_utc_with_z_and_0_3_6_or_9_fraction_digits() {
        assert_eq!(json(0, 0), r#""1970-01-01T00:00:00Z""#);
        assert_eq!(
            json(1_767_225_600, 500_000_000),
            r#""2026-01-01T00:00:00.500Z""#
        );
        assert_eq!(
            json(1_767_225_600, 120_000),
            r#""2026-01-01T00:00:00.000120Z""#
        );
        assert_eq!(
            json(1_767_225_600, 7),
            r#""2026-01-01T00:00:00.000000007Z""#
        );
        assert_eq!(json(-1, 999_999_999), r#""1969-12-31T23:59:59.999999999Z""#);
        assert_eq!(json(MIN_SECONDS, 0), r#""0001-01-01T00:00:00Z""#);
        assert_eq!(json(MAX_SECONDS, 0), r#""9999-12-31T23:59:59Z""#);
    }

    #[test]
    fn outside_the_json_range_is_an_error_not_a_wrong_date() {
        for (seconds, nanos) in [
            (MIN_SECONDS - 1, 0),
            (MAX_SECONDS + 1, 0),
            (i64::MAX, 0),
            (0, -1),
            (0, 1_000_000_000),
        ] {
            let timestamp = Timestamp { seconds, nanos };
            assert!(serde_json::to_string(&timestamp).is_err(), "{timestamp:?}");
        }
        for text in [r#""10000-01-01T00:00:00Z""#, r#""0000-12-31T23:59:59Z""#] {
            assert!(serde_json::from_str::<Timestamp>(text).is_err(), "{text}");
        }
    }

    #[test]
    fn read_with_any_offset_and_fraction() {
        let read = |text: &str| serde_json::from_str::<Timestamp>(text).unwrap();
        let expected = Timestamp {
            seconds: 1_767_225_600,
            nanos: 100_000_000,
        };
        assert_eq!(read(r#""2026-01-01T00:00:00.1Z""#), expected);
        assert_eq!(read(r#""2026-01-01T01:30:00.100+01:30""#), expected);
        assert_eq!(read(r#""2025-12-31T23:00:00.1-01:00""#), expected);
        for bad in [r#""2026-01-01""#, r#""yesterday""#, "17", "null"] {
            assert!(serde_json::from_str::<Timestamp>(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn from_system_time_before_and_after_the_epoch() {
        let after = UNIX_EPOCH + Duration::new(5, 250);
        assert_eq!(
            Timestamp::from(after),
            Timestamp {
                seconds: 5,
                nanos: 250
            }
        );
        let before = UNIX_EPOCH - Duration::new(1, 250);
        assert_eq!(
            Timestamp::from(before),
            Timestamp {
                seconds: -2,
                nanos: 999_999_750
            }
        );
        let whole = UNIX_EPOCH - Duration::from_secs(3);
        assert_eq!(
            Timestamp::from(whole),
            Timestamp {
                seconds: -3,
                nanos: 0
            }
        );
    }
}
