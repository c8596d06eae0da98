//! Box rows as the database holds them, and their typed parse.

use std::collections::BTreeMap;

use crate::box_outcomes::parse_column;
use crate::box_record::{BoxLimits, BoxRecord};
use crate::db::{DbError, Optional, Row, ToArg};
use crate::error::{sql, StoreError};
use crate::state::BoxState;
use crate::{parse_time, Store};

pub(crate) const COLUMNS: &str = "id, tenant_id, name, template, state, state_reason, memory_mib, pids, \
                       cpus, id_slot, generation, created_at, updated_at, stop_after_s, egress, runtime, \
                       disk_mib, labels, env, pending_memory_mib, pending_pids, pending_cpus, pause_after_s, \
                       snapshot_after_s, auto_resume, failure, last_boot, node_id, durable_copy, volume_epoch";

impl Store {
    pub(crate) fn query_one(
        &self,
        query: &str,
        args: &[&dyn ToArg],
    ) -> Result<Option<BoxRecord>, StoreError> {
        let raw = self
            .db
            .read(|c| c.query_row(query, args, RawBox::from_row).optional())
            .map_err(sql("read a box"))?;
        raw.map(RawBox::into_record).transpose()
    }

    pub(crate) fn query_many(
        &self,
        query: &str,
        args: &[&dyn ToArg],
    ) -> Result<Vec<BoxRecord>, StoreError> {
        let raws = self
            .db
            .read(|c| c.query_map(query, args, RawBox::from_row))
            .map_err(sql("list boxes"))?;
        raws.into_iter().map(RawBox::into_record).collect()
    }
}

/// A row as the database returns it, before the typed parse.
pub(crate) struct RawBox {
    id: String,
    tenant_id: String,
    name: String,
    template: String,
    state: String,
    state_reason: Option<String>,
    memory_mib: i64,
    pids: i64,
    cpus: f64,
    id_slot: u32,
    generation: i64,
    created_at: String,
    updated_at: String,
    stop_after_s: i64,
    egress: Option<String>,
    runtime: String,
    disk_mib: Option<i64>,
    labels: String,
    env: String,
    pending: (Option<i64>, Option<i64>, Option<f64>),
    /// `pause_after_s`, `snapshot_after_s`, `auto_resume`.
    sleep: (i64, i64, bool),
    /// `failure`, `last_boot` (JSON).
    outcomes: (Option<String>, Option<String>),
    node_id: Option<String>,
    /// `durable_copy` (JSON), `volume_epoch`.
    volume: (Option<String>, i64),
}

impl RawBox {
    pub(crate) fn from_row(row: &Row) -> Result<RawBox, DbError> {
        Ok(RawBox {
            id: row.get(0)?,
            tenant_id: row.get(1)?,
            name: row.get(2)?,
            template: row.get(3)?,
            state: row.get(4)?,
            state_reason: row.get(5)?,
            memory_mib: row.get(6)?,
            pids: row.get(7)?,
            cpus: row.get(8)?,
            id_slot: row.get(9)?,
            generation: row.get(10)?,
            created_at: row.get(11)?,
            updated_at: row.get(12)?,
            stop_after_s: row.get(13)?,
            egress: row.get(14)?,
            runtime: row.get(15)?,
            disk_mib: row.get(16)?,
            labels: row.get(17)?,
            env: row.get(18)?,
            pending: (row.get(19)?, row.get(20)?, row.get(21)?),
            sleep: (row.get(22)?, row.get(23)?, row.get(24)?),
            outcomes: (row.get(25)?, row.get(26)?),
            node_id: row.get(27)?,
            volume: (row.get(28)?, row.get(29)?),
        })
    }

    pub(crate) fn into_record(self) -> Result<BoxRecord, StoreError> {
        Ok(BoxRecord {
            id: self.id.parse().map_err(|source| StoreError::CorruptId {
                column: "boxes.id",
                source,
            })?,
            tenant_id: self
                .tenant_id
                .parse()
                .map_err(|source| StoreError::CorruptId {
                    column: "boxes.tenant_id",
                    source,
                })?,
            name: self.name,
            template: self.template,
            state: parse_state(&self.state)?,
            state_reason: self.state_reason,
            memory_mib: self.memory_mib as u64,
            pids: self.pids as u64,
            cpus: self.cpus,
            stop_after_s: self.stop_after_s as u64,
            pause_after_s: self.sleep.0 as u64,
            snapshot_after_s: self.sleep.1 as u64,
            auto_resume: self.sleep.2,
            id_slot: self.id_slot,
            generation: self.generation as u64,
            created_at: parse_time("boxes.created_at", &self.created_at)?,
            updated_at: parse_time("boxes.updated_at", &self.updated_at)?,
            egress: self.egress,
            runtime: self.runtime,
            disk_mib: self.disk_mib.map(|d| d as u64),
            labels: parse_map("boxes.labels", &self.labels)?,
            env: parse_map("boxes.env", &self.env)?,
            pending_limits: match self.pending {
                (Some(memory_mib), Some(pids), Some(cpus)) => Some(BoxLimits {
                    memory_mib: memory_mib as u64,
                    pids: pids as u64,
                    cpus,
                }),
                _ => None,
            },
            failure: parse_column(self.outcomes.0),
            last_boot: parse_column(self.outcomes.1),
            node_id: self.node_id,
            durable: parse_column(self.volume.0),
            volume_epoch: self.volume.1 as u64,
        })
    }
}

pub(crate) fn parse_map(
    column: &'static str,
    s: &str,
) -> Result<BTreeMap<String, String>, StoreError> {
    serde_json::from_str(s).map_err(|source| StoreError::CorruptJson { column, source })
}

pub(crate) fn parse_state(s: &str) -> Result<BoxState, StoreError> {
    s.parse().map_err(|source| StoreError::CorruptState {
        column: "boxes.state",
        source,
    })
}
