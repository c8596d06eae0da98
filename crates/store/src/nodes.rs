//! The machines of a cluster: each `berth node` registers itself (its address, this boot's
//! id, its capacity and labels) and renews a lease on its row every few seconds. A node
//! whose lease ran out is gone: the work queued for it is failed with that reason, never
//! left waiting. A node that starts again registers a new boot: what its previous boot had
//! claimed and not finished is failed too (that process is dead, and so is its work).

use std::collections::BTreeMap;
use std::time::Duration;

use time::OffsetDateTime;

use crate::db::{Conn, Optional, Row};
use crate::error::{sql, StoreError};
use crate::{format_time, hex, now, parse_time, random, Store};

/// What a node says of itself at each start.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeRegistration {
    /// Unique in the cluster (the machine's host name, usually).
    pub name: String,
    /// `host:port` where the node answers the API tier.
    pub address: String,
    /// New at each start of the node's process.
    pub boot_id: String,
    pub cpus: f64,
    pub memory_mib: u64,
    pub labels: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeState {
    /// Takes new boxes.
    Active,
    /// Keeps its boxes, takes no new ones.
    Draining,
}

impl NodeState {
    pub fn as_str(self) -> &'static str {
        match self {
            NodeState::Active => "active",
            NodeState::Draining => "draining",
        }
    }

    fn parse(value: &str) -> Result<NodeState, StoreError> {
        match value {
            "active" => Ok(NodeState::Active),
            "draining" => Ok(NodeState::Draining),
            other => Err(StoreError::CorruptValue {
                column: "nodes.state",
                value: other.to_owned(),
            }),
        }
    }
}

/// What a node uses, as it measures itself at each renewal.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct NodeUsage {
    /// CPUs busy (the load average over a minute).
    pub cpus: f64,
    pub memory_mib: u64,
}

/// A node as stored, with what it holds.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeRecord {
    pub id: String,
    pub name: String,
    pub address: String,
    pub boot_id: String,
    pub cpus: f64,
    pub memory_mib: u64,
    pub labels: BTreeMap<String, String>,
    pub state: NodeState,
    /// Milliseconds since the node last renewed its lease (database clock).
    pub lease_age_ms: i64,
    /// Whether its lease still runs.
    pub live: bool,
    pub registered_at: OffsetDateTime,
    /// Boxes placed on it, and what those not stopped reserve of it.
    pub boxes: u64,
    pub reserved_cpus: f64,
    pub reserved_memory_mib: u64,
    /// What it said it uses at its last renewal.
    pub used: NodeUsage,
}

/// What a replica needs to reach a node: where, which boot, whether its lease runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeRoute {
    pub id: String,
    pub name: String,
    pub address: String,
    pub boot_id: String,
    /// Milliseconds its lease has been expired (0 or less: it runs).
    pub lapsed_ms: i64,
}

impl NodeRoute {
    pub fn live(&self) -> bool {
        self.lapsed_ms < 0
    }
}

/// What [`Store::register_node`] did.
#[derive(Debug, Clone, PartialEq)]
pub struct Registered {
    pub node: NodeRecord,
    /// Ops the node's previous boot had claimed, now failed.
    pub failed_ops: usize,
}

fn ttl_ms(ttl: Duration) -> i64 {
    i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX / 2)
}

const COLUMNS: &str = "n.id, n.name, n.address, n.boot_id, n.cpus, n.memory_mib, n.labels, \
    n.state, n.renewed_ms, n.lease_expires_ms, n.registered_at, \
    (SELECT COUNT(*) FROM boxes b WHERE b.node_id = n.id), \
    (SELECT COALESCE(SUM(b.cpus), 0) FROM boxes b WHERE b.node_id = n.id AND b.state <> 'stopped'), \
    (SELECT COALESCE(CAST(SUM(b.memory_mib) AS BIGINT), 0) FROM boxes b \
     WHERE b.node_id = n.id AND b.state <> 'stopped'), n.used_cpus, n.used_memory_mib";

fn node_row(row: &Row, now_ms: i64) -> Result<NodeRecord, StoreError> {
    let labels: String = row.get(6).map_err(sql("read a node"))?;
    let state: String = row.get(7).map_err(sql("read a node"))?;
    let renewed_ms: i64 = row.get(8).map_err(sql("read a node"))?;
    let expires_ms: i64 = row.get(9).map_err(sql("read a node"))?;
    let registered_at: String = row.get(10).map_err(sql("read a node"))?;
    Ok(NodeRecord {
        id: row.get(0).map_err(sql("read a node"))?,
        name: row.get(1).map_err(sql("read a node"))?,
        address: row.get(2).map_err(sql("read a node"))?,
        boot_id: row.get(3).map_err(sql("read a node"))?,
        cpus: row.get(4).map_err(sql("read a node"))?,
        memory_mib: row.get(5).map_err(sql("read a node"))?,
        labels: serde_json::from_str(&labels).map_err(|source| StoreError::CorruptJson {
            column: "nodes.labels",
            source,
        })?,
        state: NodeState::parse(&state)?,
        lease_age_ms: now_ms - renewed_ms,
        live: expires_ms > now_ms,
        registered_at: parse_time("nodes.registered_at", &registered_at)?,
        boxes: row.get(11).map_err(sql("read a node"))?,
        reserved_cpus: row.get(12).map_err(sql("read a node"))?,
        reserved_memory_mib: row.get(13).map_err(sql("read a node"))?,
        used: NodeUsage {
            cpus: row.get(14).map_err(sql("read a node"))?,
            memory_mib: row.get(15).map_err(sql("read a node"))?,
        },
    })
}

fn read_node(conn: &Conn<'_>, column: &str, value: &str) -> Result<Option<NodeRecord>, StoreError> {
    let now_ms = conn.now_ms().map_err(sql("read the database's clock"))?;
    let query = format!("SELECT {COLUMNS} FROM nodes n WHERE n.{column} = ?1");
    let row = conn
        .query_row(&query, crate::args![value], |row| Ok(row.clone()))
        .optional()
        .map_err(sql("read a node"))?;
    row.map(|row| node_row(&row, now_ms)).transpose()
}

/// Fails the ops `node_id`'s boots other than `keep_boot` claimed (or every open op of
/// the node when `keep_boot` is `None`), with `reason`; returns how many.
fn fail_open_ops(
    tx: &Conn<'_>,
    node_id: &str,
    claimed_only_by_other_than: Option<&str>,
    reason: &str,
    now_ms: i64,
) -> Result<usize, StoreError> {
    let changed = match claimed_only_by_other_than {
        Some(boot) => tx.execute(
            "UPDATE ops SET state = 'failed', error = ?1, finished_ms = ?2 \
             WHERE node_id = ?3 AND state = 'claimed' AND claimed_by_boot <> ?4",
            crate::args![reason, now_ms, node_id, boot],
        ),
        None => tx.execute(
            "UPDATE ops SET state = 'failed', error = ?1, finished_ms = ?2 \
             WHERE node_id = ?3 AND state IN ('queued', 'claimed')",
            crate::args![reason, now_ms, node_id],
        ),
    };
    changed.map_err(sql("fail a node's operations"))
}

impl Store {
    /// Registers a node by its name (a new row, or a new boot of a known one) with a lease
    /// of `ttl`.
    pub fn register_node(
        &self,
        registration: &NodeRegistration,
        ttl: Duration,
    ) -> Result<Registered, StoreError> {
        let labels = serde_json::to_string(&registration.labels).expect("strings serialise");
        let fresh_id = format!("node_{}", hex(&random::<8>()?));
        let registered_at = format_time(now())?;
        let failed_ops = self.db.write(|tx| {
            let now_ms = tx.now_ms().map_err(sql("read the database's clock"))?;
            let expires_ms = now_ms.saturating_add(ttl_ms(ttl));
            let known: Option<(String, String)> = tx
                .query_row(
                    "SELECT id, boot_id FROM nodes WHERE name = ?1",
                    crate::args![registration.name],
                    |row| Ok((row.get(0)?, row.get(1)?)),
                )
                .optional()
                .map_err(sql("read a node"))?;
            match known {
                None => {
                    tx.execute(
                        "INSERT INTO nodes (id, name, address, boot_id, cpus, memory_mib, \
                         labels, lease_expires_ms, renewed_ms, registered_at) \
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
                        crate::args![
                            fresh_id,
                            registration.name,
                            registration.address,
                            registration.boot_id,
                            registration.cpus,
                            registration.memory_mib,
                            labels,
                            expires_ms,
                            now_ms,
                            registered_at
                        ],
                    )
                    .map_err(sql("register a node"))?;
                    Ok(0)
                }
                Some((id, _)) => {
                    tx.execute(
                        "UPDATE nodes SET address = ?1, boot_id = ?2, cpus = ?3, memory_mib = ?4, \
                         labels = ?5, lease_expires_ms = ?6, renewed_ms = ?7 WHERE id = ?8",
                        crate::args![
                            registration.address,
                            registration.boot_id,
                            registration.cpus,
                            registration.memory_mib,
                            labels,
                            expires_ms,
                            now_ms,
                            id
                        ],
                    )
                    .map_err(sql("register a node"))?;
                    fail_open_ops(
                        tx,
                        &id,
                        Some(&registration.boot_id),
                        &format!(
                            "node {} restarted (boot {}) before finishing it",
                            registration.name, registration.boot_id
                        ),
                        now_ms,
                    )
                }
            }
        })?;
        let node = self
            .db
            .read(|conn| read_node(conn, "name", &registration.name))?
            .ok_or_else(|| StoreError::NodeNotFound {
                reference: registration.name.clone(),
            })?;
        Ok(Registered { node, failed_ops })
    }

    /// Extends the lease of node `id` by `ttl`, if `boot_id` is the boot its row names, and
    /// records what it uses.
    pub fn renew_node_lease(
        &self,
        id: &str,
        boot_id: &str,
        ttl: Duration,
        usage: NodeUsage,
    ) -> Result<(), StoreError> {
        self.db.write(|tx| {
            let now_ms = tx.now_ms().map_err(sql("read the database's clock"))?;
            let registered: Option<String> = tx
                .query_row(
                    "SELECT boot_id FROM nodes WHERE id = ?1",
                    crate::args![id],
                    |row| row.get(0),
                )
                .optional()
                .map_err(sql("read a node"))?;
            match registered {
                None => Err(StoreError::NodeNotFound {
                    reference: id.to_owned(),
                }),
                Some(registered) if registered != boot_id => Err(StoreError::NodeBootMismatch {
                    node: id.to_owned(),
                    registered,
                    presented: boot_id.to_owned(),
                }),
                Some(_) => {
                    tx.execute(
                        "UPDATE nodes SET lease_expires_ms = ?1, renewed_ms = ?2, used_cpus = ?3, \
                         used_memory_mib = ?4 WHERE id = ?5",
                        crate::args![
                            now_ms.saturating_add(ttl_ms(ttl)),
                            now_ms,
                            usage.cpus,
                            usage.memory_mib,
                            id
                        ],
                    )
                    .map_err(sql("renew a node's lease"))?;
                    Ok(())
                }
            }
        })
    }

    /// Every node, by name.
    pub fn list_nodes(&self) -> Result<Vec<NodeRecord>, StoreError> {
        self.db.read(|conn| {
            let now_ms = conn.now_ms().map_err(sql("read the database's clock"))?;
            let query = format!("SELECT {COLUMNS} FROM nodes n ORDER BY n.name");
            let rows = conn
                .query_map(&query, crate::args![], |row| Ok(row.clone()))
                .map_err(sql("list nodes"))?;
            rows.iter().map(|row| node_row(row, now_ms)).collect()
        })
    }

    /// The node named `reference` (its name or its id).
    pub fn node(&self, reference: &str) -> Result<Option<NodeRecord>, StoreError> {
        self.db
            .read(|conn| match read_node(conn, "name", reference)? {
                Some(node) => Ok(Some(node)),
                None => read_node(conn, "id", reference),
            })
    }

    /// How to reach node `id` (one row, none of the counts [`Store::node`] adds up): what a
    /// replica reads on every call it forwards.
    pub fn node_route(&self, id: &str) -> Result<Option<NodeRoute>, StoreError> {
        self.db.read(|conn| {
            let now_ms = conn.now_ms().map_err(sql("read the database's clock"))?;
            conn.query_row(
                "SELECT id, name, address, boot_id, lease_expires_ms FROM nodes WHERE id = ?1",
                crate::args![id],
                |row| {
                    Ok(NodeRoute {
                        id: row.get(0)?,
                        name: row.get(1)?,
                        address: row.get(2)?,
                        boot_id: row.get(3)?,
                        lapsed_ms: now_ms - row.get::<i64>(4)?,
                    })
                },
            )
            .optional()
            .map_err(sql("read a node"))
        })
    }

    /// Marks the node `id` active or draining.
    pub fn set_node_state(&self, id: &str, state: NodeState) -> Result<(), StoreError> {
        self.db.write(|tx| {
            let changed = tx
                .execute(
                    "UPDATE nodes SET state = ?1 WHERE id = ?2",
                    crate::args![state.as_str(), id],
                )
                .map_err(sql("change a node's state"))?;
            if changed == 0 {
                return Err(StoreError::NodeNotFound {
                    reference: id.to_owned(),
                });
            }
            Ok(())
        })
    }

    /// Fails the open ops of every node whose lease has run out, each with the reason;
    /// returns how many. Run by whoever notices first (any API replica, on a timer).
    pub fn fail_ops_of_lapsed_nodes(&self) -> Result<usize, StoreError> {
        self.db.write(|tx| {
            let now_ms = tx.now_ms().map_err(sql("read the database's clock"))?;
            let lapsed = tx
                .query_map(
                    "SELECT DISTINCT n.id, n.name, n.lease_expires_ms FROM nodes n \
                     JOIN ops o ON o.node_id = n.id \
                     WHERE n.lease_expires_ms <= ?1 AND o.state IN ('queued', 'claimed')",
                    crate::args![now_ms],
                    |row| {
                        Ok((
                            row.get::<String>(0)?,
                            row.get::<String>(1)?,
                            row.get::<i64>(2)?,
                        ))
                    },
                )
                .map_err(sql("find lapsed nodes"))?;
            let mut failed = 0;
            for (id, name, expired_ms) in lapsed {
                let reason = format!(
                    "node {name} is gone: its lease ran out {} ms ago",
                    now_ms - expired_ms
                );
                failed += fail_open_ops(tx, &id, None, &reason, now_ms)?;
            }
            Ok(failed)
        })
    }
}
