//! E2B sandbox rows, on both databases.

use std::collections::BTreeMap;

use berth_protocol::TenantId;
use rusqlite::params;

use crate::ingress_tests::insert_box;
use crate::{BoxRecord, E2bIdempotency, E2bInsert, E2bSandbox, Store, DB_FILE};

fn sandbox(record: &BoxRecord, end_at_ms: i64) -> E2bSandbox {
    E2bSandbox {
        box_id: record.id.clone(),
        tenant_id: record.tenant_id.clone(),
        sandbox_id: record.name.clone(),
        template_id: "base".into(),
        metadata: BTreeMap::from([("user".to_owned(), "ada & co".to_owned())]),
        started_at_ms: 1_000,
        end_at_ms,
        timeout_armed: true,
        auto_pause: false,
        auto_pause_memory: true,
        secure: true,
        allow_internet_access: None,
    }
}

fn tenant_with_box(store: &Store, tenant: &str, name: &str) -> (TenantId, BoxRecord) {
    let tenant = store.create_tenant(tenant).unwrap();
    let record = insert_box(store, tenant.id.clone(), name);
    (tenant.id, record)
}

conformance! {
    fn a_sandbox_is_found_by_its_tenant_only_and_goes_with_its_box(db) {
        let store = db.open();
        let (acme, record) = tenant_with_box(&store, "acme", "abcdefghij0123456789");
        let (other, _) = tenant_with_box(&store, "other", "x");
        let row = sandbox(&record, 5_000);
        assert_eq!(
            store.insert_e2b_sandbox(&row, None).unwrap(),
            E2bInsert::Inserted
        );
        assert_eq!(
            store.e2b_sandbox(&acme, &row.sandbox_id).unwrap(),
            Some(row.clone())
        );
        assert_eq!(store.e2b_sandbox(&other, &row.sandbox_id).unwrap(), None);
        assert_eq!(store.list_e2b_sandboxes(&other).unwrap(), vec![]);
        assert_eq!(store.list_e2b_sandboxes(&acme).unwrap(), vec![row.clone()]);
        assert_eq!(
            store.e2b_sandbox_on_host(&row.sandbox_id).unwrap(),
            Some(row.clone())
        );
        assert!(store.delete_box(&record.id).unwrap());
        assert_eq!(store.e2b_sandbox_on_host(&row.sandbox_id).unwrap(), None);
        assert!(!store.set_e2b_timeout(&record.id, 9, true).unwrap());
    }

    fn a_deadline_is_claimed_once_and_connect_only_extends_it(db) {
        let store = db.open();
        let (_, first) = tenant_with_box(&store, "acme", "first");
        let second = insert_box(&store, first.tenant_id.clone(), "second");
        store
            .insert_e2b_sandbox(&sandbox(&first, 2_000), None)
            .unwrap();
        store
            .insert_e2b_sandbox(&sandbox(&second, 3_000), None)
            .unwrap();
        assert_eq!(store.next_e2b_deadline_ms().unwrap(), Some(2_000));
        assert_eq!(store.claim_due_e2b(1_999, 10).unwrap(), vec![]);

        // Extending to an earlier time keeps the later one.
        assert!(store.extend_e2b_timeout(&first.id, 1_500).unwrap());
        let claimed = store.claim_due_e2b(2_500, 10).unwrap();
        assert_eq!(
            claimed.iter().map(|s| &s.sandbox_id).collect::<Vec<_>>(),
            ["first"]
        );
        assert_eq!(
            store.claim_due_e2b(2_500, 10).unwrap(),
            vec![],
            "claimed once"
        );
        assert_eq!(store.next_e2b_deadline_ms().unwrap(), Some(3_000));

        // A pause disarms; connect arms again, later.
        assert!(store.disarm_e2b_timeout(&second.id).unwrap());
        assert_eq!(store.next_e2b_deadline_ms().unwrap(), None);
        assert!(store.extend_e2b_timeout(&second.id, 7_000).unwrap());
        let row = store
            .e2b_sandbox(&second.tenant_id, "second")
            .unwrap()
            .unwrap();
        assert_eq!((row.end_at_ms, row.timeout_armed), (7_000, true));
        // set_timeout may shorten.
        assert!(store.set_e2b_timeout(&second.id, 4_000, true).unwrap());
        assert_eq!(store.next_e2b_deadline_ms().unwrap(), Some(4_000));
    }

    fn an_idempotency_key_names_one_sandbox_per_tenant(db) {
        let store = db.open();
        let (acme, first) = tenant_with_box(&store, "acme", "first");
        let again = insert_box(&store, acme.clone(), "again");
        let (_, elsewhere) = tenant_with_box(&store, "other", "elsewhere");
        let idem = E2bIdempotency {
            key: "retry-1".into(),
            request_hash: "h1".into(),
        };
        store
            .insert_e2b_sandbox(&sandbox(&first, 10), Some(&idem))
            .unwrap();
        match store
            .insert_e2b_sandbox(&sandbox(&again, 10), Some(&idem))
            .unwrap()
        {
            E2bInsert::KeyTaken(taken, stored) => {
                assert_eq!((taken.sandbox_id.as_str(), stored), ("first", idem.clone()));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(store.e2b_sandbox(&acme, "again").unwrap(), None);
        // Another tenant's key is its own.
        assert_eq!(
            store
                .insert_e2b_sandbox(&sandbox(&elsewhere, 10), Some(&idem))
                .unwrap(),
            E2bInsert::Inserted
        );
    }
}

/// A data dir from before migration 18 opens: its boxes are kept and have no sandbox row.
/// SQLite only: the data dir is built by applying SQLite's migrations up to 17.
#[test]
fn a_data_dir_from_before_the_e2b_table_opens_with_its_boxes() {
    let dir = tempfile::tempdir().unwrap();
    let tenant = TenantId::from_random([5; 20]);
    let id = berth_protocol::BoxId::from_random([6; 20]);
    {
        let mut conn = rusqlite::Connection::open(dir.path().join(DB_FILE)).unwrap();
        assert_eq!(crate::migrations::apply_sqlite(&mut conn, 17).unwrap(), 17);
        conn.execute(
            "INSERT INTO tenants (id, name, created_at) VALUES (?1, 'old', '2026-01-01T00:00:00Z')",
            params![tenant.as_str()],
        )
        .unwrap();
        conn.execute(
            "INSERT INTO boxes (id, tenant_id, name, template, state, memory_mib, pids, cpus, \
             id_slot, generation, created_at, updated_at, stop_after_s, pause_after_s, \
             snapshot_after_s, auto_resume, runtime, labels, env) VALUES \
             (?1, ?2, 'old', 'host', 'stopped', 512, 256, 1.0, 0, 1, '2026-01-01T00:00:00Z', \
             '2026-01-01T00:00:00Z', 60, 0, 0, 1, 'sandbox', '{}', '{}')",
            params![id.as_str(), tenant.as_str()],
        )
        .unwrap();
    }
    let store = Store::open(&dir.path().join(DB_FILE)).unwrap();
    assert_eq!(store.get_box(&id).unwrap().unwrap().name, "old");
    assert_eq!(store.list_e2b_sandboxes(&tenant).unwrap(), vec![]);
    assert_eq!(store.e2b_sandbox_on_host("old").unwrap(), None);
}
