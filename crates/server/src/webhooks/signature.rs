//! Standard Webhooks signatures (standardwebhooks.com): a secret `whsec_<base64 key>`, and
//! per attempt `webhook-signature: v1,<base64 HMAC-SHA256(key, "{id}.{timestamp}.{body}")>`,
//! which a receiver checks with any Standard Webhooks library or a few lines of its own.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use ring::hmac;

const PREFIX: &str = "whsec_";
/// Bytes of a new secret's key.
const KEY_BYTES: usize = 32;

/// A new signing secret.
pub fn new_secret() -> Result<String, getrandom::Error> {
    let mut key = [0u8; KEY_BYTES];
    getrandom::fill(&mut key)?;
    Ok(format!("{PREFIX}{}", STANDARD.encode(key)))
}

/// The `webhook-signature` value of one attempt; `None` for a secret that is not
/// `whsec_<base64>` (only a writer other than berth could have stored one).
pub fn sign(secret: &str, id: &str, timestamp: i64, body: &[u8]) -> Option<String> {
    let key = STANDARD.decode(secret.strip_prefix(PREFIX)?).ok()?;
    let key = hmac::Key::new(hmac::HMAC_SHA256, &key);
    let mut context = hmac::Context::with_key(&key);
    context.update(format!("{id}.{timestamp}.").as_bytes());
    context.update(body);
    Some(format!("v1,{}", STANDARD.encode(context.sign().as_ref())))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The specification's own example (standard-webhooks, `spec/standard-webhooks.md`).
    #[test]
    fn the_specifications_example_signs_the_same() {
        let signature = sign(
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1614265330,
            br#"{"test": 2432232314}"#,
        );
        assert_eq!(
            signature.as_deref(),
            Some("v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
        );
        assert_eq!(sign("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "m", 1, b""), None);
    }

    #[test]
    fn new_secrets_are_random_and_usable() {
        let (a, b) = (new_secret().unwrap(), new_secret().unwrap());
        assert_ne!(a, b);
        assert!(a.starts_with(PREFIX));
        assert!(sign(&a, "msg_1", 1, b"{}").is_some());
    }
}
