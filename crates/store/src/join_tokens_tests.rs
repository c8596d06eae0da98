//! Join tokens on both databases: spent one use at a time, refused when wrong, expired,
//! used up or revoked (a refusal spending nothing), and never spent twice by a race.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use crate::{Store, StoreError};

const HOUR: Duration = Duration::from_secs(3600);

fn refusal(store: &Store, token: &str) -> &'static str {
    match store.redeem_join_token(token) {
        Err(StoreError::JoinTokenRefused { reason }) => reason,
        other => panic!("{token:?} was not refused: {other:?}"),
    }
}

fn id_of(token: &str) -> &str {
    token.split_once('.').unwrap().0
}

conformance! {
    fn a_token_admits_one_node_then_none(db) {
        let store = db.open();
        let token = store.create_join_token(1, HOUR).unwrap();
        let (id, secret) = token.split_once('.').unwrap();
        assert_eq!((id.len(), secret.len()), (16, 64));
        let listed = store.list_join_tokens().unwrap();
        assert_eq!(listed.len(), 1);
        let first = &listed[0];
        assert_eq!((first.id.as_str(), first.uses_left, first.expired), (id, 1, false));

        store.redeem_join_token(&token).unwrap();
        assert_eq!(refusal(&store, &token), "unknown or used-up token");
        assert!(store.list_join_tokens().unwrap().is_empty(), "the spent row is gone");
    }

    fn only_the_hash_of_the_secret_is_stored(db) {
        let store = db.open();
        let token = store.create_join_token(1, HOUR).unwrap();
        let (id, secret) = token.split_once('.').unwrap();
        let stored: String = store
            .db
            .read(|c| {
                c.query_row(
                    "SELECT secret_sha256 FROM join_tokens WHERE id = ?1",
                    crate::args![id],
                    |row| row.get(0),
                )
                .map_err(crate::error::sql("read a join token"))
            })
            .unwrap();
        assert_eq!(stored, crate::hex(&Sha256::digest(secret.as_bytes())));
    }

    fn a_token_for_two_admits_two(db) {
        let store = db.open();
        let token = store.create_join_token(2, HOUR).unwrap();
        store.redeem_join_token(&token).unwrap();
        assert_eq!(store.list_join_tokens().unwrap()[0].uses_left, 1);
        store.redeem_join_token(&token).unwrap();
        assert_eq!(refusal(&store, &token), "unknown or used-up token");
    }

    fn a_wrong_secret_is_refused_and_spends_nothing(db) {
        let store = db.open();
        let token = store.create_join_token(1, HOUR).unwrap();
        let wrong = format!("{}.{}", id_of(&token), "0".repeat(64));
        // The same words as for an id that was never made: a guess learns nothing.
        assert_eq!(refusal(&store, &wrong), "unknown or used-up token");
        let unknown = format!("{}.{}", "f".repeat(16), &token[17..]);
        assert_eq!(refusal(&store, &unknown), "unknown or used-up token");
        assert_eq!(refusal(&store, "not a token"), "malformed token");
        assert_eq!(store.list_join_tokens().unwrap()[0].uses_left, 1);
        store.redeem_join_token(&token).unwrap();
    }

    fn an_expired_token_is_refused(db) {
        let store = db.open();
        let at_once = store.create_join_token(1, Duration::ZERO).unwrap();
        assert_eq!(refusal(&store, &at_once), "expired");

        // One that runs out while it waits, by the database's clock.
        let brief = store.create_join_token(1, Duration::from_millis(50)).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let expired = |token: &str| {
            store.list_join_tokens().unwrap().iter().any(|t| t.id == id_of(token) && t.expired)
        };
        while !expired(&brief) {
            assert!(Instant::now() < deadline, "the token never expired");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(refusal(&store, &brief), "expired");
        assert!(
            store.list_join_tokens().unwrap().iter().any(|t| t.id == id_of(&brief)),
            "a refusal deletes nothing"
        );
        // Making the next token sweeps the expired ones.
        store.create_join_token(1, HOUR).unwrap();
        let left: Vec<_> = store.list_join_tokens().unwrap().into_iter().map(|t| t.id).collect();
        assert_eq!(left.len(), 1, "{left:?}");
        assert_ne!(left[0], id_of(&brief));
    }

    fn a_revoked_token_is_refused(db) {
        let store = db.open();
        let token = store.create_join_token(3, HOUR).unwrap();
        assert!(store.revoke_join_token(id_of(&token)).unwrap());
        assert!(!store.revoke_join_token(id_of(&token)).unwrap(), "already gone");
        assert_eq!(refusal(&store, &token), "unknown or used-up token");
    }

    fn racing_nodes_spend_a_one_use_token_once(db) {
        const NODES: usize = 8;
        let store = Arc::new(db.open());
        let token = store.create_join_token(1, HOUR).unwrap();
        let results: Vec<Result<(), StoreError>> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..NODES)
                .map(|_| {
                    let (store, token) = (store.clone(), token.clone());
                    scope.spawn(move || store.redeem_join_token(&token))
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let admitted = results.iter().filter(|r| r.is_ok()).count();
        assert_eq!(admitted, 1, "{results:?}");
        assert!(
            results
                .iter()
                .all(|r| matches!(r, Ok(()) | Err(StoreError::JoinTokenRefused { .. }))),
            "{results:?}"
        );
    }
}
