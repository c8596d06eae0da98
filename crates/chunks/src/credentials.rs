//! S3 credentials: from a credentials file when the config names one, else from the
//! environment (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, and `AWS_SESSION_TOKEN` when
//! the keys are temporary).
//!
//! The file is lines of `key = value` (or `key=value`), so a small TOML file of strings
//! reads the same:
//!
//! ```text
//! # berth's chunk store
//! access_key_id = "AKIA..."
//! secret_access_key = "..."
//! session_token = "..."        # optional
//! ```
//!
//! Blank lines and `#` comments are skipped, a value may be in double or single quotes, and
//! the keys may carry AWS's `aws_` prefix (`aws_access_key_id`). Any other key is refused,
//! since a misspelt one would otherwise be silently ignored.
//!
//! [`S3Credentials`] has no Debug: a secret must not reach a log by accident.

use std::path::Path;

use crate::error::CredentialsProblem;
use crate::ChunkError;

pub(crate) struct S3Credentials {
    pub(crate) access_key_id: String,
    pub(crate) secret_access_key: String,
    pub(crate) session_token: Option<String>,
}

impl S3Credentials {
    /// From `file` when given, else from `env`; None when neither has them.
    pub(crate) fn find(
        file: Option<&Path>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Option<S3Credentials>, ChunkError> {
        if let Some(path) = file {
            let problem = |problem| ChunkError::CredentialsFile {
                path: path.to_owned(),
                problem,
            };
            let text = std::fs::read_to_string(path)
                .map_err(|e| problem(CredentialsProblem::Unreadable(e)))?;
            return parse(&text).map(Some).map_err(problem);
        }
        let set = |name: &str| env(name).filter(|value| !value.is_empty());
        let (Some(access_key_id), Some(secret_access_key)) =
            (set("AWS_ACCESS_KEY_ID"), set("AWS_SECRET_ACCESS_KEY"))
        else {
            return Ok(None);
        };
        Ok(Some(S3Credentials {
            access_key_id,
            secret_access_key,
            session_token: set("AWS_SESSION_TOKEN"),
        }))
    }
}

fn parse(text: &str) -> Result<S3Credentials, CredentialsProblem> {
    let (mut access_key_id, mut secret_access_key, mut session_token) = (None, None, None);
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line_number = n + 1;
        let (key, value) = line
            .split_once('=')
            .ok_or(CredentialsProblem::NotKeyValue { line: line_number })?;
        let key = key.trim();
        let value = unquote(value).ok_or(CredentialsProblem::NotKeyValue { line: line_number })?;
        let slot = match key.strip_prefix("aws_").unwrap_or(key) {
            "access_key_id" => &mut access_key_id,
            "secret_access_key" => &mut secret_access_key,
            "session_token" => &mut session_token,
            _ => {
                return Err(CredentialsProblem::UnknownKey {
                    line: line_number,
                    key: key.chars().take(64).collect(),
                })
            }
        };
        *slot = Some(value.to_owned());
    }
    Ok(S3Credentials {
        access_key_id: access_key_id.ok_or(CredentialsProblem::Lacks {
            key: "access_key_id",
        })?,
        secret_access_key: secret_access_key.ok_or(CredentialsProblem::Lacks {
            key: "secret_access_key",
        })?,
        session_token,
    })
}

/// The value with a trailing `# comment` and its quotes removed; None when it is empty or
/// its quotes do not close.
fn unquote(raw: &str) -> Option<&str> {
    let raw = raw.trim();
    let value = match raw.chars().next()? {
        quote @ ('"' | '\'') => {
            let inner = &raw[1..];
            let end = inner.find(quote)?;
            let after = inner[end + 1..].trim();
            if !(after.is_empty() || after.starts_with('#')) {
                return None;
            }
            &inner[..end]
        }
        _ => raw.split(" #").next()?.trim(),
    };
    (!value.is_empty()).then_some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_toml_or_key_value_file_gives_the_keys() {
        let toml = "# chunks\naccess_key_id = \"AKIA1\"\nsecret_access_key = 'se=cret' # ok\n";
        let creds = parse(toml).unwrap();
        assert_eq!(creds.access_key_id, "AKIA1");
        assert_eq!(creds.secret_access_key, "se=cret");
        assert!(creds.session_token.is_none());

        let plain = "aws_access_key_id=AKIA2\naws_secret_access_key=s2\n\nsession_token=t\n";
        let creds = parse(plain).unwrap();
        assert_eq!(
            (
                creds.access_key_id.as_str(),
                creds.secret_access_key.as_str()
            ),
            ("AKIA2", "s2")
        );
        assert_eq!(creds.session_token.as_deref(), Some("t"));
    }

    #[test]
    fn a_bad_file_is_refused_without_echoing_its_values() {
        let cases = [
            ("access_key_id = a\nsecret_key = hunter2\n", "unknown key"),
            ("access_key_id = a\nhunter2\n", "line 2"),
            (
                "access_key_id = a\nsecret_access_key = \"hunter2\n",
                "line 2",
            ),
            ("access_key_id = a\n", "no secret_access_key"),
            ("secret_access_key = hunter2\n", "no access_key_id"),
        ];
        for (text, expected) in cases {
            let problem = parse(text).err().unwrap().to_string();
            assert!(problem.contains(expected), "{text:?}: {problem}");
            assert!(!problem.contains("hunter2"), "{problem}");
        }
    }

    #[test]
    fn the_file_wins_over_the_environment_which_needs_both_keys() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("creds.toml");
        std::fs::write(&file, "access_key_id = f\nsecret_access_key = fs\n").unwrap();
        let env = |name: &str| match name {
            "AWS_ACCESS_KEY_ID" => Some("e".to_owned()),
            "AWS_SECRET_ACCESS_KEY" => Some("es".to_owned()),
            "AWS_SESSION_TOKEN" => Some("et".to_owned()),
            _ => None,
        };
        let from_file = S3Credentials::find(Some(&file), &env).unwrap().unwrap();
        assert_eq!(from_file.access_key_id, "f");
        assert!(from_file.session_token.is_none());
        let from_env = S3Credentials::find(None, &env).unwrap().unwrap();
        assert_eq!(from_env.access_key_id, "e");
        assert_eq!(from_env.session_token.as_deref(), Some("et"));
        let only_id = |name: &str| (name == "AWS_ACCESS_KEY_ID").then(|| "e".to_owned());
        assert!(S3Credentials::find(None, &only_id).unwrap().is_none());

        let missing = dir.path().join("absent");
        let err = S3Credentials::find(Some(&missing), &env).err().unwrap();
        assert!(err.to_string().contains("absent"), "{err}");
    }
}
