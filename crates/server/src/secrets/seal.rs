//! Sealing a value for one row: ChaCha20-Poly1305 with a fresh random 96-bit nonce per
//! write, and the row's tenant and name as associated data, so a ciphertext copied into
//! another row (or another tenant's) fails to open.

use berth_protocol::TenantId;
use ring::aead::{Aad, Nonce, NONCE_LEN};
use ring::rand::{SecureRandom, SystemRandom};

use crate::secrets::error::SecretError;
use crate::secrets::key::{wipe, SecretKey};
use crate::secrets::value::SecretValue;

/// Versions the AAD layout: a future format change cannot open old rows by accident.
const AAD_PREFIX: &[u8] = b"berth-secret-v1\0";

/// A value as stored: nonce and ciphertext (with its 16-byte tag).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sealed {
    pub nonce: [u8; NONCE_LEN],
    pub ciphertext: Vec<u8>,
}

fn aad(tenant: &TenantId, name: &str) -> Vec<u8> {
    let mut aad = Vec::with_capacity(AAD_PREFIX.len() + tenant.as_str().len() + 1 + name.len());
    aad.extend_from_slice(AAD_PREFIX);
    aad.extend_from_slice(tenant.as_str().as_bytes());
    aad.push(0);
    aad.extend_from_slice(name.as_bytes());
    aad
}

pub fn seal(
    key: &SecretKey,
    rng: &SystemRandom,
    tenant: &TenantId,
    name: &str,
    value: &SecretValue,
) -> Result<Sealed, SecretError> {
    let mut nonce = [0u8; NONCE_LEN];
    rng.fill(&mut nonce).map_err(|_| SecretError::Crypto {
        action: "draw a nonce",
    })?;
    // Room for the tag up front: growing the buffer would free a copy of the plaintext.
    let tag_len = key.aead.algorithm().tag_len();
    let mut buf = Vec::with_capacity(value.len() + tag_len);
    buf.extend_from_slice(value.expose().as_bytes());
    let sealed = key.aead.seal_in_place_append_tag(
        Nonce::assume_unique_for_key(nonce),
        Aad::from(aad(tenant, name)),
        &mut buf,
    );
    if sealed.is_err() {
        wipe(&mut buf);
        return Err(SecretError::Crypto { action: "seal" });
    }
    Ok(Sealed {
        nonce,
        ciphertext: buf,
    })
}

pub fn open(
    key: &SecretKey,
    tenant: &TenantId,
    name: &str,
    nonce: &[u8],
    ciphertext: &[u8],
) -> Result<SecretValue, SecretError> {
    let tampered = || SecretError::Tampered {
        tenant: tenant.clone(),
        name: name.to_owned(),
    };
    let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| tampered())?;
    let mut buf = ciphertext.to_vec();
    let len = match key
        .aead
        .open_in_place(nonce, Aad::from(aad(tenant, name)), &mut buf)
    {
        Ok(plain) => plain.len(),
        Err(_) => return Err(tampered()),
    };
    buf.truncate(len);
    match String::from_utf8(buf) {
        Ok(text) => Ok(SecretValue::new(text)),
        Err(e) => {
            // Authentic but not text: only a writer other than berth could have sealed it.
            wipe(&mut e.into_bytes());
            Err(tampered())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::secrets::key::KEY_BYTES;

    fn key(byte: u8) -> SecretKey {
        SecretKey::from_bytes(&mut [byte; KEY_BYTES]).unwrap()
    }

    fn tenant(byte: u8) -> TenantId {
        TenantId::from_random([byte; 20])
    }

    fn value(s: &str) -> SecretValue {
        SecretValue::new(s.to_owned())
    }

    #[test]
    fn round_trip() {
        let (k, rng, t) = (key(1), SystemRandom::new(), tenant(1));
        let sealed = seal(&k, &rng, &t, "anthropic", &value("sk-ant-xyz")).unwrap();
        assert!(!sealed.ciphertext.windows(10).any(|w| w == b"sk-ant-xyz"));
        let opened = open(&k, &t, "anthropic", &sealed.nonce, &sealed.ciphertext).unwrap();
        assert_eq!(opened.expose(), "sk-ant-xyz");
    }

    #[test]
    fn the_wrong_key_fails() {
        let (rng, t) = (SystemRandom::new(), tenant(1));
        let sealed = seal(&key(1), &rng, &t, "a", &value("v")).unwrap();
        let err = open(&key(2), &t, "a", &sealed.nonce, &sealed.ciphertext).unwrap_err();
        assert!(matches!(err, SecretError::Tampered { .. }), "{err:?}");
    }

    #[test]
    fn a_ciphertext_moved_to_another_name_or_tenant_fails() {
        let (k, rng) = (key(1), SystemRandom::new());
        let sealed = seal(&k, &rng, &tenant(1), "a", &value("v")).unwrap();
        assert!(open(&k, &tenant(1), "b", &sealed.nonce, &sealed.ciphertext).is_err());
        assert!(open(&k, &tenant(2), "a", &sealed.nonce, &sealed.ciphertext).is_err());
        // The separator keeps ("ab", "") and ("a", "b")-style splits apart.
        assert!(open(&k, &tenant(1), "a\0", &sealed.nonce, &sealed.ciphertext).is_err());
        assert!(open(&k, &tenant(1), "a", &sealed.nonce, &sealed.ciphertext).is_ok());
    }

    #[test]
    fn any_tampered_byte_fails() {
        let (k, rng, t) = (key(1), SystemRandom::new(), tenant(1));
        let sealed = seal(&k, &rng, &t, "a", &value("secret")).unwrap();
        for i in 0..sealed.ciphertext.len() {
            let mut c = sealed.ciphertext.clone();
            c[i] ^= 0x01;
            assert!(open(&k, &t, "a", &sealed.nonce, &c).is_err(), "byte {i}");
        }
        for i in 0..NONCE_LEN {
            let mut n = sealed.nonce;
            n[i] ^= 0x80;
            assert!(
                open(&k, &t, "a", &n, &sealed.ciphertext).is_err(),
                "nonce {i}"
            );
        }
        assert!(open(&k, &t, "a", &sealed.nonce[..11], &sealed.ciphertext).is_err());
        assert!(open(&k, &t, "a", &sealed.nonce, &sealed.ciphertext[..4]).is_err());
    }

    #[test]
    fn two_writes_of_one_value_differ() {
        let (k, rng, t) = (key(1), SystemRandom::new(), tenant(1));
        let a = seal(&k, &rng, &t, "a", &value("same")).unwrap();
        let b = seal(&k, &rng, &t, "a", &value("same")).unwrap();
        assert_ne!(a.nonce, b.nonce);
        assert_ne!(a.ciphertext, b.ciphertext);
    }
}
