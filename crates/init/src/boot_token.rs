//! `POST /v1/boot/token`: the boot-token handover of a restored (or claimed) box. The token
//! lives behind a lock so a swap is one step: once the 204 is sent, the old token is
//! refused on every connection, old or new.

use std::sync::RwLock;

use berth_protocol::guest::{BootTokenRequest, Environment, MAX_BOOT_TOKEN_BYTES};

use crate::channel::Token;
use crate::error::ApiError;

/// The current boot token.
#[derive(Debug)]
pub struct BootTokens(RwLock<Token>);

impl BootTokens {
    pub fn new(token: Token) -> Self {
        BootTokens(RwLock::new(token))
    }

    /// Whether `candidate` is the current token (constant time in its bytes).
    pub fn matches(&self, candidate: &[u8]) -> bool {
        // A poisoned lock means a panic mid-swap: refuse everything rather than guess.
        self.0.read().is_ok_and(|t| t.matches(candidate))
    }

    /// Sets the clock (in a VM) and then swaps the token: a failure changes neither.
    pub fn rotate(&self, body: &[u8], env: Environment) -> Result<(), ApiError> {
        let request: BootTokenRequest = serde_json::from_slice(body).map_err(ApiError::BadJson)?;
        let token = validate(&request.token)?;
        if env == Environment::Vm {
            set_clock(request.unix_ms)?;
        }
        let mut current = self.0.write().map_err(|_| ApiError::Worker)?;
        *current = Token::from_bytes(token.as_bytes().to_vec());
        Ok(())
    }
}

/// A token goes into an `Authorization` header: printable ASCII, bounded, not empty.
fn validate(token: &str) -> Result<&str, ApiError> {
    let ok = !token.is_empty()
        && token.len() <= MAX_BOOT_TOKEN_BYTES
        && token.bytes().all(|b| b.is_ascii_graphic());
    if ok {
        Ok(token)
    } else {
        Err(ApiError::BadJson(serde::de::Error::custom(format!(
            "token must be 1 to {MAX_BOOT_TOKEN_BYTES} printable ASCII characters"
        ))))
    }
}

/// Sets CLOCK_REALTIME: a VM restored from a snapshot wakes with the clock it slept at.
fn set_clock(unix_ms: u64) -> Result<(), ApiError> {
    let ts = libc::timespec {
        tv_sec: libc::time_t::try_from(unix_ms / 1000).unwrap_or(libc::time_t::MAX),
        tv_nsec: libc::c_long::try_from((unix_ms % 1000) * 1_000_000).unwrap_or(0),
    };
    // SAFETY: `ts` is a valid timespec on the stack for the whole call.
    if unsafe { libc::clock_settime(libc::CLOCK_REALTIME, &raw const ts) } != 0 {
        return Err(ApiError::Fs {
            op: "set the clock",
            path: "CLOCK_REALTIME".to_owned(),
            source: std::io::Error::last_os_error(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(t: &str) -> BootTokens {
        BootTokens::new(Token::from_bytes(t.as_bytes().to_vec()))
    }

    #[test]
    fn a_rotation_refuses_the_old_token_at_once() {
        let t = tokens("old");
        t.rotate(br#"{"token":"new","unix_ms":1}"#, Environment::Sandbox)
            .unwrap();
        assert!(!t.matches(b"old"));
        assert!(t.matches(b"new"));
    }

    #[test]
    fn a_bad_token_changes_nothing() {
        let t = tokens("old");
        for body in [
            &br#"{"token":""}"#[..],
            br#"{"token":"a b"}"#,
            br#"{"token":"\u00e9"}"#,
            br#"{"unix_ms":5}"#,
            b"not json",
        ] {
            assert!(matches!(
                t.rotate(body, Environment::Sandbox),
                Err(ApiError::BadJson(_))
            ));
            assert!(t.matches(b"old"));
        }
        let long = format!(r#"{{"token":"{}"}}"#, "a".repeat(MAX_BOOT_TOKEN_BYTES + 1));
        assert!(t.rotate(long.as_bytes(), Environment::Sandbox).is_err());
        assert!(t.matches(b"old"));
    }
}
