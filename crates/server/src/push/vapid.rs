//! The daemon's VAPID identity (RFC 8292): a P-256 key made at the first start and kept in
//! `<data dir>/vapid.key` (PKCS#8 PEM, 0600), and the ES256 JWT that goes with each push.
//! Browsers bind a subscription to the public key, so losing the file (or making a new
//! one) silently ends every subscription: it is kept like the admin key.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ring::rand::SystemRandom;
use ring::signature::{EcdsaKeyPair, KeyPair, ECDSA_P256_SHA256_FIXED_SIGNING};

/// The key file's name in the data directory.
pub const VAPID_KEY_FILE: &str = "vapid.key";

/// How long a token is valid (RFC 8292 allows at most 24 hours).
pub const TOKEN_LIFETIME: Duration = Duration::from_secs(12 * 3600);

const PEM_TAG: &str = "PRIVATE KEY";

#[derive(Debug, thiserror::Error)]
pub enum VapidError {
    #[error("cannot {action} the VAPID key {}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the VAPID key {} is not a PKCS#8 P-256 key in PEM ({why}); move it away to make a new one (browsers then need to subscribe again)", path.display())]
    Corrupt { path: PathBuf, why: String },
    #[error("cannot make a P-256 key")]
    Generate,
    #[error("cannot sign a VAPID token")]
    Sign,
}

pub struct VapidKey {
    pair: EcdsaKeyPair,
    rng: SystemRandom,
}

impl std::fmt::Debug for VapidKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VapidKey")
            .field("public", &self.public_key_b64())
            .finish_non_exhaustive()
    }
}

impl VapidKey {
    /// Loads `<data_dir>/vapid.key`, making it first if it does not exist.
    pub fn load_or_create(data_dir: &Path) -> Result<VapidKey, VapidError> {
        let path = data_dir.join(VAPID_KEY_FILE);
        let rng = SystemRandom::new();
        let missing = matches!(std::fs::symlink_metadata(&path), Err(e) if e.kind() == std::io::ErrorKind::NotFound);
        if missing {
            create(&path, &rng)?;
            tracing::info!(path = %path.display(), "first start: VAPID key created");
        }
        let text = std::fs::read_to_string(&path).map_err(|source| VapidError::Io {
            action: "read",
            path: path.clone(),
            source,
        })?;
        let corrupt = |why: String| VapidError::Corrupt {
            path: path.clone(),
            why,
        };
        let parsed = pem::parse(text).map_err(|e| corrupt(e.to_string()))?;
        if parsed.tag() != PEM_TAG {
            return Err(corrupt(format!("a {:?} block", parsed.tag())));
        }
        let pair =
            EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, parsed.contents(), &rng)
                .map_err(|e| corrupt(e.to_string()))?;
        Ok(VapidKey { pair, rng })
    }

    /// The uncompressed public point (65 bytes): the browser's `applicationServerKey`.
    pub fn public_key(&self) -> &[u8] {
        self.pair.public_key().as_ref()
    }

    pub fn public_key_b64(&self) -> String {
        URL_SAFE_NO_PAD.encode(self.public_key())
    }

    /// `Authorization: vapid t=<jwt>, k=<public key>` for a push to `origin`.
    pub fn authorization(&self, origin: &str, subject: &str) -> Result<String, VapidError> {
        let exp = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .saturating_add(TOKEN_LIFETIME)
            .as_secs();
        let header = URL_SAFE_NO_PAD.encode(br#"{"typ":"JWT","alg":"ES256"}"#);
        let claims = serde_json::json!({"aud": audience(origin), "exp": exp, "sub": subject});
        let claims = URL_SAFE_NO_PAD.encode(claims.to_string());
        let signing_input = format!("{header}.{claims}");
        // The fixed (r || s) encoding is what JWS ES256 wants, not DER.
        let signature = self
            .pair
            .sign(&self.rng, signing_input.as_bytes())
            .map_err(|_| VapidError::Sign)?;
        Ok(format!(
            "vapid t={signing_input}.{}, k={}",
            URL_SAFE_NO_PAD.encode(signature.as_ref()),
            self.public_key_b64()
        ))
    }
}

/// Writes a new key beside `path` and renames it there, so a crash never leaves a partial
/// key file behind (the data dir's lock keeps a second daemon from racing this).
fn create(path: &Path, rng: &SystemRandom) -> Result<(), VapidError> {
    let io = |action, source| VapidError::Io {
        action,
        path: path.to_owned(),
        source,
    };
    let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, rng)
        .map_err(|_| VapidError::Generate)?;
    let text = pem::encode(&pem::Pem::new(PEM_TAG, pkcs8.as_ref().to_vec()));
    berth_basics::write_atomically(path, text.as_bytes(), 0o600).map_err(|e| io("create", e))
}

/// The origin as RFC 8292 wants `aud`: the default port left out.
fn audience(origin: &str) -> String {
    origin
        .strip_suffix(":443")
        .filter(|_| origin.starts_with("https://"))
        .or_else(|| {
            origin
                .strip_suffix(":80")
                .filter(|_| origin.starts_with("http://"))
        })
        .unwrap_or(origin)
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ring::signature::{UnparsedPublicKey, ECDSA_P256_SHA256_FIXED};

    #[test]
    fn the_key_is_made_once_private_and_signs_tokens() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let key = VapidKey::load_or_create(dir.path()).unwrap();
        let mode = std::fs::metadata(dir.path().join(VAPID_KEY_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(key.public_key().len(), 65);
        assert_eq!(key.public_key()[0], 4);
        let again = VapidKey::load_or_create(dir.path()).unwrap();
        assert_eq!(again.public_key(), key.public_key(), "loaded, not remade");

        let auth = key
            .authorization("https://fcm.googleapis.com:443", "mailto:ops@example.com")
            .unwrap();
        let rest = auth.strip_prefix("vapid t=").unwrap();
        let (jwt, k) = rest.split_once(", k=").unwrap();
        assert_eq!(k, key.public_key_b64());
        let (input, signature) = jwt.rsplit_once('.').unwrap();
        UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, key.public_key())
            .verify(
                input.as_bytes(),
                &URL_SAFE_NO_PAD.decode(signature).unwrap(),
            )
            .unwrap();
        let claims: serde_json::Value = serde_json::from_slice(
            &URL_SAFE_NO_PAD
                .decode(input.split_once('.').unwrap().1)
                .unwrap(),
        )
        .unwrap();
        assert_eq!(claims["aud"], "https://fcm.googleapis.com");
        assert_eq!(claims["sub"], "mailto:ops@example.com");
    }

    #[test]
    fn a_corrupt_key_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(VAPID_KEY_FILE), "nonsense").unwrap();
        let err = VapidKey::load_or_create(dir.path()).unwrap_err();
        assert!(matches!(err, VapidError::Corrupt { .. }), "{err}");
    }

    #[test]
    fn the_audience_leaves_out_default_ports() {
        assert_eq!(audience("https://a.example:443"), "https://a.example");
        assert_eq!(audience("http://127.0.0.1:8099"), "http://127.0.0.1:8099");
        assert_eq!(audience("http://a.example:80"), "http://a.example");
        assert_eq!(audience("http://a.example:443"), "http://a.example:443");
    }
}
