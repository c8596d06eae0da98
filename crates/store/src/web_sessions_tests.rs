//! Web sessions and pairing codes, on both databases (and an upgrade from SQLite's
//! schema 14).

use std::sync::Arc;

use rusqlite::params;
use time::Duration;

use crate::port_links_tests::stored_bytes;
use crate::tests::open;
use crate::web_sessions::digest;
use crate::{format_time, now, NewWebSession, MAX_WEB_SESSIONS_PER_TENANT};

/// Signs a browser in as `tenant` with a new key of its own.
fn sign_in(store: &crate::Store, tenant: &berth_protocol::TenantId, device: &str) -> NewWebSession {
    let key = store.add_api_key(tenant, false).unwrap();
    store
        .open_web_session(tenant, &key.meta.id, device)
        .unwrap()
        .expect("the key lives")
}

/// Moves a session's last use back by `ago` (what time would do).
fn age(store: &crate::Store, id: &str, ago: Duration) {
    let at = format_time(now() - ago).unwrap();
    store
        .db
        .write(|tx| {
            tx.execute(
                "UPDATE web_sessions SET last_used_at = ?1 WHERE id = ?2",
                crate::args![at, id],
            )
            .map_err(crate::error::sql("test"))
        })
        .unwrap();
}

conformance! {
    fn a_pairing_code_opens_one_session_and_only_hashes_are_stored(db) {
        let store = db.open();
        let tenant = store.create_tenant("acme").unwrap();
        let pairing = store
            .create_pairing(&tenant.id, Duration::minutes(10))
            .unwrap();
        assert!(pairing.code.starts_with("bwp_") && pairing.code.len() == 4 + 64);
        assert!(pairing.expires_at > now() + Duration::minutes(9));

        let new = store
            .pair_web_session(&pairing.code, "Pixel")
            .unwrap()
            .unwrap();
        assert!(new.token.starts_with("bws_") && new.token.len() == 4 + 64);
        assert!(new.session.id.starts_with("ws_"));
        assert_eq!(
            (
                new.session.tenant_name.as_str(),
                new.session.device.as_str()
            ),
            ("acme", "Pixel")
        );
        assert_eq!(
            store.web_session_by_token(&new.token).unwrap(),
            Some(new.session.clone())
        );
        // Used once: never again.
        assert!(store
            .pair_web_session(&pairing.code, "x")
            .unwrap()
            .is_none());
        assert!(store.pair_web_session("bwp_00", "x").unwrap().is_none());
        assert!(store.web_session_by_token("bws_00").unwrap().is_none());
        assert!(store.web_session_by_token("berth_00").unwrap().is_none());

        let raw = stored_bytes(db, store, &["web_sessions", "web_pairings"]);
        let raw = String::from_utf8_lossy(&raw);
        assert!(
            raw.contains(&digest(&new.token)),
            "the session's hash is stored (so the search below looks where it should)"
        );
        assert!(!raw.contains(&new.token[4..]) && !raw.contains(&pairing.code[4..]));
    }

    fn an_expired_code_opens_nothing(db) {
        let store = db.open();
        let tenant = store.create_tenant("acme").unwrap();
        let pairing = store
            .create_pairing(&tenant.id, Duration::seconds(-1))
            .unwrap();
        assert!(store
            .pair_web_session(&pairing.code, "x")
            .unwrap()
            .is_none());
        assert!(store.list_web_sessions(&tenant.id).unwrap().is_empty());
    }

    fn two_browsers_racing_with_one_code_get_exactly_one_session(db) {
        let store = Arc::new(db.open());
        let tenant = store.create_tenant("acme").unwrap();
        for _ in 0..20 {
            let code = store
                .create_pairing(&tenant.id, Duration::minutes(10))
                .unwrap()
                .code;
            let barrier = Arc::new(std::sync::Barrier::new(4));
            let racers: Vec<_> = (0..4)
                .map(|i| {
                    let (store, code, barrier) = (store.clone(), code.clone(), barrier.clone());
                    std::thread::spawn(move || {
                        barrier.wait();
                        store
                            .pair_web_session(&code, &format!("racer {i}"))
                            .unwrap()
                    })
                })
                .collect();
            let won = racers.into_iter().filter_map(|r| r.join().unwrap()).count();
            assert_eq!(won, 1);
        }
        assert_eq!(store.list_web_sessions(&tenant.id).unwrap().len(), 20);
    }

    fn last_use_is_written_at_most_once_a_minute_and_idle_sessions_end(db) {
        let store = db.open();
        let tenant = store.create_tenant("acme").unwrap();
        let new = sign_in(&store, &tenant.id, "laptop");

        age(&store, &new.session.id, Duration::seconds(30));
        let seen = store.web_session_by_token(&new.token).unwrap().unwrap();
        assert!(
            now() - seen.last_used_at >= Duration::seconds(29),
            "not rewritten"
        );

        age(&store, &new.session.id, Duration::minutes(2));
        let seen = store.web_session_by_token(&new.token).unwrap().unwrap();
        assert!(
            now() - seen.last_used_at < Duration::seconds(5),
            "rewritten"
        );
        let listed = store.list_web_sessions(&tenant.id).unwrap();
        assert_eq!(listed[0].last_used_at, seen.last_used_at);

        age(
            &store,
            &new.session.id,
            Duration::days(30) + Duration::seconds(1),
        );
        assert!(store.web_session_by_token(&new.token).unwrap().is_none());
        assert!(store.list_web_sessions(&tenant.id).unwrap().is_empty());
    }

    fn the_101st_sign_in_ends_the_least_recently_used_session(db) {
        let store = db.open();
        let tenant = store.create_tenant("acme").unwrap();
        let other = store.create_tenant("other").unwrap();
        let others = sign_in(&store, &other.id, "theirs");
        let mut sessions: Vec<_> = (0..MAX_WEB_SESSIONS_PER_TENANT)
            .map(|i| sign_in(&store, &tenant.id, &format!("d{i}")))
            .collect();
        // The oldest-made is the most recently used: the cap goes by last use.
        age(&store, &sessions[50].session.id, Duration::minutes(5));
        let newest = sign_in(&store, &tenant.id, "one more");
        let listed = store.list_web_sessions(&tenant.id).unwrap();
        assert_eq!(listed.len(), MAX_WEB_SESSIONS_PER_TENANT);
        assert!(listed.iter().all(|s| s.id != sessions[50].session.id));
        assert!(store
            .web_session_by_token(&sessions.remove(50).token)
            .unwrap()
            .is_none());
        assert!(store.web_session_by_token(&newest.token).unwrap().is_some());
        assert!(store
            .web_session_by_token(&sessions[0].token)
            .unwrap()
            .is_some());
        assert!(store.web_session_by_token(&others.token).unwrap().is_some());
    }

    fn a_session_is_revoked_at_once_and_only_by_its_tenant(db) {
        let store = db.open();
        let tenant = store.create_tenant("acme").unwrap();
        let other = store.create_tenant("other").unwrap();
        let new = sign_in(&store, &tenant.id, "phone");
        assert!(!store
            .revoke_web_session(&other.id, &new.session.id)
            .unwrap());
        assert!(store.web_session_by_token(&new.token).unwrap().is_some());
        assert!(store
            .revoke_web_session(&tenant.id, &new.session.id)
            .unwrap());
        assert!(store.web_session_by_token(&new.token).unwrap().is_none());
        assert!(!store
            .revoke_web_session(&tenant.id, &new.session.id)
            .unwrap());
    }
}

/// Migration 15 marks every session that existed before it: only those are taken under
/// the cookie's old name (a browser signed in before the upgrade stays signed in), every
/// time until the browser shows the new name (parallel requests with the old one must not
/// race into a refusal), and never after.
#[test]
fn a_session_from_before_migration_15_is_taken_by_the_old_name_until_the_new_one_is_seen() {
    let dir = tempfile::tempdir().unwrap();
    let token = format!("bws_{}", "ab".repeat(32));
    let tenant = berth_protocol::TenantId::from_random([3; 20]);
    {
        let mut conn = rusqlite::Connection::open(dir.path().join(crate::DB_FILE)).unwrap();
        crate::migrations::apply_sqlite(&mut conn, 14).unwrap();
        conn.execute(
            "INSERT INTO tenants (id, name, created_at) VALUES (?1, 'acme', ?2)",
            params![tenant.as_str(), format_time(now()).unwrap()],
        )
        .unwrap();
        conn.execute(
            "INSERT INTO web_sessions (id, tenant_id, token_hash, device, created_at, \
             last_used_at) VALUES ('ws_0123456789abcdef', ?1, ?2, 'old phone', ?3, ?3)",
            params![tenant.as_str(), digest(&token), format_time(now()).unwrap()],
        )
        .unwrap();
    }
    let store = open(&dir);
    for _ in 0..3 {
        let old = store.legacy_web_session(&token).unwrap();
        assert_eq!(
            old.map(|s| s.id).as_deref(),
            Some("ws_0123456789abcdef"),
            "taken under the old name"
        );
    }
    let new = sign_in(&store, &tenant, "new phone");
    assert_eq!(store.legacy_web_session(&new.token).unwrap(), None);
    assert_eq!(
        store.web_session_by_token(&new.token).unwrap(),
        Some(new.session)
    );
    // The browser shows the new name: the old one is over for this session.
    let seen = store.web_session_by_token(&token).unwrap().unwrap();
    assert_eq!(seen.id, "ws_0123456789abcdef");
    assert_eq!(store.legacy_web_session(&token).unwrap(), None);
    assert!(store.web_session_by_token(&token).unwrap().is_some());
    assert_eq!(store.legacy_web_session("bws_00").unwrap(), None);
}
