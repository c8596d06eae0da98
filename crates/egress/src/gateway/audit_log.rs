//! The audit log on disk: `<dir>/<box>.<first>.jsonl` segments, where `<first>` is the
//! index of the segment's first record in the box's whole log, so a reader can page by
//! record index across segments and knows how many records rotation has removed.
//!
//! Written off the request path: a connection task only encodes its line and queues it
//! (bounded); one writer thread appends. When the queue is full the line is dropped and
//! counted, never waited for (a box that floods the gateway with refusals must not stall
//! other boxes' connections); the next line the writer writes for that box is preceded by
//! `{"box":…,"time":…,"decision":"dropped","dropped":N}`. A segment that would pass
//! `max_file_bytes` starts a new one; beyond `max_files` the oldest are deleted.
//!
//! The directory is 0700 and every file 0600: the log names the hosts a box talks to.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};

use berth_protocol::BoxId;
use time::format_description::well_known::Rfc3339;

use super::audit::{AuditError, AuditRecord, AuditSink};

/// Bounds of the audit log (`[egress]` in `berth.toml`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuditLimits {
    /// A segment is closed once the next line would take it past this size.
    pub max_file_bytes: u64,
    /// Segments kept per box, the one being written included.
    pub max_files: usize,
    /// Lines waiting for the writer; beyond it lines are dropped and counted.
    pub queue: usize,
}

impl Default for AuditLimits {
    fn default() -> Self {
        AuditLimits {
            max_file_bytes: 16 * 1024 * 1024,
            max_files: 4,
            queue: 8192,
        }
    }
}

enum Command {
    Line(BoxId, Vec<u8>),
    /// Everything queued before it is written.
    Sync(std::sync::mpsc::Sender<()>),
    /// Close and delete every segment of the box.
    Remove(BoxId, std::sync::mpsc::Sender<()>),
}

/// Lines dropped per box because the queue was full, not yet reported in the log.
type Dropped = Arc<Mutex<HashMap<BoxId, u64>>>;

/// Appends each record to the box's current segment, from one writer thread.
pub struct JsonlDirSink {
    dir: PathBuf,
    tx: SyncSender<Command>,
    dropped: Dropped,
}

impl JsonlDirSink {
    pub fn new(dir: impl Into<PathBuf>) -> Result<Self, AuditError> {
        Self::with_limits(dir, AuditLimits::default())
    }

    pub fn with_limits(dir: impl Into<PathBuf>, limits: AuditLimits) -> Result<Self, AuditError> {
        let dir = dir.into();
        let create = |source| AuditError::CreateDir {
            path: dir.clone(),
            source,
        };
        std::fs::create_dir_all(&dir).map_err(create)?;
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).map_err(create)?;
        let (tx, rx) = sync_channel(limits.queue.max(1));
        let dropped = Dropped::default();
        let writer = Writer {
            dir: dir.clone(),
            limits,
            open: HashMap::new(),
            dropped: dropped.clone(),
        };
        std::thread::Builder::new()
            .name("berth-audit".into())
            .spawn(move || writer.run(rx))
            .map_err(create)?;
        Ok(JsonlDirSink { dir, tx, dropped })
    }

    /// Returns once every record queued before the call is written.
    pub fn sync(&self) {
        let (done, wait) = std::sync::mpsc::channel();
        if self.tx.send(Command::Sync(done)).is_ok() {
            let _ = wait.recv();
        }
    }

    /// The box is deleted: its segments go, and the writer forgets it.
    pub fn remove(&self, box_id: &BoxId) {
        let (done, wait) = std::sync::mpsc::channel();
        if self.tx.send(Command::Remove(box_id.clone(), done)).is_ok() {
            let _ = wait.recv();
        }
        self.dropped
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(box_id);
    }

    /// Up to `limit` records of the box from record index `after` on, across segments,
    /// and the index to continue from. Records removed by rotation are skipped: `next`
    /// moves past them.
    pub fn read_page(
        &self,
        box_id: &BoxId,
        after: u64,
        limit: usize,
    ) -> std::io::Result<(Vec<serde_json::Value>, u64)> {
        let segments = segments(&self.dir, box_id)?;
        let mut records = Vec::new();
        let mut next = after.max(segments.first().map_or(0, |s| s.0));
        for (i, (start, path)) in segments.iter().enumerate() {
            let end = segments.get(i + 1).map_or(u64::MAX, |s| s.0);
            if end <= next {
                continue;
            }
            let file = match File::open(path) {
                Ok(file) => file,
                // Rotated away since the listing: its records are gone.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            let skip = usize::try_from(next.saturating_sub(*start)).unwrap_or(usize::MAX);
            for line in BufReader::new(file).lines().skip(skip) {
                let line = line?;
                // A line being appended right now is incomplete: stop before it.
                let Ok(record) = serde_json::from_str(&line) else {
                    return Ok((records, next));
                };
                if records.len() == limit {
                    return Ok((records, next));
                }
                records.push(record);
                next += 1;
            }
        }
        Ok((records, next))
    }
}

impl AuditSink for JsonlDirSink {
    fn record(&self, record: &AuditRecord) -> Result<(), AuditError> {
        let mut line = serde_json::to_vec(record).map_err(AuditError::Encode)?;
        line.push(b'\n');
        match self.tx.try_send(Command::Line(record.box_id.clone(), line)) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(_)) => {
                let mut dropped = self.dropped.lock().unwrap_or_else(|p| p.into_inner());
                let n = dropped.entry(record.box_id.clone()).or_default();
                if *n == 0 {
                    tracing::warn!(box_id = %record.box_id, "the egress audit queue is full: dropping lines (counted in the log)");
                }
                *n += 1;
                Ok(())
            }
            Err(TrySendError::Disconnected(_)) => Err(AuditError::WriterGone),
        }
    }
}

/// The segments of a box's log, oldest first: (index of the first record, path). A log
/// written before segments existed (`<box>.jsonl`) is the segment that starts at 0.
fn segments(dir: &Path, box_id: &BoxId) -> std::io::Result<Vec<(u64, PathBuf)>> {
    let legacy = format!("{}.jsonl", box_id.as_str());
    let prefix = format!("{}.", box_id.as_str());
    let mut found = Vec::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(found),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let start = if name == legacy {
            Some(0)
        } else {
            name.strip_prefix(&prefix)
                .and_then(|rest| rest.strip_suffix(".jsonl"))
                .and_then(|n| n.parse::<u64>().ok())
        };
        if let Some(start) = start {
            found.push((start, entry.path()));
        }
    }
    found.sort();
    Ok(found)
}

/// The segment being written for one box.
struct Segment {
    file: File,
    path: PathBuf,
    start: u64,
    lines: u64,
    bytes: u64,
}

struct Writer {
    dir: PathBuf,
    limits: AuditLimits,
    open: HashMap<BoxId, Segment>,
    dropped: Dropped,
}

impl Writer {
    fn run(mut self, rx: Receiver<Command>) {
        while let Ok(command) = rx.recv() {
            match command {
                Command::Line(box_id, line) => {
                    if let Some(marker) = self.dropped_marker(&box_id) {
                        self.write_logged(&box_id, &marker);
                    }
                    self.write_logged(&box_id, &line);
                }
                Command::Sync(done) => {
                    let _ = done.send(());
                }
                Command::Remove(box_id, done) => {
                    self.open.remove(&box_id);
                    if let Ok(segments) = segments(&self.dir, &box_id) {
                        for (_, path) in segments {
                            if let Err(e) = std::fs::remove_file(&path) {
                                tracing::warn!(path = %path.display(), error = %e, "cannot remove an audit log segment");
                            }
                        }
                    }
                    let _ = done.send(());
                }
            }
        }
    }

    fn dropped_marker(&self, box_id: &BoxId) -> Option<Vec<u8>> {
        let n = self
            .dropped
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(box_id)?;
        let time = time::OffsetDateTime::now_utc()
            .format(&Rfc3339)
            .unwrap_or_default();
        let mut line = serde_json::to_vec(&serde_json::json!({
            "box": box_id.as_str(),
            "time": time,
            "decision": "dropped",
            "dropped": n,
        }))
        .ok()?;
        line.push(b'\n');
        Some(line)
    }

    fn write_logged(&mut self, box_id: &BoxId, line: &[u8]) {
        if let Err(e) = self.write(box_id, line) {
            tracing::error!(%box_id, error = %e, "writing the egress audit log failed");
        }
    }

    fn write(&mut self, box_id: &BoxId, line: &[u8]) -> Result<(), AuditError> {
        if !self.open.contains_key(box_id) {
            let segment = self.resume(box_id)?;
            self.open.insert(box_id.clone(), segment);
        }
        let full = self.open.get(box_id).is_some_and(|s| {
            s.bytes > 0 && s.bytes + line.len() as u64 > self.limits.max_file_bytes
        });
        if full {
            let next = self.open.get(box_id).map_or(0, |s| s.start + s.lines);
            let segment = self.create(box_id, next)?;
            self.open.insert(box_id.clone(), segment);
            self.prune(box_id);
        }
        let Some(segment) = self.open.get_mut(box_id) else {
            return Ok(());
        };
        // One write call per line: with O_APPEND, lines never interleave.
        segment
            .file
            .write_all(line)
            .map_err(|source| AuditError::Write {
                path: segment.path.clone(),
                source,
            })?;
        segment.lines += 1;
        segment.bytes += line.len() as u64;
        Ok(())
    }

    /// The box's newest segment, reopened after a restart (its lines counted), or its
    /// first.
    fn resume(&self, box_id: &BoxId) -> Result<Segment, AuditError> {
        let listed = segments(&self.dir, box_id).map_err(|source| AuditError::Open {
            path: self.dir.clone(),
            source,
        })?;
        let Some((start, path)) = listed.last().cloned() else {
            return self.create(box_id, 0);
        };
        let open = |source| AuditError::Open {
            path: path.clone(),
            source,
        };
        let text = std::fs::read(&path).map_err(open)?;
        let file = OpenOptions::new().append(true).open(&path).map_err(open)?;
        Ok(Segment {
            file,
            start,
            lines: memchr::memchr_iter(b'\n', &text).count() as u64,
            bytes: text.len() as u64,
            path,
        })
    }

    fn create(&self, box_id: &BoxId, start: u64) -> Result<Segment, AuditError> {
        // A BoxId is `bx_` + base32, so it is a safe file name.
        let path = self.dir.join(format!("{}.{start}.jsonl", box_id.as_str()));
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&path)
            .map_err(|source| AuditError::Open {
                path: path.clone(),
                source,
            })?;
        Ok(Segment {
            file,
            path,
            start,
            lines: 0,
            bytes: 0,
        })
    }

    /// Deletes the oldest segments beyond `max_files`.
    fn prune(&self, box_id: &BoxId) {
        let Ok(listed) = segments(&self.dir, box_id) else {
            return;
        };
        let excess = listed.len().saturating_sub(self.limits.max_files.max(1));
        for (_, path) in listed.into_iter().take(excess) {
            if let Err(e) = std::fs::remove_file(&path) {
                tracing::warn!(path = %path.display(), error = %e, "cannot remove an old audit log segment");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gateway::{DenyReason, Verdict, Via};

    fn record(box_id: &BoxId, n: u64) -> AuditRecord {
        AuditRecord {
            box_id: box_id.clone(),
            time: "2026-01-01T00:00:00Z".into(),
            target: Some("api.example.test".into()),
            port: Some(443),
            via: Some(Via::Direct),
            resolved: None,
            decision: Verdict::Deny,
            reason: Some(DenyReason::NotAllowed.code()),
            refused: vec![],
            bytes_up: n,
            bytes_down: 0,
            duration_ms: 0,
            intercept: false,
            credential: None,
            withheld: None,
            closed: None,
        }
    }

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn lines_land_in_private_files_and_read_back_in_pages() {
        let dir = tempfile::tempdir().unwrap();
        let audit = dir.path().join("audit");
        let sink = JsonlDirSink::new(&audit).unwrap();
        let id = BoxId::from_random([1; 20]);
        for n in 0..3 {
            sink.record(&record(&id, n)).unwrap();
        }
        sink.sync();
        assert_eq!(mode(&audit), 0o700);
        let files = segments(&audit, &id).unwrap();
        assert_eq!(files.len(), 1);
        assert_eq!(mode(&files[0].1), 0o600);
        let (records, next) = sink.read_page(&id, 0, 2).unwrap();
        assert_eq!((records.len(), next), (2, 2));
        assert_eq!(records[0]["box"], id.as_str());
        assert_eq!(records[0]["reason"], "not_allowed");
        assert!(records[0].get("refused").is_none());
        let (records, next) = sink.read_page(&id, next, 10).unwrap();
        assert_eq!((records[0]["bytes_up"].as_u64(), next), (Some(2), 3));
        sink.remove(&id);
        assert!(segments(&audit, &id).unwrap().is_empty());
    }

    #[test]
    fn rotation_keeps_max_files_and_pages_run_across_them_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let line_len = serde_json::to_vec(&record(&BoxId::from_random([2; 20]), 10))
            .unwrap()
            .len() as u64
            + 1;
        let limits = AuditLimits {
            max_file_bytes: line_len * 3,
            max_files: 3,
            queue: 1024,
        };
        let sink = JsonlDirSink::with_limits(dir.path(), limits).unwrap();
        let id = BoxId::from_random([2; 20]);
        for n in 10..30 {
            sink.record(&record(&id, n)).unwrap();
        }
        sink.sync();
        let files = segments(dir.path(), &id).unwrap();
        let starts: Vec<u64> = files.iter().map(|f| f.0).collect();
        // 20 lines, 3 per file: 7 files written, the last 3 kept.
        assert_eq!(starts, [12, 15, 18]);
        for (_, path) in &files {
            assert!(std::fs::metadata(path).unwrap().len() <= limits.max_file_bytes);
            assert_eq!(mode(path), 0o600);
        }
        // From the start: the rotated-away records are skipped, the rest come in order.
        let mut seen = Vec::new();
        let mut after = 0;
        loop {
            let (records, next) = sink.read_page(&id, after, 4).unwrap();
            if records.is_empty() {
                assert_eq!(next, 20);
                break;
            }
            seen.extend(records.iter().map(|r| r["bytes_up"].as_u64().unwrap()));
            after = next;
        }
        assert_eq!(seen, (22..30).collect::<Vec<_>>());

        // A new writer (a restarted daemon) continues the numbering.
        drop(sink);
        let sink = JsonlDirSink::with_limits(dir.path(), limits).unwrap();
        sink.record(&record(&id, 30)).unwrap();
        sink.sync();
        let (records, next) = sink.read_page(&id, 20, 10).unwrap();
        assert_eq!((records.len(), next), (1, 21));
        assert_eq!(records[0]["bytes_up"], 30);
    }

    #[test]
    fn a_full_queue_drops_and_counts_instead_of_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let sink = JsonlDirSink::with_limits(
            dir.path(),
            AuditLimits {
                queue: 1,
                ..AuditLimits::default()
            },
        )
        .unwrap();
        let id = BoxId::from_random([3; 20]);
        // Far more than the writer can take while this loop runs: some are dropped, and
        // none of these calls waits.
        let started = std::time::Instant::now();
        for n in 0..20_000 {
            sink.record(&record(&id, n)).unwrap();
        }
        assert!(started.elapsed() < std::time::Duration::from_secs(10));
        sink.sync();
        sink.record(&record(&id, 99_999)).unwrap();
        sink.sync();
        let (records, _) = sink.read_page(&id, 0, usize::MAX).unwrap();
        let dropped: u64 = records
            .iter()
            .filter(|r| r["decision"] == "dropped")
            .map(|r| r["dropped"].as_u64().unwrap())
            .sum();
        let written = records.iter().filter(|r| r["decision"] == "deny").count() as u64;
        assert!(dropped > 0, "nothing was dropped");
        assert_eq!(
            written + dropped,
            20_001,
            "every line is written or counted"
        );
    }
}
