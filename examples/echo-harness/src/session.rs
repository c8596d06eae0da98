//! The session: an id, a transcript `~/.echo-harness/<id>.jsonl` (one `{"role","text"}` line
//! per message, fsync'd), and `~/.berth/session` naming it for berth's resume arguments.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

#[derive(Debug)]
pub struct Session {
    pub id: String,
    /// Earlier user messages, oldest first.
    pub user_messages: Vec<String>,
    pub turns: u64,
    transcript: PathBuf,
}

/// A session id names a file: letters, digits, `-` and `_` only.
pub fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

pub fn new_id() -> io::Result<String> {
    let mut bytes = [0u8; 16];
    File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

impl Session {
    /// Opens (or creates) session `id` under `home` and names it in `~/.berth/session`.
    pub fn open(home: &Path, id: String) -> io::Result<Session> {
        let dir = home.join(".echo-harness");
        fs::create_dir_all(&dir)?;
        let transcript = dir.join(format!("{id}.jsonl"));
        let mut session = Session {
            id,
            user_messages: Vec::new(),
            turns: 0,
            transcript,
        };
        match File::open(&session.transcript) {
            Ok(file) => {
                for line in BufReader::new(file).lines() {
                    // A torn last line (a crash mid-write) is skipped.
                    let Ok(entry) = serde_json::from_str::<Value>(&line?) else {
                        continue;
                    };
                    let text = entry["text"].as_str().unwrap_or_default().to_owned();
                    match entry["role"].as_str() {
                        Some("user") => session.user_messages.push(text),
                        Some("assistant") => session.turns += 1,
                        _ => {}
                    }
                }
            }
            Err(err) if err.kind() == io::ErrorKind::NotFound => {}
            Err(err) => return Err(err),
        }
        let berth = home.join(".berth");
        fs::create_dir_all(&berth)?;
        let tmp = berth.join(".session.tmp");
        fs::write(&tmp, format!("{}\n", session.id))?;
        fs::rename(&tmp, berth.join("session"))?;
        Ok(session)
    }

    /// Appends one turn to the transcript and syncs it.
    pub fn record(&mut self, user: &str, assistant: &str) -> io::Result<()> {
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.transcript)?;
        let lines = format!(
            "{}\n{}\n",
            json!({"role": "user", "text": user}),
            json!({"role": "assistant", "text": assistant})
        );
        file.write_all(lines.as_bytes())?;
        file.sync_data()?;
        self.user_messages.push(user.to_owned());
        self.turns += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resumed_session_remembers_its_turns() {
        let home = std::env::temp_dir().join(format!("echo-harness-test-{}", std::process::id()));
        let id = new_id().unwrap();
        assert!(valid_id(&id) && id.len() == 32);
        assert!(!valid_id("../x") && !valid_id(""));
        let mut s = Session::open(&home, id.clone()).unwrap();
        s.record("remember 42", "OK, I will remember 42.").unwrap();
        let again = Session::open(&home, id.clone()).unwrap();
        assert_eq!(again.user_messages, ["remember 42"]);
        assert_eq!(again.turns, 1);
        let named = fs::read_to_string(home.join(".berth/session")).unwrap();
        assert_eq!(named.trim(), id);
        fs::remove_dir_all(&home).unwrap();
    }
}
