//! Certificate files reloaded when they change: polled (inode, size, mtime) every
//! [`POLL`], so a renewal by certbot, a `mv` into place or an edit in place is picked up
//! without a restart. A bad new pair is logged and the old one kept.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::pem_files;
use super::resolver::CertResolver;
use berth_runtime::error_chain;

/// How often the files are looked at; a stat of two files is cheap.
pub const POLL: Duration = Duration::from_secs(2);

/// What identifies a file's version without reading it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp {
    inode: u64,
    size: u64,
    mtime_ns: i128,
}

fn stamp(path: &Path) -> Option<Stamp> {
    let meta = std::fs::metadata(path).ok()?;
    Some(Stamp {
        inode: meta.ino(),
        size: meta.size(),
        mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
    })
}

/// Reloads the pair whenever either file changes, until the task is aborted.
pub async fn watch(cert: PathBuf, key: PathBuf, resolver: Arc<CertResolver>, data_dir: PathBuf) {
    let mut watcher = Watcher::new(cert, key);
    let mut tick = tokio::time::interval(POLL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        watcher.check(&resolver, &data_dir);
    }
}

/// What one look at the files did.
#[derive(Debug, PartialEq, Eq)]
enum Reload {
    Unchanged,
    Loaded,
    /// The new files are not a usable pair; the old certificate is still served.
    Refused,
}

struct Watcher {
    cert: PathBuf,
    key: PathBuf,
    seen: (Option<Stamp>, Option<Stamp>),
}

impl Watcher {
    fn new(cert: PathBuf, key: PathBuf) -> Watcher {
        let seen = (stamp(&cert), stamp(&key));
        Watcher { cert, key, seen }
    }

    fn check(&mut self, resolver: &CertResolver, data_dir: &Path) -> Reload {
        let now = (stamp(&self.cert), stamp(&self.key));
        if now == self.seen {
            return Reload::Unchanged;
        }
        self.seen = now;
        // A pair replaced one file at a time fails between the two writes; the second
        // write changes the stamps again and is retried then.
        match pem_files::load_pair(&self.cert, &self.key) {
            Ok(loaded) => {
                resolver.set(loaded.certified);
                if let Err(e) = super::write_cert_file(resolver, data_dir) {
                    tracing::warn!(error = %error_chain(&e), "cannot update the pinned certificate file");
                }
                tracing::info!(cert = %self.cert.display(), "TLS certificate reloaded");
                Reload::Loaded
            }
            Err(e) => {
                tracing::warn!(
                    error = %error_chain(&e),
                    "the changed TLS files were not loaded; still serving the previous certificate"
                );
                Reload::Refused
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair() -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let params = rcgen::CertificateParams::new(vec!["localhost".into()]).unwrap();
        (params.self_signed(&key).unwrap().pem(), key.serialize_pem())
    }

    #[test]
    fn a_bad_replacement_keeps_the_old_certificate_and_a_good_one_replaces_it() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = (dir.path().join("c.pem"), dir.path().join("k.pem"));
        let (c1, k1) = pair();
        std::fs::write(&cert, &c1).unwrap();
        std::fs::write(&key, &k1).unwrap();
        let resolver = CertResolver::default();
        resolver.set(pem_files::load_pair(&cert, &key).unwrap().certified);
        let first = resolver.current().unwrap();
        let mut watcher = Watcher::new(cert.clone(), key.clone());
        assert_eq!(watcher.check(&resolver, dir.path()), Reload::Unchanged);

        // A certificate whose key is not the one beside it, then garbage.
        let (c2, k2) = pair();
        std::fs::write(&cert, &c2).unwrap();
        assert_eq!(watcher.check(&resolver, dir.path()), Reload::Refused);
        assert!(Arc::ptr_eq(&resolver.current().unwrap(), &first));
        std::fs::write(
            &key,
            "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
        )
        .unwrap();
        assert_eq!(watcher.check(&resolver, dir.path()), Reload::Refused);
        assert!(Arc::ptr_eq(&resolver.current().unwrap(), &first));
        assert!(!dir.path().join(super::super::CERT_FILE).exists());

        // The matching key lands: served, and written for the CLI to pin.
        std::fs::write(&key, &k2).unwrap();
        assert_eq!(watcher.check(&resolver, dir.path()), Reload::Loaded);
        assert!(!Arc::ptr_eq(&resolver.current().unwrap(), &first));
        let pinned = std::fs::read_to_string(dir.path().join(super::super::CERT_FILE)).unwrap();
        assert_eq!(pinned.trim(), c2.trim());
    }
}
