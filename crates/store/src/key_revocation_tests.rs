//! A revoked key's browser sessions end with it, in the revoking transaction: those it
//! opened, and the tenant's of unknown origin; never a paired one, nor another tenant's.

use time::Duration;

use crate::error::sql;
use crate::{NewWebSession, SessionOrigin, Store};

/// Makes a session look as migration 15 left one opened before it.
fn make_unknown(store: &Store, session: &NewWebSession) {
    let changed = store
        .db
        .write(|tx| {
            tx.execute(
                "UPDATE web_sessions SET opened_with = 'unknown', api_key_id = NULL WHERE id = ?1",
                crate::args![session.session.id],
            )
            .map_err(sql("test"))
        })
        .unwrap();
    assert_eq!(changed, 1);
}

fn lives(store: &Store, session: &NewWebSession) -> bool {
    store
        .web_session_by_token(&session.token)
        .unwrap()
        .is_some()
}

conformance! {
    fn revoking_a_key_ends_its_sessions_and_the_tenants_of_unknown_origin(db) {
        let store = db.open();
        let acme = store.create_tenant("acme").unwrap();
        let other = store.create_tenant("other").unwrap();
        let stolen = store.add_api_key(&acme.id, false).unwrap();
        let kept = store.add_api_key(&acme.id, false).unwrap();
        let theirs = store.add_api_key(&other.id, false).unwrap();
        let sign_in = |tenant, key: &crate::NewApiKey, device| {
            store
                .open_web_session(tenant, &key.meta.id, device)
                .unwrap()
                .unwrap()
        };

        let by_stolen = [
            sign_in(&acme.id, &stolen, "attacker"),
            sign_in(&acme.id, &stolen, "attacker too"),
        ];
        assert_eq!(
            by_stolen[0].session.opened_with,
            SessionOrigin::ApiKey(stolen.meta.id.clone())
        );
        let by_kept = sign_in(&acme.id, &kept, "laptop");
        let pairing = store
            .create_pairing(&acme.id, Duration::minutes(10))
            .unwrap();
        let paired = store
            .pair_web_session(&pairing.code, "phone")
            .unwrap()
            .unwrap();
        assert_eq!(paired.session.opened_with, SessionOrigin::Pairing);
        let unknown = sign_in(&acme.id, &kept, "old tablet");
        make_unknown(&store, &unknown);
        let other_unknown = sign_in(&other.id, &theirs, "their old tablet");
        make_unknown(&store, &other_unknown);
        let other_kept = sign_in(&other.id, &theirs, "their laptop");
        let listed = store.list_web_sessions(&acme.id).unwrap();
        let origin_of = |s: &NewWebSession| {
            listed
                .iter()
                .find(|l| l.id == s.session.id)
                .map(|l| l.opened_with.clone())
        };
        assert_eq!(origin_of(&unknown), Some(SessionOrigin::Unknown));
        assert_eq!(
            origin_of(&by_kept),
            Some(SessionOrigin::ApiKey(kept.meta.id.clone()))
        );

        let ended = store.revoke_api_key(&acme.id, &stolen.meta.id).unwrap();
        assert_eq!(ended, 3, "two of the key's and one of unknown origin");
        for gone in by_stolen.iter().chain([&unknown]) {
            assert!(!lives(&store, gone), "{}", gone.session.device);
        }
        for kept in [&by_kept, &paired, &other_unknown, &other_kept] {
            assert!(lives(&store, kept), "{}", kept.session.device);
        }
        // The next revocation has only its own to end.
        assert_eq!(store.revoke_api_key(&acme.id, &kept.meta.id).unwrap(), 1);
        assert!(!lives(&store, &by_kept) && lives(&store, &paired));
    }

    fn a_key_revoked_while_a_browser_signs_in_with_it_opens_nothing(db) {
        let store = db.open();
        let acme = store.create_tenant("acme").unwrap();
        let key = store.add_api_key(&acme.id, false).unwrap();
        // Checked (as the sign-in does), then revoked before the session is written.
        let who = store.authenticate(&key.key).unwrap().unwrap();
        assert_eq!(who.api_key_id.as_deref(), Some(key.meta.id.as_str()));
        assert_eq!(store.revoke_api_key(&acme.id, &key.meta.id).unwrap(), 0);
        assert!(store
            .open_web_session(&acme.id, &key.meta.id, "late")
            .unwrap()
            .is_none());
        // Nor does another tenant's key open a session for this one.
        let other = store.create_tenant("other").unwrap();
        let theirs = store.add_api_key(&other.id, false).unwrap();
        assert!(store
            .open_web_session(&acme.id, &theirs.meta.id, "mixed")
            .unwrap()
            .is_none());
        assert!(store.list_web_sessions(&acme.id).unwrap().is_empty());
    }

    fn a_refused_revocation_ends_no_session(db) {
        let store = db.open();
        let admin = store.ensure_admin_key().unwrap().unwrap();
        let who = store.authenticate(&admin).unwrap().unwrap();
        let admin_id = who.api_key_id.clone().unwrap();
        let session = store
            .open_web_session(&who.tenant_id, &admin_id, "admin's laptop")
            .unwrap()
            .unwrap();
        assert!(matches!(
            store.revoke_api_key(&who.tenant_id, &admin_id),
            Err(crate::StoreError::LastAdminKey { .. })
        ));
        assert!(lives(&store, &session));
    }
}
