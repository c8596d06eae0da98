//! A box's memory through time: snapshots of `/memory` (at each stop and on request),
//! what changed between two, and a restore (`/v1/boxes/{ref}/memory/snapshots…`,
//! `…/memory/restore`).

use serde::{Deserialize, Serialize};

/// Why a snapshot was taken.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SnapshotReason {
    /// The box stopped or went to sleep.
    Stop,
    /// `POST …/memory/snapshots`.
    Request,
    /// The state a restore replaced, kept so that nothing is lost.
    BeforeRestore,
}

/// One snapshot of a box's `/memory`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemorySnapshot {
    /// `ms_` and its time in milliseconds: snapshots sort by id as by time.
    pub id: String,
    /// RFC 3339, UTC.
    pub taken_at: String,
    pub reason: SnapshotReason,
    /// Regular files in it.
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
    /// What this snapshot added to the store, compressed: about the size of what changed.
    pub stored_bytes: u64,
    /// The snapshot's content hash: two snapshots with the same root hold the same tree.
    pub root: String,
}

/// `GET …/memory/snapshots`: oldest first.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemorySnapshotList {
    pub snapshots: Vec<MemorySnapshot>,
}

/// One entry of a snapshot (`GET …/memory/snapshots/{id}`).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotEntry {
    pub path: String,
    /// `file` or `dir`.
    pub kind: crate::guest::FileKind,
    pub size: u64,
}

/// `GET …/memory/snapshots/{id}`: the snapshot and everything in it.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemorySnapshotTree {
    pub snapshot: MemorySnapshot,
    pub entries: Vec<SnapshotEntry>,
}

/// How a path differs between two snapshots.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    Added,
    Removed,
    Modified,
}

/// One changed file.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryChange {
    pub path: String,
    pub change: ChangeKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_before: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_after: Option<u64>,
    /// A unified diff of the file's text (3 lines of context), when the diff was asked for
    /// one path and both sides are text of at most 1 MiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patch: Option<String>,
}

/// `GET …/memory/snapshots/{id}/diff?to=…`: what changed from `from` to `to`, by path.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryDiff {
    pub from: String,
    pub to: String,
    pub changes: Vec<MemoryChange>,
}

/// `POST …/memory/restore`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RestoreRequest {
    /// The snapshot to bring back.
    pub snapshot: String,
    /// A file or directory below `/memory` to bring back alone; absent: the whole tree,
    /// which then holds exactly what the snapshot held.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

/// What a restore did.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemoryRestored {
    /// The snapshot brought back.
    pub restored: String,
    /// The snapshot of the memory as it was just before: restore it to undo this one.
    pub before: MemorySnapshot,
    /// Files written back (those that differed from what stood in the box).
    pub files: u64,
    /// Files removed because the snapshot did not hold them (a whole-tree or directory
    /// restore).
    pub removed: u64,
}

/// How long snapshots are kept: all of the last `all_days`, then the newest of each day
/// for `daily_days`, then the newest of each week for `weekly_weeks`; older ones go.
/// The newest snapshot is always kept.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Retention {
    pub all_days: u32,
    pub daily_days: u32,
    pub weekly_weeks: u32,
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            all_days: 1,
            daily_days: 30,
            weekly_weeks: 52,
        }
    }
}

impl Retention {
    /// Which of `taken` (unix seconds, any order) to keep at `now`: a bool per entry.
    pub fn keep(&self, taken: &[i64], now: i64) -> Vec<bool> {
        const DAY: i64 = 86_400;
        let mut order: Vec<usize> = (0..taken.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(taken[i]));
        let mut keep = vec![false; taken.len()];
        let mut days_seen = std::collections::HashSet::new();
        let mut weeks_seen = std::collections::HashSet::new();
        let all = i64::from(self.all_days) * DAY;
        let daily = all + i64::from(self.daily_days) * DAY;
        let weekly = i64::from(self.weekly_weeks) * 7 * DAY;
        for (rank, &i) in order.iter().enumerate() {
            let age = now.saturating_sub(taken[i]);
            keep[i] = rank == 0
                || age < all
                || if age < daily {
                    days_seen.insert(taken[i].div_euclid(DAY))
                } else {
                    age < weekly && weeks_seen.insert(taken[i].div_euclid(7 * DAY))
                };
        }
        keep
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retention_keeps_the_last_day_then_a_day_then_a_week() {
        const DAY: i64 = 86_400;
        let now = 1_000 * DAY;
        // Every 6 hours over 400 days.
        let taken: Vec<i64> = (0..400 * 4).map(|k| now - k * DAY / 4).collect();
        let keep = Retention::default().keep(&taken, now);
        let kept: Vec<i64> = taken
            .iter()
            .zip(&keep)
            .filter(|(_, k)| **k)
            .map(|(t, _)| *t)
            .collect();
        // The last day whole (4), one a day for 30 more, one a week to a year.
        assert_eq!(kept.iter().filter(|t| now - **t < DAY).count(), 4);
        let daily = kept
            .iter()
            .filter(|t| (DAY..31 * DAY).contains(&(now - **t)))
            .count();
        assert!((29..=31).contains(&daily), "{daily}");
        assert!(kept.iter().all(|t| now - *t < 52 * 7 * DAY));
        assert!(kept.len() < 4 + 31 + 52, "{}", kept.len());
        // The newest is kept even when everything is old.
        let old = [now - 900 * DAY, now - 901 * DAY];
        assert_eq!(Retention::default().keep(&old, now), [true, false]);
    }
}
