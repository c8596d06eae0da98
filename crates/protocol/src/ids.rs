//! Typed identifiers. A `BoxId` is `bx_` followed by 20 lowercase base32 characters
//! (100 random bits): safe in file names, cgroup paths and OCI container ids.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

const ALPHABET: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";
const RANDOM_CHARS: usize = 20;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdError {
    pub kind: &'static str,
    pub value: String,
}

impl fmt::Display for IdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} is not a valid {} id", self.value, self.kind)
    }
}

impl std::error::Error for IdError {}

macro_rules! typed_id {
    ($name:ident, $prefix:literal, $kind:literal) => {
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub struct $name(String);

        impl $name {
            pub const PREFIX: &'static str = $prefix;

            /// A new id from 20 random base32 characters. `random` supplies the entropy
            /// (callers pass bytes from the OS random source).
            pub fn from_random(random: [u8; RANDOM_CHARS]) -> Self {
                let mut s = String::with_capacity($prefix.len() + RANDOM_CHARS);
                s.push_str($prefix);
                for b in random {
                    s.push(ALPHABET[(b & 31) as usize] as char);
                }
                $name(s)
            }

            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// Whether `s` has this id's shape (prefix, then base32).
            pub fn is_valid(s: &str) -> bool {
                s.strip_prefix($prefix).is_some_and(|rest| {
                    rest.len() == RANDOM_CHARS && rest.bytes().all(|b| ALPHABET.contains(&b))
                })
            }
        }

        impl FromStr for $name {
            type Err = IdError;
            fn from_str(s: &str) -> Result<Self, IdError> {
                if $name::is_valid(s) {
                    Ok($name(s.to_owned()))
                } else {
                    Err(IdError {
                        kind: $kind,
                        value: s.to_owned(),
                    })
                }
            }
        }

        impl TryFrom<String> for $name {
            type Error = IdError;
            fn try_from(s: String) -> Result<Self, IdError> {
                s.parse()
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> String {
                id.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

typed_id!(BoxId, "bx_", "box");
typed_id!(TenantId, "tn_", "tenant");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_ids_round_trip() {
        let id = BoxId::from_random([7; RANDOM_CHARS]);
        assert_eq!(id.as_str().len(), 23);
        assert_eq!(id.as_str().parse::<BoxId>().unwrap(), id);
    }

    #[test]
    fn malformed_ids_are_rejected() {
        for bad in [
            "",
            "bx_",
            "bx_../../etc/passwd",
            "tn_aaaaaaaaaaaaaaaaaaaa",
            "bx_AAAAAAAAAAAAAAAAAAAA",
        ] {
            assert!(bad.parse::<BoxId>().is_err(), "{bad}");
        }
        assert!("tn_aaaaaaaaaaaaaaaaaaaa".parse::<TenantId>().is_ok());
    }
}
