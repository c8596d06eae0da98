//! The store against a real SQLite file in a temporary directory.

use berth_protocol::{BoxId, TenantId};

use crate::{BoxState, NewBox, Store, StoreError, DB_FILE};

fn new_box(tenant: &TenantId, name: &str) -> NewBox {
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
        idle_timeout_s: 300,
    }
}

fn open(dir: &tempfile::TempDir) -> Store {
    Store::open(&dir.path().join(DB_FILE)).unwrap()
}

#[test]
fn reopening_keeps_tenants_keys_and_boxes() {
    let dir = tempfile::tempdir().unwrap();
    let (tenant, key, record) = {
        let store = open(&dir);
        let tenant = store.create_tenant("acme").unwrap();
        let key = store.create_api_key(&tenant.id, false).unwrap();
        let record = store.insert_box(&new_box(&tenant.id, "alice")).unwrap();
        (tenant, key, record)
    };
    let store = open(&dir);
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

#[test]
fn state_updates_are_generation_checked() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
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

#[test]
fn illegal_transitions_are_refused_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let tenant = store.create_tenant("acme").unwrap();
    let record = store.insert_box(&new_box(&tenant.id, "alice")).unwrap();
    let err = store
        .update_box_state(&record.id, record.generation, BoxState::Running, None)
        .unwrap_err();
    assert!(matches!(err, StoreError::Transition { .. }), "{err:?}");
    assert_eq!(store.get_box(&record.id).unwrap(), Some(record));
}

#[test]
fn duplicate_names_are_refused_per_tenant_only() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
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

#[test]
fn id_slots_are_never_reused() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let tenant = store.create_tenant("acme").unwrap();
    let a = store.insert_box(&new_box(&tenant.id, "a")).unwrap();
    let b = store.insert_box(&new_box(&tenant.id, "b")).unwrap();
    assert!(store.delete_box(&b.id).unwrap());
    assert!(!store.delete_box(&b.id).unwrap());
    drop(store);
    let store = open(&dir);
    let c = store.insert_box(&new_box(&tenant.id, "c")).unwrap();
    assert!(c.id_slot > b.id_slot && b.id_slot > a.id_slot);
    assert_eq!(store.get_box(&b.id).unwrap(), None);
}

#[test]
fn keys_are_stored_hashed() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
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
    drop(store);
    let mut bytes = std::fs::read(dir.path().join(DB_FILE)).unwrap();
    if let Ok(wal) = std::fs::read(dir.path().join(format!("{DB_FILE}-wal"))) {
        bytes.extend(wal);
    }
    let secret = &admin["berth_".len()..];
    assert!(
        !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
        "plaintext key found on disk"
    );
}

#[test]
fn pragmas_are_set() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let conn = store.conn();
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    let sync: i64 = conn
        .query_row("PRAGMA synchronous", [], |r| r.get(0))
        .unwrap();
    let fk: i64 = conn
        .query_row("PRAGMA foreign_keys", [], |r| r.get(0))
        .unwrap();
    assert_eq!((mode.as_str(), sync, fk), ("wal", 2, 1));
}
