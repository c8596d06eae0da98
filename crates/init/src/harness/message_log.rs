//! The message journal on the volume, `messages.jsonl`:
//! `{"id","state":"written","content","after_seq"}` before a message goes to the harness
//! (`after_seq`: the last event seq then, so its replay can only come later),
//! `{"id","state":"acked"}` once the harness has it.
//! Appended and synced line by line; compacted (atomically) when it grows past
//! [`COMPACT_BYTES`], keeping the newest [`ACKED_KEPT`] acked ids and every unacked message.

use std::collections::{HashSet, VecDeque};
use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::event_log::write_atomic;

pub const MESSAGES_FILE: &str = "messages.jsonl";
pub const COMPACT_BYTES: u64 = 4 * 1024 * 1024;
/// Acked ids remembered for deduplication (the host retries only recent messages).
pub const ACKED_KEPT: usize = 100_000;

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
enum Entry {
    Written {
        id: String,
        content: String,
        #[serde(default)]
        after_seq: u64,
    },
    Acked {
        id: String,
    },
}

/// A message written to the harness and not yet acknowledged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    pub id: String,
    pub content: String,
    /// The last event seq when it was written: its replay has a higher one.
    pub after_seq: u64,
}

#[derive(Debug)]
pub struct MessageLog {
    dir: PathBuf,
    file: File,
    bytes: u64,
    acked: HashSet<String>,
    acked_order: VecDeque<String>,
    /// Written, not acked, oldest first.
    unacked: VecDeque<Pending>,
}

impl MessageLog {
    pub fn open(dir: &Path) -> io::Result<MessageLog> {
        let path = dir.join(MESSAGES_FILE);
        let mut log = MessageLog {
            dir: dir.to_owned(),
            file: OpenOptions::new().create(true).append(true).open(&path)?,
            bytes: 0,
            acked: HashSet::new(),
            acked_order: VecDeque::new(),
            unacked: VecDeque::new(),
        };
        let mut good_len = 0u64;
        let mut reader = BufReader::new(File::open(&path)?);
        let mut line = Vec::new();
        loop {
            line.clear();
            if reader.read_until(b'\n', &mut line)? == 0 {
                break;
            }
            let Some(entry) = line
                .strip_suffix(b"\n")
                .and_then(|l| serde_json::from_slice::<Entry>(l).ok())
            else {
                break; // a torn last line
            };
            good_len += line.len() as u64;
            match entry {
                Entry::Written {
                    id,
                    content,
                    after_seq,
                } => {
                    if !log.acked.contains(&id) && !log.unacked.iter().any(|p| p.id == id) {
                        log.unacked.push_back(Pending {
                            id,
                            content,
                            after_seq,
                        });
                    }
                }
                Entry::Acked { id } => log.mark_acked(id),
            }
        }
        if log.file.metadata()?.len() != good_len {
            log.file.set_len(good_len)?;
            log.file.sync_data()?;
        }
        log.bytes = good_len;
        Ok(log)
    }

    pub fn is_acked(&self, id: &str) -> bool {
        self.acked.contains(id)
    }

    pub fn is_unacked(&self, id: &str) -> bool {
        self.unacked.iter().any(|p| p.id == id)
    }

    pub fn unacked(&self) -> impl Iterator<Item = &Pending> {
        self.unacked.iter()
    }

    pub fn oldest_unacked(&self) -> Option<&Pending> {
        self.unacked.front()
    }

    /// Journals a message as written (synced) before it goes to the harness; `after_seq`
    /// is the event journal's last seq now.
    pub fn write(&mut self, id: &str, content: &str, after_seq: u64) -> io::Result<()> {
        self.append(&Entry::Written {
            id: id.to_owned(),
            content: content.to_owned(),
            after_seq,
        })?;
        self.unacked.push_back(Pending {
            id: id.to_owned(),
            content: content.to_owned(),
            after_seq,
        });
        Ok(())
    }

    /// Journals `id` as acked; `false` when it was not waiting.
    pub fn ack(&mut self, id: &str) -> io::Result<bool> {
        if !self.is_unacked(id) {
            return Ok(false);
        }
        self.append(&Entry::Acked { id: id.to_owned() })?;
        self.unacked.retain(|p| p.id != id);
        self.mark_acked(id.to_owned());
        if self.bytes > COMPACT_BYTES {
            self.compact()?;
        }
        Ok(true)
    }

    /// Acks every message written before event `seq` was journalled (its `after_seq` is
    /// lower): what a `result` answers when the harness never replays. Returns their ids.
    pub fn ack_written_before(&mut self, seq: u64) -> io::Result<Vec<String>> {
        let ids: Vec<String> = self
            .unacked
            .iter()
            .filter(|p| p.after_seq < seq)
            .map(|p| p.id.clone())
            .collect();
        for id in &ids {
            self.ack(id)?;
        }
        Ok(ids)
    }

    fn mark_acked(&mut self, id: String) {
        self.unacked.retain(|p| p.id != id);
        if self.acked.insert(id.clone()) {
            self.acked_order.push_back(id);
        }
        while self.acked_order.len() > ACKED_KEPT {
            if let Some(old) = self.acked_order.pop_front() {
                self.acked.remove(&old);
            }
        }
    }

    fn append(&mut self, entry: &Entry) -> io::Result<()> {
        let mut line = serde_json::to_vec(entry).map_err(io::Error::other)?;
        line.push(b'\n');
        self.file.write_all(&line)?;
        self.file.sync_data()?;
        self.bytes += line.len() as u64;
        Ok(())
    }

    /// Rewrites the journal with only what it must keep.
    pub fn compact(&mut self) -> io::Result<()> {
        let mut text = Vec::new();
        let entries = self
            .acked_order
            .iter()
            .map(|id| Entry::Acked { id: id.clone() })
            .chain(self.unacked.iter().map(|p| Entry::Written {
                id: p.id.clone(),
                content: p.content.clone(),
                after_seq: p.after_seq,
            }));
        for entry in entries {
            serde_json::to_writer(&mut text, &entry).map_err(io::Error::other)?;
            text.push(b'\n');
        }
        write_atomic(&self.dir, MESSAGES_FILE, &text)?;
        self.file = OpenOptions::new()
            .append(true)
            .open(self.dir.join(MESSAGES_FILE))?;
        self.bytes = text.len() as u64;
        Ok(())
    }

    pub fn sync(&self) -> io::Result<()> {
        self.file.sync_all()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_journal_survives_reopen_and_compaction() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = MessageLog::open(dir.path()).unwrap();
        log.write("m1", "one", 0).unwrap();
        log.write("m2", "two", 0).unwrap();
        assert!(log.ack("m1").unwrap());
        assert!(!log.ack("m1").unwrap());
        log.write("m3", "three", 0).unwrap();
        drop(log);
        // A torn tail is ignored.
        let mut f = OpenOptions::new()
            .append(true)
            .open(dir.path().join(MESSAGES_FILE))
            .unwrap();
        f.write_all(b"{\"state\":\"acked\",\"id\":\"m2").unwrap();
        let mut log = MessageLog::open(dir.path()).unwrap();
        assert!(log.is_acked("m1"));
        assert!(!log.is_acked("m2"));
        let pending: Vec<_> = log.unacked().map(|p| p.id.as_str()).collect();
        assert_eq!(pending, ["m2", "m3"]);
        assert_eq!(log.oldest_unacked().unwrap().content, "two");
        log.compact().unwrap();
        log.ack("m2").unwrap();
        drop(log);
        let log = MessageLog::open(dir.path()).unwrap();
        assert!(log.is_acked("m1") && log.is_acked("m2"));
        assert!(log.is_unacked("m3"));
        let text = std::fs::read_to_string(dir.path().join(MESSAGES_FILE)).unwrap();
        assert_eq!(text.lines().count(), 4);
    }

    #[test]
    fn a_result_acks_only_what_was_written_before_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = MessageLog::open(dir.path()).unwrap();
        log.write("m1", "one", 3).unwrap();
        log.write("m2", "two", 5).unwrap();
        log.write("m3", "three", 9).unwrap();
        assert_eq!(log.ack_written_before(6).unwrap(), ["m1", "m2"]);
        assert!(log.is_acked("m1") && log.is_acked("m2") && log.is_unacked("m3"));
        assert!(log.ack_written_before(6).unwrap().is_empty());
    }

    #[test]
    fn compaction_happens_when_the_journal_is_large() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = MessageLog::open(dir.path()).unwrap();
        let content = "x".repeat(64 * 1024);
        for i in 0..80 {
            let id = format!("m{i}");
            log.write(&id, &content, 0).unwrap();
            log.ack(&id).unwrap();
        }
        let size = std::fs::metadata(dir.path().join(MESSAGES_FILE))
            .unwrap()
            .len();
        assert!(size < COMPACT_BYTES, "{size}");
        drop(log);
        let log = MessageLog::open(dir.path()).unwrap();
        assert!((0..80).all(|i| log.is_acked(&format!("m{i}"))));
    }
}
