//! When a wakeup's slots are: the first from what was asked (`at`, `in_s`, or a cron
//! expression in an IANA time zone), the next of a cron after a slot fired. Cron is
//! evaluated by `croner` in the zone (`chrono-tz`), so daylight-saving changes are the
//! crate's: a local time skipped by a spring-forward fires at the first instant after the
//! gap, and one repeated by a fall-back fires once.

use std::str::FromStr;

use berth_protocol::wake::WakeSchedule;
use berth_store::{WakeupKind, WakeupOrigin};
use chrono::{DateTime, TimeZone, Utc};
use croner::parser::{CronParser, Seconds, Year};
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;

use super::config::WakeupsHostConfig;
use super::error::WakeupError;

/// Farthest a wakeup may be set ahead (about ten years).
pub const MAX_AHEAD_S: u64 = 10 * 366 * 24 * 3600;
/// Cron slots checked for their spacing when a cron wakeup is made.
const SPACING_SAMPLE: usize = 24;

/// The kind and first slot of a wakeup about to be made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub kind: WakeupKind,
    pub first_due_ms: i64,
}

/// Checks what was asked against the limits for `origin` and finds the first slot.
pub fn plan(
    asked: &WakeSchedule,
    now_ms: i64,
    origin: WakeupOrigin,
    limits: &WakeupsHostConfig,
) -> Result<Plan, WakeupError> {
    let min_delay_ms = match origin {
        WakeupOrigin::Api => 0,
        WakeupOrigin::Box => secs_ms(limits.box_min_delay_s),
    };
    let max_ms = now_ms.saturating_add(secs_ms(MAX_AHEAD_S));
    if asked.tz.is_some() && asked.cron.is_none() {
        return Err(WakeupError::TzWithoutCron);
    }
    let (kind, first_due_ms) = match (&asked.at, asked.in_s, &asked.cron) {
        (Some(at), None, None) => {
            let t = OffsetDateTime::parse(at, &Rfc3339).map_err(|source| WakeupError::BadTime {
                value: at.clone(),
                source,
            })?;
            let due = (t.unix_timestamp_nanos() / 1_000_000) as i64;
            if due < now_ms {
                return Err(WakeupError::InPast { at: at.clone() });
            }
            (WakeupKind::At, due)
        }
        (None, Some(in_s), None) => (WakeupKind::In, now_ms.saturating_add(secs_ms(in_s))),
        (None, None, Some(expr)) => {
            let tz = asked.tz.clone().unwrap_or_else(|| "UTC".to_owned());
            let cron = Cron::parse(expr, &tz)?;
            let min_gap_s = match origin {
                WakeupOrigin::Api => limits.cron_min_interval_s,
                WakeupOrigin::Box => limits.cron_min_interval_s.max(limits.box_min_delay_s),
            };
            cron.check_spacing(now_ms, min_gap_s)?;
            // A box's cron starts no sooner than its minimum delay.
            let first = cron
                .next_after(now_ms.saturating_add(min_delay_ms).saturating_sub(1))?
                .ok_or_else(|| WakeupError::CronNeverFires { expr: expr.clone() })?;
            (
                WakeupKind::Cron {
                    expr: expr.clone(),
                    tz,
                },
                first,
            )
        }
        _ => return Err(WakeupError::ScheduleCount),
    };
    if first_due_ms < now_ms.saturating_add(min_delay_ms) {
        return Err(WakeupError::TooSoon {
            min_delay_s: limits.box_min_delay_s,
        });
    }
    if first_due_ms > max_ms {
        return Err(WakeupError::TooFar { max_s: MAX_AHEAD_S });
    }
    Ok(Plan { kind, first_due_ms })
}

/// The slot after `after_ms` of a stored wakeup: `None` for one-shot kinds and for a cron
/// with no more matches.
pub fn next_slot(kind: &WakeupKind, after_ms: i64) -> Result<Option<i64>, WakeupError> {
    match kind {
        WakeupKind::At | WakeupKind::In => Ok(None),
        WakeupKind::Cron { expr, tz } => Cron::parse(expr, tz)?.next_after(after_ms),
    }
}

/// A parsed 5-field expression and its zone.
#[derive(Debug)]
pub struct Cron {
    expr: String,
    pattern: croner::Cron,
    tz: chrono_tz::Tz,
}

impl Cron {
    pub fn parse(expr: &str, tz: &str) -> Result<Cron, WakeupError> {
        if expr.split_whitespace().count() != 5 {
            return Err(WakeupError::CronFields {
                expr: expr.to_owned(),
            });
        }
        let pattern = CronParser::builder()
            .seconds(Seconds::Disallowed)
            .year(Year::Disallowed)
            .build()
            .parse(expr)
            .map_err(|source| WakeupError::BadCron {
                expr: expr.to_owned(),
                source,
            })?;
        let tz =
            chrono_tz::Tz::from_str(tz).map_err(|_| WakeupError::BadTz { tz: tz.to_owned() })?;
        Ok(Cron {
            expr: expr.to_owned(),
            pattern,
            tz,
        })
    }

    /// The first match strictly after `after_ms`, Unix milliseconds.
    pub fn next_after(&self, after_ms: i64) -> Result<Option<i64>, WakeupError> {
        // Whole seconds: the crate keeps the sub-second part in what it answers.
        let Some(after) = Utc.timestamp_opt(after_ms.div_euclid(1000), 0).single() else {
            return Ok(None);
        };
        let local: DateTime<chrono_tz::Tz> = after.with_timezone(&self.tz);
        match self.pattern.find_next_occurrence(&local, false) {
            Ok(next) => Ok(Some(next.timestamp_millis())),
            // Out of the crate's year range: no more slots.
            Err(_) => Ok(None),
        }
    }

    /// Refuses an expression whose slots come closer together than `min_gap_s` (looked at
    /// over its next slots, which covers every-N-minutes and hourly lists).
    fn check_spacing(&self, now_ms: i64, min_gap_s: u64) -> Result<(), WakeupError> {
        let min_gap_ms = secs_ms(min_gap_s);
        let mut last = match self.next_after(now_ms)? {
            Some(first) => first,
            None => {
                return Err(WakeupError::CronNeverFires {
                    expr: self.expr.clone(),
                })
            }
        };
        for _ in 0..SPACING_SAMPLE {
            let Some(next) = self.next_after(last)? else {
                break;
            };
            if next - last < min_gap_ms {
                return Err(WakeupError::CronTooOften {
                    expr: self.expr.clone(),
                    min_interval_s: min_gap_s,
                });
            }
            last = next;
        }
        Ok(())
    }
}

fn secs_ms(s: u64) -> i64 {
    i64::try_from(s.saturating_mul(1000)).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(rfc3339: &str) -> i64 {
        (OffsetDateTime::parse(rfc3339, &Rfc3339)
            .unwrap()
            .unix_timestamp_nanos()
            / 1_000_000) as i64
    }

    fn cron(expr: &str, tz: Option<&str>) -> WakeSchedule {
        WakeSchedule {
            cron: Some(expr.into()),
            tz: tz.map(Into::into),
            ..Default::default()
        }
    }

    #[test]
    fn weekday_mornings_in_paris_skip_the_weekend_and_follow_dst() {
        let c = Cron::parse("0 9 * * 1-5", "Europe/Paris").unwrap();
        // Friday 2026-03-27 09:00 CET (UTC+1) → Monday 2026-03-30 09:00 CEST (UTC+2).
        let fri = ms("2026-03-27T08:00:00Z");
        assert_eq!(c.next_after(fri).unwrap(), Some(ms("2026-03-30T07:00:00Z")));
        // Just before Friday's slot, it is Friday's slot.
        assert_eq!(
            c.next_after(fri - 1).unwrap(),
            Some(ms("2026-03-27T08:00:00Z"))
        );
    }

    #[test]
    fn a_time_skipped_by_spring_forward_fires_once_after_the_gap() {
        // 02:30 does not exist in Paris on 2026-03-29 (02:00 → 03:00).
        let c = Cron::parse("30 2 * * *", "Europe/Paris").unwrap();
        let first = c.next_after(ms("2026-03-28T12:00:00Z")).unwrap().unwrap();
        let second = c.next_after(first).unwrap().unwrap();
        let third = c.next_after(second).unwrap().unwrap();
        // The first instant after the gap: 03:00 CEST.
        assert_eq!(first, ms("2026-03-29T01:00:00Z"));
        assert!(second > first && third > second, "slots only move forward");
        assert_eq!(third, ms("2026-03-31T00:30:00Z"));
    }

    #[test]
    fn utc_is_the_default_zone_and_every_minute_is_the_floor() {
        let limits = WakeupsHostConfig::default();
        let now = ms("2026-12-01T22:15:30Z");
        let p = plan(&cron("*/5 * * * *", None), now, WakeupOrigin::Api, &limits).unwrap();
        assert_eq!(p.first_due_ms, ms("2026-12-01T22:20:00Z"));
        assert_eq!(
            p.kind,
            WakeupKind::Cron {
                expr: "*/5 * * * *".into(),
                tz: "UTC".into()
            }
        );
        // Six fields (seconds) are refused: nothing fires more than once a minute.
        assert!(matches!(
            plan(
                &cron("*/5 * * * * *", None),
                now,
                WakeupOrigin::Api,
                &limits
            ),
            Err(WakeupError::CronFields { .. })
        ));
        let tight = WakeupsHostConfig {
            cron_min_interval_s: 600,
            ..limits.clone()
        };
        assert!(matches!(
            plan(&cron("*/5 * * * *", None), now, WakeupOrigin::Api, &tight),
            Err(WakeupError::CronTooOften {
                min_interval_s: 600,
                ..
            })
        ));
        assert!(matches!(
            plan(
                &cron("0 9 * * *", Some("Mars/Olympus")),
                now,
                WakeupOrigin::Api,
                &limits
            ),
            Err(WakeupError::BadTz { .. })
        ));
    }

    #[test]
    fn a_box_waits_its_minimum_delay() {
        let limits = WakeupsHostConfig::default();
        let now = ms("2026-12-01T22:15:30Z");
        let soon = WakeSchedule {
            in_s: Some(10),
            ..Default::default()
        };
        assert!(plan(&soon, now, WakeupOrigin::Api, &limits).is_ok());
        assert!(matches!(
            plan(&soon, now, WakeupOrigin::Box, &limits),
            Err(WakeupError::TooSoon { min_delay_s: 60 })
        ));
        // Its cron starts a minimum delay out: 22:16 is too close, 22:17 is not.
        let p = plan(&cron("* * * * *", None), now, WakeupOrigin::Box, &limits).unwrap();
        assert_eq!(p.first_due_ms, ms("2026-12-01T22:17:00Z"));
    }

    #[test]
    fn exactly_one_schedule_and_no_past() {
        let limits = WakeupsHostConfig::default();
        let now = ms("2026-12-01T22:15:30Z");
        let both = WakeSchedule {
            in_s: Some(10),
            cron: Some("* * * * *".into()),
            ..Default::default()
        };
        assert!(matches!(
            plan(&both, now, WakeupOrigin::Api, &limits),
            Err(WakeupError::ScheduleCount)
        ));
        assert!(matches!(
            plan(&WakeSchedule::default(), now, WakeupOrigin::Api, &limits),
            Err(WakeupError::ScheduleCount)
        ));
        let past = WakeSchedule {
            at: Some("2026-12-01T22:00:00+01:00".into()),
            ..Default::default()
        };
        assert!(matches!(
            plan(&past, now, WakeupOrigin::Api, &limits),
            Err(WakeupError::InPast { .. })
        ));
        let at = WakeSchedule {
            at: Some("2026-12-02T09:00:00+01:00".into()),
            ..Default::default()
        };
        let p = plan(&at, now, WakeupOrigin::Api, &limits).unwrap();
        assert_eq!(p.first_due_ms, ms("2026-12-02T08:00:00Z"));
        assert_eq!(next_slot(&p.kind, p.first_due_ms).unwrap(), None);
    }
}
