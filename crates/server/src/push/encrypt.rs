//! RFC 8291 message encryption for Web Push: `aes128gcm` (RFC 8188) content coding, one
//! record, keyed by an ECDH agreement between a fresh P-256 key of ours and the browser's
//! key, mixed with the browser's auth secret.

use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_128_GCM};
use ring::agreement::{self, EphemeralPrivateKey, UnparsedPublicKey, ECDH_P256};
use ring::hkdf::{self, KeyType, Salt, HKDF_SHA256};
use ring::rand::{SecureRandom, SystemRandom};

/// The record size written in the header: push services take bodies of at most 4096 bytes,
/// and the one record must fit in it.
pub const RECORD_SIZE: u32 = 4096;

/// Bytes the header takes: salt (16), record size (4), key id length (1), our key (65).
const HEADER_BYTES: usize = 16 + 4 + 1 + 65;

/// The last record's padding delimiter (RFC 8188 §2).
const LAST_RECORD: u8 = 2;

/// Largest plaintext: the whole body within 4096 bytes.
pub const MAX_PLAINTEXT: usize = RECORD_SIZE as usize - HEADER_BYTES - 1 - 16;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncryptError {
    #[error("a push message holds at most {MAX_PLAINTEXT} bytes, got {len}")]
    TooLarge { len: usize },
    #[error("the subscription's p256dh is not a P-256 public key")]
    BadPeerKey,
    #[error("the OS random source failed")]
    Random,
}

/// The body of a push to a browser whose key is `ua_public` (65-byte uncompressed point)
/// and auth secret `auth` (16 bytes).
pub fn encrypt(plaintext: &[u8], ua_public: &[u8], auth: &[u8]) -> Result<Vec<u8>, EncryptError> {
    let rng = SystemRandom::new();
    let ours = EphemeralPrivateKey::generate(&ECDH_P256, &rng).map_err(|_| EncryptError::Random)?;
    let as_public = ours
        .compute_public_key()
        .map_err(|_| EncryptError::Random)?;
    let mut salt = [0u8; 16];
    rng.fill(&mut salt).map_err(|_| EncryptError::Random)?;
    let ecdh_secret = agreement::agree_ephemeral(
        ours,
        &UnparsedPublicKey::new(&ECDH_P256, ua_public),
        <[u8]>::to_vec,
    )
    .map_err(|_| EncryptError::BadPeerKey)?;
    seal(
        &Keys {
            ecdh_secret: &ecdh_secret,
            as_public: as_public.as_ref(),
            ua_public,
            auth,
            salt: &salt,
        },
        plaintext,
    )
}

/// Whether `ua_public` is a point on P-256 we can agree a key with.
pub fn is_valid_peer_key(ua_public: &[u8]) -> bool {
    let rng = SystemRandom::new();
    let Ok(ours) = EphemeralPrivateKey::generate(&ECDH_P256, &rng) else {
        return false;
    };
    ua_public.len() == 65
        && agreement::agree_ephemeral(ours, &UnparsedPublicKey::new(&ECDH_P256, ua_public), |_| ())
            .is_ok()
}

/// Everything the message's keys derive from (RFC 8291 §3.3, §3.4).
pub(crate) struct Keys<'a> {
    pub ecdh_secret: &'a [u8],
    pub as_public: &'a [u8],
    pub ua_public: &'a [u8],
    pub auth: &'a [u8],
    pub salt: &'a [u8; 16],
}

/// The deterministic part, after the ECDH agreement: separate so the RFC's example (whose
/// private key ring cannot import) checks it byte for byte.
pub(crate) fn seal(keys: &Keys<'_>, plaintext: &[u8]) -> Result<Vec<u8>, EncryptError> {
    if plaintext.len() > MAX_PLAINTEXT {
        return Err(EncryptError::TooLarge {
            len: plaintext.len(),
        });
    }
    let prk_key = Salt::new(HKDF_SHA256, keys.auth).extract(keys.ecdh_secret);
    let mut ikm = [0u8; 32];
    expand(
        &prk_key,
        &[b"WebPush: info\0", keys.ua_public, keys.as_public],
        &mut ikm,
    );
    let prk = Salt::new(HKDF_SHA256, keys.salt).extract(&ikm);
    let mut cek = [0u8; 16];
    expand(&prk, &[b"Content-Encoding: aes128gcm\0"], &mut cek);
    let mut nonce = [0u8; 12];
    expand(&prk, &[b"Content-Encoding: nonce\0"], &mut nonce);

    let mut body = Vec::with_capacity(HEADER_BYTES + plaintext.len() + 17);
    body.extend_from_slice(keys.salt);
    body.extend_from_slice(&RECORD_SIZE.to_be_bytes());
    body.push(keys.as_public.len() as u8);
    body.extend_from_slice(keys.as_public);
    let mut record = Vec::with_capacity(plaintext.len() + 17);
    record.extend_from_slice(plaintext);
    record.push(LAST_RECORD);
    let key =
        LessSafeKey::new(UnboundKey::new(&AES_128_GCM, &cek).map_err(|_| EncryptError::Random)?);
    // One record: its sequence number is 0, so the nonce is the derived one as is.
    key.seal_in_place_append_tag(
        Nonce::assume_unique_for_key(nonce),
        Aad::empty(),
        &mut record,
    )
    .map_err(|_| EncryptError::TooLarge {
        len: plaintext.len(),
    })?;
    body.extend_from_slice(&record);
    Ok(body)
}

/// HKDF-Expand into `out` (whose length is the output length).
fn expand(prk: &hkdf::Prk, info: &[&[u8]], out: &mut [u8]) {
    struct Len(usize);
    impl KeyType for Len {
        fn len(&self) -> usize {
            self.0
        }
    }
    // Lengths here are 12 to 32 bytes, far below HKDF-SHA256's limit of 8160: cannot fail.
    let okm = prk
        .expand(info, Len(out.len()))
        .expect("an HKDF length below 8160");
    okm.fill(out).expect("the length asked for");
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use base64::Engine;

    fn b64(text: &str) -> Vec<u8> {
        URL_SAFE_NO_PAD.decode(text).unwrap()
    }

    /// RFC 8291 Appendix A: its inputs give its message, byte for byte. ring cannot import
    /// the appendix's private key, so the agreement is the appendix's own shared secret;
    /// everything after it (HKDF, the header, the record, AES-GCM) is checked here, and the
    /// API tests decrypt real pushes with an independent implementation.
    #[test]
    fn the_rfc_8291_example_encrypts_to_its_exact_message() {
        let salt: [u8; 16] = b64("DGv6ra1nlYgDCS1FRnbzlw").try_into().unwrap();
        let keys = Keys {
            ecdh_secret: &b64("kyrL1jIIOHEzg3sM2ZWRHDRB62YACZhhSlknJ672kSs"),
            as_public: &b64("BP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A8"),
            ua_public: &b64("BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4"),
            auth: &b64("BTBZMqHH6r4Tts7J_aSIgg"),
            salt: &salt,
        };
        let body = seal(&keys, b"When I grow up, I want to be a watermelon").unwrap();
        assert_eq!(
            URL_SAFE_NO_PAD.encode(body),
            "DGv6ra1nlYgDCS1FRnbzlwAAEABBBP4z9KsN6nGRTbVYI_c7VJSPQTBtkgcy27mlmlMoZIIgDll6e3vCYLocInmYWAmS6TlzAC8wEqKK6PBru3jl7A_yl95bQpu6cVPTpK4Mqgkf1CXztLVBSt2Ks3oZwbuwXPXLWyouBWLVWGNWQexSgSxsj_Qulcy4a-fN"
        );
    }

    #[test]
    fn bad_keys_and_oversized_messages_are_refused() {
        let ua = b64("BCVxsr7N_eNgVRqvHtD0zTZsEc6-VV-JvLexhqUzORcxaOzi6-AYWXvTBHm4bjyPjs7Vd8pZGH6SRpkNtoIAiw4");
        assert!(is_valid_peer_key(&ua));
        let mut off_curve = ua.clone();
        off_curve[64] ^= 1;
        assert!(!is_valid_peer_key(&off_curve));
        assert!(!is_valid_peer_key(&ua[..33]));
        assert_eq!(
            encrypt(b"x", &off_curve, &[0; 16]).unwrap_err(),
            EncryptError::BadPeerKey
        );
        let body = encrypt(&vec![b'a'; MAX_PLAINTEXT], &ua, &[0; 16]).unwrap();
        assert_eq!(
            body.len(),
            RECORD_SIZE as usize,
            "the largest message fills 4096 bytes"
        );
        assert_eq!(
            encrypt(&vec![b'a'; MAX_PLAINTEXT + 1], &ua, &[0; 16]).unwrap_err(),
            EncryptError::TooLarge {
                len: MAX_PLAINTEXT + 1
            }
        );
    }
}
