//! The event journal on the volume: `events.jsonl` (one [`GuestEvent`] per line, appended
//! and synced before anyone sees the events) and `events.seq` (the last seq, written before
//! the journal is cut, so numbering survives reboots and truncation). The newest events are
//! also kept in memory, bounded by [`RING_BYTES`]; older ones are read from the file.

use std::collections::VecDeque;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use berth_protocol::harness::GuestEvent;
use bytes::Bytes;

pub const EVENTS_FILE: &str = "events.jsonl";
pub const SEQ_FILE: &str = "events.seq";
/// Memory kept for recent events (serialized lines).
pub const RING_BYTES: usize = 4 * 1024 * 1024;
/// Most events handed to a reader in one go.
pub const BATCH: usize = 256;

#[derive(Debug)]
pub struct EventLog {
    dir: PathBuf,
    file: File,
    last_seq: u64,
    /// The lowest seq still in the file, if any.
    first_in_file: Option<u64>,
    ring: VecDeque<(u64, Bytes)>,
    ring_bytes: usize,
}

/// What a reader gets next.
#[derive(Debug)]
pub enum Next {
    Events(Vec<(u64, Bytes)>),
    /// Older than memory holds: read the file.
    FromFile(PathBuf),
}

impl EventLog {
    pub fn open(dir: &Path) -> io::Result<EventLog> {
        let path = dir.join(EVENTS_FILE);
        let mut last_seq = read_seq(&dir.join(SEQ_FILE))?;
        let mut first_in_file = None;
        let mut ring = VecDeque::new();
        let mut ring_bytes = 0;
        let mut good_len = 0u64;
        match File::open(&path) {
            Ok(file) => {
                let mut reader = BufReader::new(file);
                let mut line = Vec::new();
                loop {
                    line.clear();
                    if reader.read_until(b'\n', &mut line)? == 0 {
                        break;
                    }
                    // A torn last line (the box died mid-append) ends the journal.
                    let Some(seq) = line
                        .strip_suffix(b"\n")
                        .and_then(|l| serde_json::from_slice::<GuestEvent>(l).ok())
                        .map(|e| e.seq)
                    else {
                        break;
                    };
                    good_len += line.len() as u64;
                    first_in_file.get_or_insert(seq);
                    last_seq = last_seq.max(seq);
                    push_ring(&mut ring, &mut ring_bytes, seq, Bytes::from(line.clone()));
                }
            }
            Err(err) if err.kind() == io::ErrorKind::NotFound => {}
            Err(err) => return Err(err),
        }
        let file = OpenOptions::new().create(true).append(true).open(&path)?;
        if file.metadata()?.len() != good_len {
            file.set_len(good_len)?;
            file.sync_data()?;
        }
        Ok(EventLog {
            dir: dir.to_owned(),
            file,
            last_seq,
            first_in_file,
            ring,
            ring_bytes,
        })
    }

    pub fn last_seq(&self) -> u64 {
        self.last_seq
    }

    /// Numbers, journals and syncs a batch of `(kind, data)`; returns the last seq.
    pub fn append(&mut self, batch: Vec<(String, serde_json::Value)>) -> io::Result<u64> {
        if batch.is_empty() {
            return Ok(self.last_seq);
        }
        let at_ms = now_ms();
        let mut lines = Vec::with_capacity(batch.len());
        let mut text = Vec::new();
        let mut seq = self.last_seq;
        for (kind, data) in batch {
            seq += 1;
            let event = GuestEvent {
                seq,
                kind,
                data,
                at_ms,
            };
            let mut line = serde_json::to_vec(&event).map_err(io::Error::other)?;
            line.push(b'\n');
            text.extend_from_slice(&line);
            lines.push((seq, Bytes::from(line)));
        }
        self.file.write_all(&text)?;
        self.file.sync_data()?;
        self.first_in_file.get_or_insert(self.last_seq + 1);
        self.last_seq = seq;
        for (seq, line) in lines {
            push_ring(&mut self.ring, &mut self.ring_bytes, seq, line);
        }
        Ok(seq)
    }

    /// The host has stored everything up to `n`: drop those entries from the file
    /// (atomically; the seq is saved first).
    pub fn drop_through(&mut self, n: u64) -> io::Result<()> {
        if self.first_in_file.is_none_or(|first| first > n) {
            return Ok(());
        }
        write_atomic(
            &self.dir,
            SEQ_FILE,
            format!("{}\n", self.last_seq).as_bytes(),
        )?;
        let path = self.dir.join(EVENTS_FILE);
        let mut kept = Vec::new();
        let mut first = None;
        for line in BufReader::new(File::open(&path)?).split(b'\n') {
            let line = line?;
            let Ok(event) = serde_json::from_slice::<GuestEvent>(&line) else {
                continue;
            };
            if event.seq > n {
                first.get_or_insert(event.seq);
                kept.extend_from_slice(&line);
                kept.push(b'\n');
            }
        }
        write_atomic(&self.dir, EVENTS_FILE, &kept)?;
        self.file = OpenOptions::new().append(true).open(&path)?;
        self.first_in_file = first;
        Ok(())
    }

    /// Up to [`BATCH`] events with `seq > after`, from memory when it holds them.
    pub fn next_after(&self, after: u64) -> Next {
        if after >= self.last_seq {
            return Next::Events(Vec::new());
        }
        match self.ring.front() {
            Some(&(first, _)) if first <= after + 1 => {
                let skip = (after + 1 - first) as usize;
                Next::Events(self.ring.iter().skip(skip).take(BATCH).cloned().collect())
            }
            _ => Next::FromFile(self.dir.join(EVENTS_FILE)),
        }
    }

    /// The oldest seq held in memory.
    pub fn ring_first(&self) -> Option<u64> {
        self.ring.front().map(|&(seq, _)| seq)
    }

    pub fn sync(&self) -> io::Result<()> {
        self.file.sync_all()
    }
}

/// Up to [`BATCH`] events with `seq > after` from the journal file (blocking).
pub fn read_file_after(path: &Path, after: u64) -> io::Result<Vec<(u64, Bytes)>> {
    let mut found = Vec::new();
    let file = match File::open(path) {
        Ok(f) => f,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(found),
        Err(err) => return Err(err),
    };
    let mut reader = BufReader::new(file);
    let mut line = Vec::new();
    while found.len() < BATCH {
        line.clear();
        if reader.read_until(b'\n', &mut line)? == 0 || !line.ends_with(b"\n") {
            break;
        }
        let Ok(event) = serde_json::from_slice::<GuestEvent>(&line) else {
            break;
        };
        if event.seq > after {
            found.push((event.seq, Bytes::from(line.clone())));
        }
    }
    Ok(found)
}

fn push_ring(ring: &mut VecDeque<(u64, Bytes)>, bytes: &mut usize, seq: u64, line: Bytes) {
    *bytes += line.len();
    ring.push_back((seq, line));
    while *bytes > RING_BYTES && ring.len() > 1 {
        if let Some((_, old)) = ring.pop_front() {
            *bytes -= old.len();
        }
    }
}

fn read_seq(path: &Path) -> io::Result<u64> {
    match fs::read_to_string(path) {
        Ok(text) => Ok(text.trim().parse().unwrap_or(0)),
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(0),
        Err(err) => Err(err),
    }
}

/// Replaces `dir/name` atomically (mode 0644, as the logs were always made).
pub fn write_atomic(dir: &Path, name: &str, data: &[u8]) -> io::Result<()> {
    berth_basics::write_atomically(&dir.join(name), data, 0o644)
}

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn batch(kinds: &[&str]) -> Vec<(String, serde_json::Value)> {
        kinds
            .iter()
            .map(|k| (k.to_string(), json!({"type": k})))
            .collect()
    }

    fn seqs(next: Next) -> Vec<u64> {
        match next {
            Next::Events(v) => v.into_iter().map(|(s, _)| s).collect(),
            Next::FromFile(p) => read_file_after(&p, 0)
                .unwrap()
                .into_iter()
                .map(|(s, _)| s)
                .collect(),
        }
    }

    #[test]
    fn seq_survives_reopen_truncation_and_torn_lines() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = EventLog::open(dir.path()).unwrap();
        assert_eq!(log.append(batch(&["a", "b", "c"])).unwrap(), 3);
        assert_eq!(seqs(log.next_after(1)), [2, 3]);
        log.drop_through(3).unwrap();
        drop(log);
        // A torn line at the end is cut away on open.
        let mut f = OpenOptions::new()
            .append(true)
            .open(dir.path().join(EVENTS_FILE))
            .unwrap();
        f.write_all(b"{\"seq\":9,\"ki").unwrap();
        let mut log = EventLog::open(dir.path()).unwrap();
        assert_eq!(log.last_seq(), 3);
        assert_eq!(log.append(batch(&["d"])).unwrap(), 4);
        drop(log);
        let log = EventLog::open(dir.path()).unwrap();
        assert_eq!(log.last_seq(), 4);
        assert_eq!(seqs(log.next_after(0)), [4]);
        let on_disk = read_file_after(&dir.path().join(EVENTS_FILE), 0).unwrap();
        assert_eq!(on_disk.len(), 1);
    }

    #[test]
    fn old_events_come_from_the_file_when_memory_is_full() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = EventLog::open(dir.path()).unwrap();
        let big = "x".repeat(512 * 1024);
        for _ in 0..12 {
            log.append(vec![("log".into(), json!({"line": big}))])
                .unwrap();
        }
        assert!(log.ring_first().unwrap() > 1);
        assert!(matches!(log.next_after(0), Next::FromFile(_)));
        assert!(matches!(log.next_after(11), Next::Events(ref v) if v.len() == 1));
        log.drop_through(5).unwrap();
        let rest = read_file_after(&dir.path().join(EVENTS_FILE), 0).unwrap();
        assert_eq!(rest.first().unwrap().0, 6);
        assert_eq!(rest.len(), 7);
    }
}
