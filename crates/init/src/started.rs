//! What a background process or terminal was started with, as its request said: the
//! caller's tag, the working directory it asked for and the variables it added. Listed back
//! so a client that did not start it (E2B's `commands.list`) sees how it was run.

use std::collections::BTreeMap;

use berth_protocol::process::MAX_TAG_BYTES;

use crate::error::ApiError;

#[derive(Debug, Clone, Default)]
pub struct Started {
    pub tag: Option<String>,
    pub cwd: Option<String>,
    pub env: BTreeMap<String, String>,
}

impl Started {
    /// Takes the request's parts, refusing a tag that is empty, too long or holds control
    /// characters (it is shown in lists and logs).
    pub fn new(
        tag: Option<String>,
        cwd: Option<String>,
        env: BTreeMap<String, String>,
    ) -> Result<Self, ApiError> {
        if let Some(tag) = &tag {
            if tag.is_empty() || tag.len() > MAX_TAG_BYTES || tag.chars().any(char::is_control) {
                return Err(ApiError::BadTag {
                    limit_bytes: MAX_TAG_BYTES,
                });
            }
        }
        Ok(Started { tag, cwd, env })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tag_is_short_printable_text() {
        let env = BTreeMap::new();
        assert!(Started::new(Some("web server".into()), None, env.clone()).is_ok());
        assert!(Started::new(None, None, env.clone()).is_ok());
        for bad in ["", "a\nb", &"x".repeat(MAX_TAG_BYTES + 1)] {
            assert!(
                Started::new(Some(bad.into()), None, env.clone()).is_err(),
                "{bad:?}"
            );
        }
    }
}
