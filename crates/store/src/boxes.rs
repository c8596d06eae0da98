//! Box rows. Every lookup a client can trigger is scoped by tenant; the unscoped ones
//! (`get_box`, `list_all_boxes`) are for the daemon itself (reconciliation, shutdown).

use std::collections::BTreeMap;

use berth_protocol::{BoxId, TenantId};

use crate::box_record::BoxRecord;
use crate::box_rows::COLUMNS;
use crate::db::{Conn, DbError, Optional};
use crate::error::{sql, StoreError};
use crate::quota::{self, TemplateDisk};
use crate::sleep::SleepSettings;
use crate::state::BoxState;
use crate::{format_time, now, Store};
use time::OffsetDateTime;

/// What the caller decides about a new box; the store adds the slot, state and times.
#[derive(Debug, Clone, PartialEq)]
pub struct NewBox {
    pub id: BoxId,
    pub tenant_id: TenantId,
    pub name: String,
    pub template: String,
    pub memory_mib: u64,
    pub pids: u64,
    pub cpus: f64,
    pub sleep: SleepSettings,
    /// The box's own egress policy as JSON (the daemon validates and serialises it; the
    /// store does not look inside). `None`: the box uses its template's.
    pub egress: Option<String>,
    /// The runtime the box runs on (`sandbox`, `qemu`), fixed for its life.
    pub runtime: String,
    /// The box's own volume size; `None`: its template's.
    pub disk_mib: Option<u64>,
    /// The tenant's key/value labels (the daemon validates them).
    pub labels: BTreeMap<String, String>,
    /// Variables for the box's processes; not secrets (stored in plain text).
    pub env: BTreeMap<String, String>,
}

/// The result of a statement that gives a box a name: a name its tenant already uses is
/// [`StoreError::NameTaken`]. The statement's transaction is spent (Postgres aborts it), so
/// the error must end it.
pub(crate) fn named(
    result: Result<usize, DbError>,
    name: &str,
    action: &'static str,
) -> Result<usize, StoreError> {
    match result {
        Err(e) if e.is_unique_violation("boxes", &["tenant_id", "name"]) => {
            Err(StoreError::NameTaken {
                name: name.to_owned(),
            })
        }
        other => other.map_err(sql(action)),
    }
}

/// A map of strings as the store keeps it.
pub(crate) fn labels_json(map: &BTreeMap<String, String>) -> String {
    serde_json::to_string(map).expect("a map of strings serialises")
}

/// What a new box is admitted against besides its tenant's quota.
#[derive(Clone, Copy)]
pub struct Admission<'a> {
    /// Slots `0..id_slots` have a host uid range (`IdMap::SLOTS`).
    pub id_slots: u32,
    /// The volume size of a box that has none of its own (its template's, now), for the
    /// tenant's disk quota.
    pub template_disk: TemplateDisk<'a>,
}

impl Admission<'_> {
    /// No limit on slots, and boxes without their own size count nothing against a disk
    /// quota: for tools and tests that make boxes without a template registry.
    pub const UNCHECKED: Admission<'static> = Admission {
        id_slots: u32::MAX,
        template_disk: &|_| 0,
    };
}

impl Store {
    /// [`Store::admit_box`] with [`Admission::UNCHECKED`].
    pub fn insert_box(&self, new: &NewBox) -> Result<BoxRecord, StoreError> {
        self.admit_box(new, Admission::UNCHECKED)
    }

    /// Inserts a `stopped` box with the lowest free id slot, if its tenant's quota (boxes,
    /// memory, disk) has room for it: the check and the insert are one transaction, so
    /// concurrent creates cannot both take the last unit. A name the tenant already uses is
    /// [`StoreError::NameTaken`]; over quota, [`StoreError::QuotaExceeded`].
    pub fn admit_box(&self, new: &NewBox, admit: Admission<'_>) -> Result<BoxRecord, StoreError> {
        let (slot, at) = self.db.write(|tx| admit_in(tx, new, &admit, None))?;
        Ok(new_record(new, slot, at, None))
    }

    /// The tenant's box with this id.
    pub fn get_box_by_id(
        &self,
        tenant: &TenantId,
        id: &BoxId,
    ) -> Result<Option<BoxRecord>, StoreError> {
        self.query_one(
            &format!("SELECT {COLUMNS} FROM boxes WHERE tenant_id = ?1 AND id = ?2"),
            crate::args![tenant.as_str(), id.as_str()],
        )
    }

    /// The tenant's box with this name.
    pub fn get_box_by_name(
        &self,
        tenant: &TenantId,
        name: &str,
    ) -> Result<Option<BoxRecord>, StoreError> {
        self.query_one(
            &format!("SELECT {COLUMNS} FROM boxes WHERE tenant_id = ?1 AND name = ?2"),
            crate::args![tenant.as_str(), name],
        )
    }

    /// Any tenant's box: for the daemon's own bookkeeping, never for a client lookup.
    pub fn get_box(&self, id: &BoxId) -> Result<Option<BoxRecord>, StoreError> {
        self.query_one(
            &format!("SELECT {COLUMNS} FROM boxes WHERE id = ?1"),
            crate::args![id.as_str()],
        )
    }

    /// The tenant's boxes, oldest first.
    pub fn list_boxes(&self, tenant: &TenantId) -> Result<Vec<BoxRecord>, StoreError> {
        self.query_many(
            &format!("SELECT {COLUMNS} FROM boxes WHERE tenant_id = ?1 ORDER BY id_slot"),
            crate::args![tenant.as_str()],
        )
    }

    /// Every box of every tenant (reconciliation, shutdown).
    pub fn list_all_boxes(&self) -> Result<Vec<BoxRecord>, StoreError> {
        self.query_many(
            &format!("SELECT {COLUMNS} FROM boxes ORDER BY id_slot"),
            crate::args![],
        )
    }

    /// The boxes that live on node `node` (its id), or with `None` those on no node (a
    /// single host's): what one daemon reconciles, reclaims and stops.
    pub fn list_boxes_on_node(&self, node: Option<&str>) -> Result<Vec<BoxRecord>, StoreError> {
        self.query_many(
            &format!(
                "SELECT {COLUMNS} FROM boxes WHERE COALESCE(node_id, '') = ?1 ORDER BY id_slot"
            ),
            crate::args![node.unwrap_or("")],
        )
    }

    /// How many boxes are in each state (`/metrics`), without reading their rows.
    pub fn count_boxes_by_state(&self) -> Result<Vec<(BoxState, u64)>, StoreError> {
        let counts: Vec<(String, u64)> = self.db.read(|c| {
            c.query_map(
                "SELECT state, COUNT(*) FROM boxes GROUP BY state",
                crate::args![],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .map_err(sql("count boxes by state"))
        })?;
        counts
            .into_iter()
            .map(|(state, count)| Ok((crate::box_rows::parse_state(&state)?, count)))
            .collect()
    }

    /// Moves a stopped or failed box to another runtime (its volume goes with it: one image
    /// format for every runtime) if its generation is still `expected_generation`; returns
    /// the new generation. A box that may have processes keeps its runtime.
    pub fn set_box_runtime(
        &self,
        id: &BoxId,
        expected_generation: u64,
        runtime: &str,
    ) -> Result<u64, StoreError> {
        let at = format_time(now())?;
        let n = self.db.write(|tx| {
            tx.execute(
                "UPDATE boxes SET runtime = ?1, generation = generation + 1, updated_at = ?2 \
                 WHERE id = ?3 AND generation = ?4 AND state IN ('stopped', 'failed')",
                crate::args![runtime, at, id.as_str(), expected_generation],
            )
            .map_err(sql("change a box's runtime"))
        })?;
        if n == 1 {
            return Ok(expected_generation + 1);
        }
        let Some(record) = self.get_box(id)? else {
            return Err(StoreError::BoxNotFound { id: id.clone() });
        };
        if record.generation != expected_generation {
            return Err(StoreError::StaleGeneration {
                id: id.clone(),
                expected: expected_generation,
                actual: record.generation,
            });
        }
        Err(StoreError::NotStopped {
            id: id.clone(),
            state: record.state,
        })
    }

    /// The stored boot token of the box's running boot, if any.
    pub fn boot_token(&self, id: &BoxId) -> Result<Option<String>, StoreError> {
        let token: Option<Option<String>> = self
            .db
            .read(|c| {
                c.query_row(
                    "SELECT boot_token FROM boxes WHERE id = ?1",
                    crate::args![id.as_str()],
                    |row| row.get(0),
                )
                .optional()
            })
            .map_err(sql("read a boot token"))?;
        token.ok_or_else(|| StoreError::BoxNotFound { id: id.clone() })
    }

    /// Deletes the box's row. Deleting a missing box is `Ok(false)`. Its id slot is free
    /// for the next box at once: the caller must have removed the box's files, mounts and
    /// processes first (the daemon deletes through [`Store::update_box_state`] to
    /// `Deleted`, after the runtime's `remove`).
    pub fn delete_box(&self, id: &BoxId) -> Result<bool, StoreError> {
        let n = self.db.write(|tx| {
            tx.execute("DELETE FROM boxes WHERE id = ?1", crate::args![id.as_str()])
                .map_err(sql("delete a box"))
        })?;
        Ok(n > 0)
    }
}

/// The lowest id slot below `limit` that no box holds.
/// Checks the tenant's quota and inserts the `stopped` box on node `node_id` (none on a
/// single host), inside the caller's transaction; returns its id slot and creation time.
pub(crate) fn admit_in(
    tx: &Conn<'_>,
    new: &NewBox,
    admit: &Admission<'_>,
    node_id: Option<&str>,
) -> Result<(u32, OffsetDateTime), StoreError> {
    let new_use = quota::NewUse {
        memory_mib: new.memory_mib,
        disk_mib: new.disk_mib,
        template: &new.template,
        running: false,
    };
    quota::check_new_box(tx, &new.tenant_id, new_use, admit.template_disk)?;
    let slot = free_slot(tx, admit.id_slots)?;
    let at = now();
    let at_text = format_time(at)?;
    let inserted = tx.execute(
            "INSERT INTO boxes (id, tenant_id, name, template, state, state_reason, memory_mib, pids, \
             cpus, id_slot, generation, created_at, updated_at, stop_after_s, egress, runtime, \
             disk_mib, labels, env, pause_after_s, snapshot_after_s, auto_resume, node_id) \
             VALUES (?1, ?2, ?3, ?4, ?5, NULL, ?6, ?7, ?8, ?9, 1, ?10, ?10, ?11, ?12, ?13, ?14, ?15, ?16, \
             ?17, ?18, ?19, ?20)",
            crate::args![
                new.id.as_str(),
                new.tenant_id.as_str(),
                new.name,
                new.template,
                BoxState::Stopped.as_str(),
                new.memory_mib,
                new.pids,
                new.cpus,
                slot,
                at_text,
                new.sleep.stop_after_s,
                new.egress,
                new.runtime,
                new.disk_mib,
                labels_json(&new.labels),
                labels_json(&new.env),
                new.sleep.pause_after_s,
                new.sleep.snapshot_after_s,
                new.sleep.auto_resume,
                node_id,
            ],
        );
    named(inserted, &new.name, "insert a box")?;
    Ok((slot, at))
}

/// The record of a box just inserted by [`admit_in`].
pub(crate) fn new_record(
    new: &NewBox,
    slot: u32,
    at: OffsetDateTime,
    node_id: Option<&str>,
) -> BoxRecord {
    BoxRecord {
        id: new.id.clone(),
        tenant_id: new.tenant_id.clone(),
        name: new.name.clone(),
        template: new.template.clone(),
        state: BoxState::Stopped,
        state_reason: None,
        memory_mib: new.memory_mib,
        pids: new.pids,
        cpus: new.cpus,
        stop_after_s: new.sleep.stop_after_s,
        pause_after_s: new.sleep.pause_after_s,
        snapshot_after_s: new.sleep.snapshot_after_s,
        auto_resume: new.sleep.auto_resume,
        id_slot: slot,
        generation: 1,
        created_at: at,
        updated_at: at,
        egress: new.egress.clone(),
        runtime: new.runtime.clone(),
        disk_mib: new.disk_mib,
        labels: new.labels.clone(),
        env: new.env.clone(),
        pending_limits: None,
        failure: None,
        last_boot: None,
        node_id: node_id.map(str::to_owned),
        durable: None,
        volume_epoch: 0,
    }
}

fn free_slot(tx: &Conn<'_>, limit: u32) -> Result<u32, StoreError> {
    let slot: i64 = tx
        .query_row(
            "SELECT MIN(candidate) FROM (SELECT 0 AS candidate UNION ALL SELECT id_slot + 1 FROM boxes) \
             AS candidates WHERE candidate NOT IN (SELECT id_slot FROM boxes)",
            crate::args![],
            |row| row.get(0),
        )
        .map_err(sql("find a free id slot"))?;
    u32::try_from(slot)
        .ok()
        .filter(|slot| *slot < limit)
        .ok_or(StoreError::NoIdSlot { limit })
}
