//! The store's boxes, tenants and keys, on both databases (the `conformance!` block), and
//! what only SQLite has (its PRAGMAs, an older database file upgraded) outside it.

use berth_protocol::{BoxId, TenantId};

use crate::test_db::TestDb;
use crate::{BoxState, NewBox, SleepSettings, Store, StoreError, DB_FILE};

pub(crate) fn new_box(tenant: &TenantId, name: &str) -> NewBox {
    let mut random = [0u8; 20];
    getrandom::fill(&mut random).unwrap();
    NewBox {
        id: BoxId::from_random(random),
        tenant_id: tenant.clone(),
        name: name.into(),
        template: "host".into(),
        memory_mib: 512,
        pids: 256,
        cpus: 1.5,
        sleep: SleepSettings {
            pause_after_s: 0,
            snapshot_after_s: 0,
            stop_after_s: 300,
            auto_resume: true,
        },
        egress: None,
        runtime: "sandbox".into(),
        disk_mib: None,
        labels: Default::default(),
        env: Default::default(),
    }
}

pub(crate) fn open(dir: &tempfile::TempDir) -> Store {
    Store::open(&dir.path().join(DB_FILE)).unwrap()
}

conformance! {
    fn reopening_keeps_tenants_keys_and_boxes(db) {
        let (tenant, key, record) = {
            let store = db.open();
            let tenant = store.create_tenant("acme").unwrap();
            let key = store.create_api_key(&tenant.id, false).unwrap();
            let record = store.insert_box(&new_box(&tenant.id, "alice")).unwrap();
            (tenant, key, record)
        };
        let store = db.open();
        let principal = store.authenticate(&key).unwrap().unwrap();
        assert_eq!(principal.tenant_id, tenant.id);
        assert!(!principal.is_admin);
        assert_eq!(
            store.get_box_by_id(&tenant.id, &record.id).unwrap(),
            Some(record.clone())
        );
        assert_eq!(
            store.get_box_by_name(&tenant.id, "alice").unwrap(),
            Some(record.clone())
        );
        assert_eq!(store.list_boxes(&tenant.id).unwrap(), vec![record.clone()]);
        assert_eq!(store.list_all_boxes().unwrap(), vec![record]);
    }

    fn state_updates_are_generation_checked(db) {
        let store = db.open();
        let tenant = store.create_tenant("acme").unwrap();
        let record = store.insert_box(&new_box(&tenant.id, "alice")).unwrap();
        let g1 = record.generation;
        let g2 = store
            .update_box_state(&record.id, g1, BoxState::Starting, None)
            .unwrap();
        assert_eq!(g2, g1 + 1);
        // A second writer that read generation g1 loses.
        match store.update_box_state(&record.id, g1, BoxState::Starting, None) {
            Err(StoreError::StaleGeneration {
                expected, actual, ..
            }) => {
                assert_eq!((expected, actual), (g1, g2));
            }
            other => panic!("expected StaleGeneration, got {other:?}"),
        }
        let g3 = store
            .update_box_state(&record.id, g2, BoxState::Failed, Some("runc said no"))
            .unwrap();
        let now = store.get_box(&record.id).unwrap().unwrap();
        assert_eq!((now.state, now.generation), (BoxState::Failed, g3));
        assert_eq!(now.state_reason.as_deref(), Some("runc said no"));
        // failed → starting is allowed (a retry).
        store
            .update_box_state(&record.id, g3, BoxState::Starting, None)
            .unwrap();
    }

    fn boxes_are_counted_by_state(db) {
        let store = db.open();
        let tenant = store.create_tenant("acme").unwrap();
        assert!(store.count_boxes_by_state().unwrap().is_empty());
        for name in ["a", "b", "c"] {
            store.insert_box(&new_box(&tenant.id, name)).unwrap();
        }
        let c = store.get_box_by_name(&tenant.id, "c").unwrap().unwrap();
        store
            .update_box_state(&c.id, c.generation, BoxState::Starting, None)
            .unwrap();
        let mut counts = store.count_boxes_by_state().unwrap();
        counts.sort_by_key(|(state, _)| state.as_str());
        assert_eq!(
            counts,
            vec![(BoxState::Starting, 1), (BoxState::Stopped, 2)]
        );
    }

    fn illegal_transitions_are_refused_and_change_nothing(db) {
        let store = db.open();
        let tenant = store.create_tenant("acme").unwrap();
        let record = store.insert_box(&new_box(&tenant.id, "alice")).unwrap();
        let err = store
            .update_box_state(&record.id, record.generation, BoxState::Running, None)
            .unwrap_err();
        assert!(matches!(err, StoreError::Transition { .. }), "{err:?}");
        assert_eq!(store.get_box(&record.id).unwrap(), Some(record));
    }

    fn duplicate_names_are_refused_per_tenant_only(db) {
        let store = db.open();
        let a = store.create_tenant("a").unwrap();
        let b = store.create_tenant("b").unwrap();
        let first = store.insert_box(&new_box(&a.id, "alice")).unwrap();
        let err = store.insert_box(&new_box(&a.id, "alice")).unwrap_err();
        assert!(
            matches!(&err, StoreError::NameTaken { name } if name == "alice"),
            "{err:?}"
        );
        let other = store.insert_box(&new_box(&b.id, "alice")).unwrap();
        // Slots are distinct, and the failed insert did not leak a slot into a row.
        assert_ne!(first.id_slot, other.id_slot);
        // Tenants do not see each other's boxes.
        assert_eq!(store.get_box_by_id(&b.id, &first.id).unwrap(), None);
        assert_eq!(
            store.get_box_by_name(&b.id, "alice").unwrap().unwrap().id,
            other.id
        );
        assert_eq!(store.list_boxes(&a.id).unwrap().len(), 1);
    }

    fn a_deleted_box_s_id_slot_returns(db) {
        let store = db.open();
        let tenant = store.create_tenant("acme").unwrap();
        let a = store.insert_box(&new_box(&tenant.id, "a")).unwrap();
        let b = store.insert_box(&new_box(&tenant.id, "b")).unwrap();
        assert!(b.id_slot > a.id_slot);
        assert!(store.delete_box(&b.id).unwrap());
        assert!(!store.delete_box(&b.id).unwrap());
        drop(store);
        let store = db.open();
        let c = store.insert_box(&new_box(&tenant.id, "c")).unwrap();
        assert_eq!(c.id_slot, b.id_slot, "the lowest free slot");
        assert_eq!(store.get_box(&b.id).unwrap(), None);
    }

    fn keys_are_stored_hashed(db) {
        let store = db.open();
        let admin = store
            .ensure_admin_key()
            .unwrap()
            .expect("first start creates the admin key");
        assert!(admin.starts_with("berth_") && admin.len() == 6 + 64);
        assert_eq!(store.ensure_admin_key().unwrap(), None, "only once");
        let principal = store.authenticate(&admin).unwrap().unwrap();
        assert!(principal.is_admin);
        assert_eq!(
            store
                .tenant_by_name(crate::DEFAULT_TENANT)
                .unwrap()
                .unwrap()
                .id,
            principal.tenant_id
        );
        assert_eq!(store.authenticate("berth_0000").unwrap(), None);
        assert_eq!(store.authenticate("").unwrap(), None);
        let secret = &admin["berth_".len()..];
        match db {
            TestDb::Sqlite(dir) => {
                drop(store);
                let mut bytes = std::fs::read(dir.path().join(DB_FILE)).unwrap();
                if let Ok(wal) = std::fs::read(dir.path().join(format!("{DB_FILE}-wal"))) {
                    bytes.extend(wal);
                }
                assert!(
                    !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
                    "plaintext key found on disk"
                );
            }
            // No file to read: every row of every table, as text, instead.
            TestDb::Postgres { .. } => {
                let found: Vec<(String, i64)> = store
                    .db
                    .read(|c| {
                        let tables = c.query_map(
                            "SELECT CAST(table_name AS TEXT) FROM information_schema.tables \
                             WHERE table_schema = current_schema()",
                            crate::args![],
                            |row| row.get::<String>(0),
                        )?;
                        assert!(tables.iter().any(|t| t == "api_keys"), "{tables:?}");
                        tables
                            .into_iter()
                            .map(|table| {
                                let sql = format!(
                                    "SELECT COUNT(*) FROM {table} AS r \
                                     WHERE strpos(CAST(r AS TEXT), CAST(?1 AS TEXT)) > 0"
                                );
                                let n = c.query_row(&sql, crate::args![secret], |row| row.get(0))?;
                                Ok((table, n))
                            })
                            .collect::<Result<_, crate::DbError>>()
                    })
                    .unwrap();
                assert!(
                    found.iter().all(|(_, n)| *n == 0),
                    "plaintext key found in the database: {found:?}"
                );
            }
        }
    }

    fn a_box_keeps_its_egress_json_and_none_stays_none(db) {
        let json = r#"{"allow":["api.example.test"],"credentials":[]}"#;
        let (own, plain) = {
            let store = db.open();
            let tenant = store.create_tenant("acme").unwrap();
            let own = store
                .insert_box(&NewBox {
                    egress: Some(json.into()),
                    ..new_box(&tenant.id, "own")
                })
                .unwrap();
            assert_eq!(own.egress.as_deref(), Some(json));
            let plain = store.insert_box(&new_box(&tenant.id, "plain")).unwrap();
            assert_eq!(plain.egress, None);
            (own, plain)
        };
        let store = db.open();
        let own_read = store.get_box(&own.id).unwrap().unwrap();
        assert_eq!(own_read, own);
        assert_eq!(own_read.egress.as_deref(), Some(json));
        assert_eq!(store.get_box(&plain.id).unwrap().unwrap().egress, None);
        let listed = store.list_boxes(&own.tenant_id).unwrap();
        assert_eq!(
            listed.iter().map(|b| b.egress.clone()).collect::<Vec<_>>(),
            [Some(json.to_owned()), None]
        );
    }

    fn a_box_keeps_its_runtime_and_disk(db) {
        let id = {
            let store = db.open();
            let tenant = store.create_tenant("acme").unwrap();
            let record = store
                .insert_box(&NewBox {
                    runtime: "qemu".into(),
                    disk_mib: Some(2048),
                    ..new_box(&tenant.id, "vm")
                })
                .unwrap();
            assert_eq!(
                (record.runtime.as_str(), record.disk_mib),
                ("qemu", Some(2048))
            );
            record.id
        };
        let read = db.open().get_box(&id).unwrap().unwrap();
        assert_eq!((read.runtime.as_str(), read.disk_mib), ("qemu", Some(2048)));
    }

    fn a_stopped_box_moves_to_another_runtime_and_a_running_one_does_not(db) {
        let store = db.open();
        let tenant = store.create_tenant("acme").unwrap();
        let record = store.insert_box(&new_box(&tenant.id, "alice")).unwrap();
        let generation = store
            .set_box_runtime(&record.id, record.generation, "qemu")
            .unwrap();
        let moved = store.get_box(&record.id).unwrap().unwrap();
        assert_eq!(
            (moved.runtime.as_str(), moved.generation),
            ("qemu", generation)
        );
        assert!(matches!(
            store.set_box_runtime(&record.id, record.generation, "sandbox"),
            Err(StoreError::StaleGeneration { .. })
        ));
        let running = store
            .update_box_state(&record.id, generation, BoxState::Starting, None)
            .unwrap();
        assert!(matches!(
            store.set_box_runtime(&record.id, running, "sandbox"),
            Err(StoreError::NotStopped {
                state: BoxState::Starting,
                ..
            })
        ));
        assert_eq!(store.get_box(&record.id).unwrap().unwrap().runtime, "qemu");
        let missing = BoxId::from_random([9; 20]);
        assert!(matches!(
            store.set_box_runtime(&missing, 0, "qemu"),
            Err(StoreError::BoxNotFound { .. })
        ));
    }
}

#[test]
fn pragmas_are_set() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    // On the write connection, where the store set them.
    let (mode, sync, fk) = store
        .db
        .write(|c| {
            let mode: String = c.query_row("PRAGMA journal_mode", crate::args![], |r| r.get(0))?;
            let sync: i64 = c.query_row("PRAGMA synchronous", crate::args![], |r| r.get(0))?;
            let fk: i64 = c.query_row("PRAGMA foreign_keys", crate::args![], |r| r.get(0))?;
            Ok::<_, crate::DbError>((mode, sync, fk))
        })
        .unwrap();
    assert_eq!((mode.as_str(), sync, fk), ("wal", 2, 1));
}

/// A box made before migration 4 has no `egress` column value: it reads as `None` (its
/// template's policy), and the migration keeps the rest of the row.
#[test]
fn a_box_from_before_the_egress_column_reads_as_none() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(DB_FILE);
    let id = BoxId::from_random([7; 20]);
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(
            "CREATE TABLE schema_migrations (
                 version INTEGER PRIMARY KEY,
                 applied_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%SZ', 'now'))
             );",
        )
        .unwrap();
        for (version, script) in [
            (1, include_str!("../migrations/0001_init.sql")),
            (2, include_str!("../migrations/0002_messages_events.sql")),
            (3, include_str!("../migrations/0003_secrets.sql")),
        ] {
            conn.execute_batch(script).unwrap();
            conn.execute(
                "INSERT INTO schema_migrations (version) VALUES (?1)",
                [version],
            )
            .unwrap();
        }
        let tenant = TenantId::from_random([1; 20]);
        conn.execute(
            "INSERT INTO tenants (id, name, created_at) VALUES (?1, 'old', '2026-01-01T00:00:00Z')",
            [tenant.as_str()],
        )
        .unwrap();
        conn.execute(
            "INSERT INTO boxes (id, tenant_id, name, template, state, memory_mib, pids, cpus, \
             id_slot, generation, created_at, updated_at, idle_timeout_s) VALUES \
             (?1, ?2, 'old', 'host', 'stopped', 512, 256, 1.0, 0, 1, \
             '2026-01-01T00:00:00Z', '2026-01-01T00:00:00Z', 60)",
            [id.as_str(), tenant.as_str()],
        )
        .unwrap();
        conn.execute(
            "INSERT INTO messages (box_id, seq, id, content, state, created_at) VALUES \
             (?1, 1, 'msg_old', 'still here', 'queued', '2026-01-01T00:00:00Z')",
            [id.as_str()],
        )
        .unwrap();
    }
    let store = open(&dir);
    let old = store.get_box(&id).unwrap().unwrap();
    assert_eq!(old.egress, None);
    // Migration 14 rebuilt the table: the idle timeout is the stop rung, the other rungs
    // are off, and the box's messages were not dropped with the old table.
    assert_eq!((old.name.as_str(), old.stop_after_s), ("old", 60));
    assert_eq!(
        (old.pause_after_s, old.snapshot_after_s, old.auto_resume),
        (0, 0, true)
    );
    assert_eq!(store.count_undelivered(&id).unwrap(), 1);
    // Migration 5: an old box ran on the sandbox, with its template's disk.
    assert_eq!((old.runtime.as_str(), old.disk_mib), ("sandbox", None));
}
