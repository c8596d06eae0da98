//! The secret store against a real SQLite file and key file.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;

use berth_store::{Store, DB_FILE};

use super::*;

struct Setup {
    dir: tempfile::TempDir,
    store: Arc<Store>,
}

impl Setup {
    fn new() -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(&dir.path().join(DB_FILE)).unwrap());
        Setup { dir, store }
    }

    fn key(&self) -> std::path::PathBuf {
        self.dir.path().join("secrets.key")
    }

    fn open(&self) -> Result<SecretStore, SecretError> {
        SecretStore::open(
            self.store.clone(),
            &self.key(),
            &self.dir.path().join(DB_FILE),
        )
    }
}

fn value(s: &str) -> SecretValue {
    SecretValue::new(s.to_owned())
}

#[test]
fn set_reveal_replace_list_delete() {
    let s = Setup::new();
    let secrets = s.open().unwrap();
    let t = s.store.create_tenant("acme").unwrap().id;
    assert!(secrets.set(&t, "gh", &value("ghp_1")).unwrap().created);
    assert!(!secrets.set(&t, "gh", &value("ghp_2")).unwrap().created);
    assert_eq!(secrets.reveal(&t, "gh").unwrap().unwrap().expose(), "ghp_2");
    assert!(secrets.reveal(&t, "other").unwrap().is_none());
    assert_eq!(secrets.list(&t).unwrap()[0].name, "gh");
    secrets.delete(&t, "gh").unwrap();
    assert!(matches!(
        secrets.delete(&t, "gh"),
        Err(SecretError::NotFound { .. })
    ));
    assert!(secrets.reveal(&t, "gh").unwrap().is_none());
}

#[test]
fn bad_names_and_values_are_refused_without_echoing_the_value() {
    let s = Setup::new();
    let secrets = s.open().unwrap();
    let t = s.store.create_tenant("acme").unwrap().id;
    let err = secrets.set(&t, "Bad", &value("ok")).unwrap_err();
    assert!(matches!(err, SecretError::InvalidName { .. }), "{err:?}");
    let err = secrets
        .set(&t, "ok", &value("line\nbreak-SENTINEL"))
        .unwrap_err();
    assert!(matches!(err, SecretError::InvalidValue { .. }), "{err:?}");
    assert!(!format!("{err} {err:?}").contains("SENTINEL"));
    assert!(secrets.list(&t).unwrap().is_empty());
}

#[test]
fn the_key_is_made_once_and_reused() {
    let s = Setup::new();
    let first = s.open().unwrap().key_id().to_owned();
    assert_eq!(
        fs::metadata(s.key()).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let t = s.store.create_tenant("acme").unwrap().id;
    s.open().unwrap().set(&t, "a", &value("v1")).unwrap();
    let again = s.open().unwrap();
    assert_eq!(again.key_id(), first);
    assert_eq!(again.reveal(&t, "a").unwrap().unwrap().expose(), "v1");
}

#[test]
fn a_missing_key_with_rows_is_refused_and_no_key_is_made() {
    let s = Setup::new();
    let t = s.store.create_tenant("acme").unwrap().id;
    s.open().unwrap().set(&t, "a", &value("v1")).unwrap();
    fs::remove_file(s.key()).unwrap();
    let err = s.open().unwrap_err();
    assert!(matches!(err, SecretError::KeyMissing { .. }), "{err:?}");
    assert!(err.to_string().contains("restore"), "{err}");
    assert!(!s.key().exists(), "a new key was made over existing rows");
}

#[test]
fn another_key_with_rows_is_refused_naming_both_ids() {
    let s = Setup::new();
    let t = s.store.create_tenant("acme").unwrap().id;
    let old = {
        let secrets = s.open().unwrap();
        secrets.set(&t, "a", &value("v1")).unwrap();
        secrets.key_id().to_owned()
    };
    fs::remove_file(s.key()).unwrap();
    let new = key::create(&s.key()).unwrap();
    let err = s.open().unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, SecretError::KeyMismatch { .. }), "{err:?}");
    assert!(
        text.contains(&old) && text.contains(new.id()) && text.contains("restore the key file"),
        "{text}"
    );
}

#[test]
fn a_row_copied_to_another_tenant_does_not_open() {
    let s = Setup::new();
    let secrets = s.open().unwrap();
    let a = s.store.create_tenant("a").unwrap().id;
    let b = s.store.create_tenant("b").unwrap().id;
    secrets.set(&a, "tok", &value("for-a-only")).unwrap();
    let row = s.store.get_secret(&a, "tok").unwrap().unwrap();
    s.store
        .put_secret(&b, "tok", &row.key_id, &row.nonce, &row.ciphertext)
        .unwrap();
    let err = secrets.reveal(&b, "tok").unwrap_err();
    assert!(matches!(err, SecretError::Tampered { .. }), "{err:?}");
}

#[test]
fn the_plaintext_is_not_in_the_database_files() {
    let s = Setup::new();
    let secrets = s.open().unwrap();
    let t = s.store.create_tenant("acme").unwrap().id;
    let sentinel = "sk-PLAINTEXT-SENTINEL-7f3a9c";
    secrets.set(&t, "a", &value(sentinel)).unwrap();
    let mut checked = 0;
    for file in [DB_FILE.to_owned(), format!("{DB_FILE}-wal")] {
        let path = s.dir.path().join(file);
        if let Ok(bytes) = fs::read(&path) {
            checked += 1;
            assert!(
                !bytes
                    .windows(sentinel.len())
                    .any(|w| w == sentinel.as_bytes()),
                "plaintext found in {}",
                path.display()
            );
        }
    }
    assert!(checked >= 1);
}
