//! A sandbox's `envdAccessToken`: what the SDK sends as `X-Access-Token` to the in-sandbox
//! API, which has no API key. It is HMAC-SHA256 of the box's id under a host key, in hex,
//! so it is never stored: it is derived again to be checked ([`check`], constant time).
//! Keyed by the box id (never reused) and not the sandbox id (a name): a token of a killed
//! sandbox opens nothing, even if a later box takes the same name.
//!
//! Unlike E2B, berth issues the token for every sandbox, `secure` or not: a box's processes
//! are never open to whoever learns its id.
//!
//! A sandbox's `trafficAccessToken` is derived the same way under another context: the
//! `e2b-traffic-access-token` header that opens its ports' host names (E2B's private
//! sandboxes send it; berth's sandboxes are all private). Neither token opens the other's door.
//!
//! The key is 32 OS-random bytes in `<data>/e2b-access.key` (mode 0600), made at the first
//! start; losing it only invalidates the tokens of running sandboxes, which `connect` hands
//! out again.

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use berth_protocol::BoxId;
use ring::hmac;

/// The header E2B's SDKs and users send to a private sandbox's ports, with its
/// `trafficAccessToken`.
pub const TRAFFIC_TOKEN_HEADER: &str = "e2b-traffic-access-token";

/// The key file, in the data directory.
pub const KEY_FILE: &str = "e2b-access.key";
const KEY_BYTES: usize = 32;
/// What a token opens: each binds its tag to its use, so the same key never signs anything
/// else under these prefixes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// `envdAccessToken`: the in-sandbox API.
    Envd,
    /// `trafficAccessToken`: the sandbox's ports by host name.
    Traffic,
}

impl Purpose {
    fn context(self) -> &'static [u8] {
        match self {
            Purpose::Envd => b"berth e2b envd access token v1\0",
            Purpose::Traffic => b"berth e2b traffic access token v1\0",
        }
    }
}

/// Why the key could not be loaded or made.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("cannot {action} the E2B access-token key {}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("the E2B access-token key {} is readable by others (mode {mode:o}); make it 0600", path.display())]
    Mode { path: PathBuf, mode: u32 },

    #[error("the E2B access-token key {} is not {KEY_BYTES} bytes: remove it, and a new one is made at the next start (running sandboxes then need a `connect` for a new token)", path.display())]
    Length { path: PathBuf },

    #[error("the OS random source failed")]
    Random(#[source] getrandom::Error),
}

/// The host key the tokens are derived under.
pub struct AccessTokens {
    key: hmac::Key,
}

impl std::fmt::Debug for AccessTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AccessTokens").finish_non_exhaustive()
    }
}

impl AccessTokens {
    /// Loads the key in `data_dir`, or makes it when there is none.
    pub fn open(data_dir: &Path) -> Result<AccessTokens, KeyError> {
        let path = data_dir.join(KEY_FILE);
        let mut raw = match read_key(&path)? {
            Some(raw) => raw,
            None => make_key(&path)?,
        };
        let tokens = AccessTokens::from_bytes(&raw);
        raw.fill(0);
        Ok(tokens)
    }

    fn from_bytes(raw: &[u8; KEY_BYTES]) -> AccessTokens {
        AccessTokens {
            key: hmac::Key::new(hmac::HMAC_SHA256, raw),
        }
    }

    /// Box `id`'s token for `purpose`.
    pub fn for_box(&self, purpose: Purpose, id: &BoxId) -> String {
        berth_basics::hex(hmac::sign(&self.key, &message(purpose, id)).as_ref())
    }

    /// Whether `token` is box `id`'s for `purpose`, compared in constant time.
    pub fn check(&self, purpose: Purpose, id: &BoxId, token: &str) -> bool {
        let Some(tag) = unhex(token) else {
            return false;
        };
        hmac::verify(&self.key, &message(purpose, id), &tag).is_ok()
    }
}

fn message(purpose: Purpose, id: &BoxId) -> Vec<u8> {
    [purpose.context(), id.as_str().as_bytes()].concat()
}

/// Lowercase or uppercase hex of exactly a SHA-256 tag; anything else is `None`.
fn unhex(text: &str) -> Option<Vec<u8>> {
    let text = text.as_bytes();
    if text.len() != 64 {
        return None;
    }
    let nibble = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    text.chunks(2)
        .map(|pair| Some(nibble(pair[0])? << 4 | nibble(pair[1])?))
        .collect()
}

/// The key at `path`, checked; `None` when there is no file.
fn read_key(path: &Path) -> Result<Option<[u8; KEY_BYTES]>, KeyError> {
    let io = |action| {
        move |source| KeyError::Io {
            action,
            path: path.to_owned(),
            source,
        }
    };
    let mut file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io("open")(e)),
    };
    let mode = file.metadata().map_err(io("inspect"))?.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(KeyError::Mode {
            path: path.to_owned(),
            mode,
        });
    }
    // One byte more than a key, so a longer file is caught.
    let mut buf = [0u8; KEY_BYTES + 1];
    let mut len = 0;
    loop {
        match file.read(&mut buf[len..]).map_err(io("read"))? {
            0 => break,
            n => len += n,
        }
        if len == buf.len() {
            break;
        }
    }
    let mut raw = [0u8; KEY_BYTES];
    let read = (len == KEY_BYTES).then(|| raw.copy_from_slice(&buf[..KEY_BYTES]));
    buf.fill(0);
    match read {
        Some(()) => Ok(Some(raw)),
        None => Err(KeyError::Length {
            path: path.to_owned(),
        }),
    }
}

/// A new key at `path`, written whole or not at all (the data dir's lock keeps a second
/// daemon from racing this).
fn make_key(path: &Path) -> Result<[u8; KEY_BYTES], KeyError> {
    let mut raw = [0u8; KEY_BYTES];
    getrandom::fill(&mut raw).map_err(KeyError::Random)?;
    berth_basics::write_atomically(path, &raw, 0o600).map_err(|source| KeyError::Io {
        action: "create",
        path: path.to_owned(),
        source,
    })?;
    tracing::info!(path = %path.display(), "made the E2B access-token key");
    Ok(raw)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_opens_its_own_box_only() {
        let tokens = AccessTokens::from_bytes(&[7; KEY_BYTES]);
        let (a, b) = (BoxId::from_random([1; 20]), BoxId::from_random([2; 20]));
        let token = tokens.for_box(Purpose::Envd, &a);
        assert_eq!(token.len(), 64);
        assert!(tokens.check(Purpose::Envd, &a, &token));
        assert!(tokens.check(Purpose::Envd, &a, &token.to_uppercase()));
        assert!(!tokens.check(Purpose::Envd, &b, &token));
        // The envd token never opens the ports, nor the reverse.
        assert!(!tokens.check(Purpose::Traffic, &a, &token));
        let traffic = tokens.for_box(Purpose::Traffic, &a);
        assert!(tokens.check(Purpose::Traffic, &a, &traffic));
        assert!(!tokens.check(Purpose::Envd, &a, &traffic));
        let mut flipped = token.clone().into_bytes();
        flipped[10] = if flipped[10] == b'0' { b'1' } else { b'0' };
        assert!(!tokens.check(Purpose::Envd, &a, std::str::from_utf8(&flipped).unwrap()));
        for bad in [
            "",
            "zz",
            &token[..63],
            &format!("{token}0"),
            &"g".repeat(64),
        ] {
            assert!(!tokens.check(Purpose::Envd, &a, bad), "{bad:?}");
        }
        let other_host = AccessTokens::from_bytes(&[8; KEY_BYTES]);
        assert!(!other_host.check(Purpose::Envd, &a, &token));
    }

    #[test]
    fn the_key_is_made_once_and_kept_private() {
        let dir = tempfile::tempdir().unwrap();
        let id = BoxId::from_random([3; 20]);
        let first = AccessTokens::open(dir.path())
            .unwrap()
            .for_box(Purpose::Envd, &id);
        let path = dir.path().join(KEY_FILE);
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!((meta.len(), meta.permissions().mode() & 0o777), (32, 0o600));
        assert_eq!(
            AccessTokens::open(dir.path())
                .unwrap()
                .for_box(Purpose::Envd, &id),
            first
        );

        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(matches!(
            AccessTokens::open(dir.path()),
            Err(KeyError::Mode { .. })
        ));
        std::fs::write(&path, [1u8; 40]).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(matches!(
            AccessTokens::open(dir.path()),
            Err(KeyError::Length { .. })
        ));
    }
}
