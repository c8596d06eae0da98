//! A secret's plaintext, and the rules a name and a value follow.

use crate::secrets::key::wipe;

/// The longest value, in bytes.
pub const MAX_VALUE_BYTES: usize = 8192;
/// The longest name, in bytes.
pub const MAX_NAME_BYTES: usize = 63;

/// A plaintext secret. It prints as `SecretValue(…)` and its buffer is zeroed when dropped,
/// so a stray `{:?}` or a freed allocation does not leak it.
pub struct SecretValue(String);

impl SecretValue {
    pub fn new(value: String) -> SecretValue {
        SecretValue(value)
    }

    /// The plaintext, for the one place that needs it (the gateway's header).
    pub fn expose(&self) -> &str {
        &self.0
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl std::fmt::Debug for SecretValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretValue(…)")
    }
}

impl Drop for SecretValue {
    fn drop(&mut self) {
        // SAFETY: zero bytes are valid UTF-8, so the string stays valid until it is freed.
        wipe(unsafe { self.0.as_mut_vec() });
    }
}

impl<'de> serde::Deserialize<'de> for SecretValue {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(SecretValue)
    }
}

/// The rule `name` breaks, if any: `[a-z0-9][a-z0-9_-]{0,62}`.
pub fn name_rule(name: &str) -> Option<&'static str> {
    let mut bytes = name.bytes();
    match bytes.next() {
        None => Some("a secret name has 1 to 63 characters"),
        Some(_) if name.len() > MAX_NAME_BYTES => Some("a secret name has 1 to 63 characters"),
        Some(first) if !(first.is_ascii_lowercase() || first.is_ascii_digit()) => {
            Some("a secret name starts with a-z or 0-9")
        }
        Some(_) => (!bytes
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_'))
        .then_some("a secret name uses only a-z, 0-9, _ and -"),
    }
}

/// The rule `value` breaks, if any. The value goes out as an HTTP header value, so it is
/// visible ASCII with inner spaces or tabs only.
pub fn value_rule(value: &str) -> Option<&'static str> {
    let is_blank = |b: u8| b == b' ' || b == b'\t';
    let bytes = value.as_bytes();
    if bytes.is_empty() {
        Some("the value is empty")
    } else if bytes.len() > MAX_VALUE_BYTES {
        Some("the value is over 8192 bytes")
    } else if !bytes
        .iter()
        .all(|&b| (0x21..=0x7e).contains(&b) || is_blank(b))
    {
        Some("the value must be visible ASCII (it is sent as an HTTP header): no control characters, line breaks or non-ASCII")
    } else if is_blank(bytes[0]) || is_blank(bytes[bytes.len() - 1]) {
        Some("the value starts or ends with whitespace")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for ok in ["a", "0", "anthropic", "gh_token-2", &"a".repeat(63)] {
            assert_eq!(name_rule(ok), None, "{ok}");
        }
        for bad in [
            "",
            "_a",
            "-a",
            "A",
            "a.b",
            "a b",
            "ä",
            "a/b",
            &"a".repeat(64),
        ] {
            assert!(name_rule(bad).is_some(), "{bad:?}");
        }
    }

    #[test]
    fn values() {
        for ok in ["x", "sk-ant-123", "Bearer abc", "a\tb", &"v".repeat(8192)] {
            assert_eq!(value_rule(ok), None, "{ok:?}");
        }
        for bad in [
            "",
            " x",
            "x ",
            "\tx",
            "a\nb",
            "a\r\nb",
            "a\0b",
            "a\x7fb",
            "é",
            &"v".repeat(8193),
        ] {
            assert!(value_rule(bad).is_some(), "{bad:?}");
        }
    }

    #[test]
    fn debug_hides_the_value() {
        let v = SecretValue::new("sk-very-secret".into());
        assert_eq!(format!("{v:?}"), "SecretValue(…)");
        assert_eq!(v.expose(), "sk-very-secret");
    }
}
