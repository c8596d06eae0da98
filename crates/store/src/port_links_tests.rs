//! Share links and their sessions, on both databases.

use sha2::{Digest, Sha256};
use time::Duration;

use crate::test_db::TestDb;
use crate::tests::new_box;
use crate::{Store, StoreError};

/// What the database holds, to search for a plaintext in: the SQLite file and its WAL
/// (once `store` is closed), or every row of `tables` as Postgres prints it.
pub(crate) fn stored_bytes(db: &TestDb, store: Store, tables: &[&str]) -> Vec<u8> {
    match db {
        TestDb::Sqlite(dir) => {
            drop(store);
            let file = dir.path().join(crate::DB_FILE);
            let mut bytes = std::fs::read(&file).unwrap();
            if let Ok(wal) = std::fs::read(dir.path().join(format!("{}-wal", crate::DB_FILE))) {
                bytes.extend(wal);
            }
            bytes
        }
        TestDb::Postgres { .. } => {
            let mut bytes = Vec::new();
            for table in tables {
                let rows: Vec<String> = store
                    .db
                    .read(|c| {
                        c.query_map(
                            &format!("SELECT CAST(t AS TEXT) FROM {table} t"),
                            crate::args![],
                            |row| row.get(0),
                        )
                    })
                    .unwrap();
                for row in rows {
                    bytes.extend(row.into_bytes());
                    bytes.push(b'\n');
                }
            }
            bytes
        }
    }
}

conformance! {
    fn a_link_opens_sessions_until_revoked_and_only_hashes_are_stored(db) {
        let store = db.open();
        let tenant = store.create_tenant("acme").unwrap();
        let record = store.insert_box(&new_box(&tenant.id, "alice")).unwrap();
        let new = store
            .create_port_link(&tenant.id, &record.id, 8000, Duration::hours(1), 10)
            .unwrap();
        assert!(new.token.starts_with("bpl_") && new.token.len() == 4 + 64);
        let found = store.port_link_by_token(&new.token).unwrap().unwrap();
        assert_eq!(found, new.link);
        assert!(found.is_live(crate::now()));
        assert_eq!(store.port_link_by_token("bpl_00").unwrap(), None);
        assert_eq!(store.port_link_by_token("berth_00").unwrap(), None);

        // A session is capped by its link's life.
        let session = store
            .open_link_session(&new.link.id, Duration::days(7))
            .unwrap()
            .unwrap();
        assert!(session.expires_at <= new.link.expires_at);
        assert_eq!(
            store
                .port_link_by_session(&session.token)
                .unwrap()
                .unwrap()
                .id,
            new.link.id
        );

        let listed = store.list_port_links(&tenant.id, &record.id, None).unwrap();
        assert_eq!(listed, vec![new.link.clone()]);
        assert!(store
            .list_port_links(&tenant.id, &record.id, Some(9000))
            .unwrap()
            .is_empty());

        let revoked = store
            .revoke_port_link(&tenant.id, &record.id, &new.link.id)
            .unwrap();
        assert!(revoked.revoked_at.is_some() && !revoked.is_live(crate::now()));
        assert_eq!(store.port_link_by_session(&session.token).unwrap(), None);
        assert!(store
            .open_link_session(&new.link.id, Duration::hours(1))
            .unwrap()
            .is_none());
        assert!(matches!(
            store.revoke_port_link(&tenant.id, &record.id, "pl_nope"),
            Err(StoreError::PortLinkNotFound { .. })
        ));

        // Another tenant cannot revoke or list it.
        let other = store.create_tenant("other").unwrap();
        assert!(store
            .list_port_links(&other.id, &record.id, None)
            .unwrap()
            .is_empty());

        let bytes = stored_bytes(db, store, &["port_links", "port_link_sessions"]);
        let hash = crate::hex(&Sha256::digest(new.token.as_bytes()));
        assert!(
            bytes.windows(hash.len()).any(|w| w == hash.as_bytes()),
            "the link's hash is stored (so the search below looks where it should)"
        );
        for secret in [&new.token[4..], &session.token[4..]] {
            assert!(
                !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
                "a plaintext token is on disk"
            );
        }
    }

    fn live_links_per_box_are_bounded_and_an_expired_link_opens_nothing(db) {
        let store = db.open();
        let tenant = store.create_tenant("acme").unwrap();
        let record = store.insert_box(&new_box(&tenant.id, "alice")).unwrap();
        let expired = store
            .create_port_link(&tenant.id, &record.id, 80, Duration::seconds(-1), 2)
            .unwrap();
        assert!(!expired.link.is_live(crate::now()));
        assert!(store
            .open_link_session(&expired.link.id, Duration::hours(1))
            .unwrap()
            .is_none());
        store
            .create_port_link(&tenant.id, &record.id, 80, Duration::hours(1), 2)
            .unwrap();
        store
            .create_port_link(&tenant.id, &record.id, 81, Duration::hours(1), 2)
            .unwrap();
        assert!(matches!(
            store.create_port_link(&tenant.id, &record.id, 80, Duration::hours(1), 2),
            Err(StoreError::TooManyPortLinks { max: 2, .. })
        ));
        // Deleting the box deletes its links.
        assert!(store.delete_box(&record.id).unwrap());
        assert_eq!(store.port_link_by_token(&expired.token).unwrap(), None);
    }
}
