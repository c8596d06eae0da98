//! A small QMP client: QEMU's JSON control protocol on a Unix socket.
//!
//! One connection per operation: read the greeting, `qmp_capabilities`, one command, close.
//! QEMU serves one QMP client at a time; the caller serialises operations per box, so a
//! connection never waits long. Asynchronous events QEMU interleaves are skipped.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::UnixStream;

/// How long one QMP exchange may take before QEMU counts as hung.
pub const QMP_TIMEOUT: Duration = Duration::from_secs(5);
/// A QMP line longer than this is not one berth asked for.
const MAX_LINE_BYTES: u64 = 1 << 20;

#[derive(Debug, thiserror::Error)]
pub enum QmpError {
    #[error("cannot connect to QMP at {path}")]
    Connect {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("QMP connection failed during {command}")]
    Io {
        command: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error("QEMU closed the QMP connection before answering {command}")]
    Closed { command: &'static str },
    #[error("QEMU did not answer {command} within {after_ms} ms")]
    Timeout {
        command: &'static str,
        after_ms: u64,
    },
    #[error("QEMU sent a QMP line longer than {MAX_LINE_BYTES} bytes during {command}")]
    LineTooLong { command: &'static str },
    #[error("QEMU sent a malformed QMP message during {command}")]
    Malformed {
        command: &'static str,
        #[source]
        source: serde_json::Error,
    },
    #[error("QEMU did not greet with a QMP banner")]
    NoGreeting,
    #[error("QEMU refused {command}: {class}: {desc}")]
    Command {
        command: &'static str,
        class: String,
        desc: String,
    },
}

/// What `query-status` reports (QEMU's `RunState`, the ones berth tells apart).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RunState {
    Running,
    /// Stopped by QMP `stop`.
    Paused,
    /// Not started yet (`-S`), or between a guest reset and its restart.
    Prelaunch,
    /// Waiting for or loading an incoming migration (`-incoming`).
    #[serde(rename = "inmigrate")]
    InMigrate,
    Shutdown,
    /// Stopped on a disk error the drive's `werror` policy stops on (`enospc`).
    IoError,
    InternalError,
    GuestPanicked,
    #[serde(other)]
    Other,
}

/// One message from QEMU: an answer (`return` or `error`), an event, or the greeting.
#[derive(Debug, Deserialize)]
struct Message {
    #[serde(rename = "QMP")]
    greeting: Option<serde_json::Value>,
    #[serde(rename = "return")]
    ret: Option<serde_json::Value>,
    error: Option<ErrorBody>,
    id: Option<u64>,
    event: Option<String>,
    #[serde(default)]
    data: serde_json::Value,
}

/// An asynchronous QMP event (`BLOCK_IO_ERROR`, `STOP`, …) and its data.
#[derive(Debug, Clone, PartialEq)]
pub struct QmpEvent {
    pub name: String,
    pub data: serde_json::Value,
}

#[derive(Debug, Deserialize)]
struct ErrorBody {
    class: String,
    desc: String,
}

#[derive(Debug, Deserialize)]
struct StatusInfo {
    status: RunState,
}

/// A negotiated QMP connection.
#[derive(Debug)]
pub struct Qmp {
    reader: BufReader<OwnedReadHalf>,
    writer: OwnedWriteHalf,
    next_id: u64,
}

impl Qmp {
    /// Connects, reads the greeting and leaves capabilities negotiation mode.
    pub async fn connect(path: &Path) -> Result<Qmp, QmpError> {
        let stream = UnixStream::connect(path)
            .await
            .map_err(|source| QmpError::Connect {
                path: path.to_path_buf(),
                source,
            })?;
        let (read, writer) = stream.into_split();
        let mut qmp = Qmp {
            reader: BufReader::new(read),
            writer,
            next_id: 0,
        };
        let greeting = timed("the greeting", qmp.read_message("the greeting")).await?;
        if greeting.greeting.is_none() {
            return Err(QmpError::NoGreeting);
        }
        qmp.execute("qmp_capabilities").await?;
        Ok(qmp)
    }

    /// Runs `command` (without arguments) and returns its `return` value.
    pub async fn execute(&mut self, command: &'static str) -> Result<serde_json::Value, QmpError> {
        timed(command, self.exchange(command, None)).await
    }

    /// Runs `command` with `arguments` (a JSON object) and returns its `return` value.
    pub async fn execute_with(
        &mut self,
        command: &'static str,
        arguments: serde_json::Value,
    ) -> Result<serde_json::Value, QmpError> {
        timed(command, self.exchange(command, Some(arguments))).await
    }

    pub async fn query_status(&mut self) -> Result<RunState, QmpError> {
        let value = self.execute("query-status").await?;
        let info: StatusInfo =
            serde_json::from_value(value).map_err(|source| QmpError::Malformed {
                command: "query-status",
                source,
            })?;
        Ok(info.status)
    }

    /// Pauses every vCPU.
    pub async fn stop(&mut self) -> Result<(), QmpError> {
        self.execute("stop").await.map(drop)
    }

    /// Resumes the vCPUs.
    pub async fn cont(&mut self) -> Result<(), QmpError> {
        self.execute("cont").await.map(drop)
    }

    /// Ends QEMU at once (no guest shutdown). QEMU may close the connection before its
    /// answer arrives: that counts as done.
    pub async fn quit(&mut self) -> Result<(), QmpError> {
        match self.execute("quit").await {
            Ok(_) | Err(QmpError::Closed { .. }) => Ok(()),
            Err(QmpError::Io { source, .. })
                if source.kind() == std::io::ErrorKind::ConnectionReset
                    || source.kind() == std::io::ErrorKind::BrokenPipe =>
            {
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Waits, without a deadline, for QEMU's next event (answers to commands are
    /// skipped). Cancel-safe only between messages: drop the connection after cancelling.
    pub async fn next_event(&mut self) -> Result<QmpEvent, QmpError> {
        loop {
            let message = self.read_message("an event").await?;
            if let Some(name) = message.event {
                return Ok(QmpEvent {
                    name,
                    data: message.data,
                });
            }
        }
    }

    async fn exchange(
        &mut self,
        command: &'static str,
        arguments: Option<serde_json::Value>,
    ) -> Result<serde_json::Value, QmpError> {
        self.next_id += 1;
        let id = self.next_id;
        let mut request = serde_json::json!({"execute": command, "id": id});
        if let Some(arguments) = arguments {
            request["arguments"] = arguments;
        }
        let mut line = serde_json::to_vec(&request)
            .map_err(|source| QmpError::Malformed { command, source })?;
        line.push(b'\n');
        let io = |source| QmpError::Io { command, source };
        self.writer.write_all(&line).await.map_err(io)?;
        loop {
            let message = self.read_message(command).await?;
            // Events (and answers to someone else's ids) are not this command's answer.
            if message.id != Some(id) {
                continue;
            }
            if let Some(error) = message.error {
                return Err(QmpError::Command {
                    command,
                    class: error.class,
                    desc: error.desc,
                });
            }
            if let Some(ret) = message.ret {
                return Ok(ret);
            }
        }
    }

    async fn read_message(&mut self, command: &'static str) -> Result<Message, QmpError> {
        let mut line = Vec::new();
        let n = (&mut self.reader)
            .take(MAX_LINE_BYTES)
            .read_until(b'\n', &mut line)
            .await
            .map_err(|source| QmpError::Io { command, source })?;
        if n == 0 {
            return Err(QmpError::Closed { command });
        }
        if !line.ends_with(b"\n") {
            return Err(if n as u64 >= MAX_LINE_BYTES {
                QmpError::LineTooLong { command }
            } else {
                QmpError::Closed { command }
            });
        }
        serde_json::from_slice(&line).map_err(|source| QmpError::Malformed { command, source })
    }
}

async fn timed<T>(
    command: &'static str,
    fut: impl std::future::Future<Output = Result<T, QmpError>>,
) -> Result<T, QmpError> {
    tokio::time::timeout(QMP_TIMEOUT, fut)
        .await
        .map_err(|_| QmpError::Timeout {
            command,
            after_ms: QMP_TIMEOUT.as_millis() as u64,
        })?
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::UnixListener;

    const GREETING: &str = r#"{"QMP": {"version": {"qemu": {"micro": 22, "minor": 2, "major": 7}, "package": "Debian"}, "capabilities": ["oob"]}}"#;

    /// A fake QEMU: greets, then answers each request line with `answer(request)` (lines
    /// to send back). Returns the requests it saw.
    fn fake_qemu(
        dir: &Path,
        answer: impl Fn(&serde_json::Value) -> Vec<String> + Send + 'static,
    ) -> (PathBuf, tokio::task::JoinHandle<Vec<serde_json::Value>>) {
        let path = dir.join("qmp.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let server = tokio::spawn(async move {
            let (stream, _) = listener.accept().await.unwrap();
            let (read, mut write) = stream.into_split();
            write
                .write_all(format!("{GREETING}\r\n").as_bytes())
                .await
                .unwrap();
            let mut lines = BufReader::new(read).lines();
            let mut seen = Vec::new();
            while let Ok(Some(line)) = lines.next_line().await {
                let request: serde_json::Value = serde_json::from_str(&line).unwrap();
                for reply in answer(&request) {
                    if write
                        .write_all(format!("{reply}\r\n").as_bytes())
                        .await
                        .is_err()
                    {
                        break;
                    }
                }
                let quit = request["execute"] == "quit";
                seen.push(request);
                if quit {
                    break;
                }
            }
            seen
        });
        (path, server)
    }

    fn ok(request: &serde_json::Value) -> String {
        serde_json::json!({"return": {}, "id": request["id"]}).to_string()
    }

    #[tokio::test]
    async fn negotiates_then_stops_queries_and_continues() {
        let dir = tempfile::tempdir().unwrap();
        let (path, server) = fake_qemu(dir.path(), |req| {
            match req["execute"].as_str() {
            Some("query-status") => vec![
                // An event first: it is not the answer.
                r#"{"event": "STOP", "timestamp": {"seconds": 1, "microseconds": 2}}"#.into(),
                serde_json::json!({"return": {"status": "paused", "singlestep": false, "running": false}, "id": req["id"]}).to_string(),
            ],
            _ => vec![ok(req)],
        }
        });
        let mut qmp = Qmp::connect(&path).await.unwrap();
        qmp.stop().await.unwrap();
        assert_eq!(qmp.query_status().await.unwrap(), RunState::Paused);
        qmp.cont().await.unwrap();
        drop(qmp);
        let seen = server.await.unwrap();
        let commands: Vec<&str> = seen
            .iter()
            .map(|r| r["execute"].as_str().unwrap())
            .collect();
        assert_eq!(
            commands,
            ["qmp_capabilities", "stop", "query-status", "cont"]
        );
        // Each request carries a fresh id.
        let ids: Vec<u64> = seen.iter().map(|r| r["id"].as_u64().unwrap()).collect();
        assert_eq!(ids, [1, 2, 3, 4]);
    }

    #[tokio::test]
    async fn command_errors_are_typed_and_unknown_states_parse() {
        let dir = tempfile::tempdir().unwrap();
        let (path, _server) = fake_qemu(dir.path(), |req| {
            match req["execute"].as_str() {
            Some("cont") => vec![serde_json::json!({"error": {"class": "GenericError", "desc": "guest panicked"}, "id": req["id"]}).to_string()],
            Some("query-status") => vec![serde_json::json!({"return": {"status": "colo", "running": false}, "id": req["id"]}).to_string()],
            _ => vec![ok(req)],
        }
        });
        let mut qmp = Qmp::connect(&path).await.unwrap();
        match qmp.cont().await {
            Err(QmpError::Command {
                command: "cont",
                class,
                desc,
            }) => {
                assert_eq!(
                    (class.as_str(), desc.as_str()),
                    ("GenericError", "guest panicked")
                )
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(qmp.query_status().await.unwrap(), RunState::Other);
    }

    #[tokio::test]
    async fn events_are_read_in_order_with_their_data() {
        let dir = tempfile::tempdir().unwrap();
        let (path, _server) = fake_qemu(dir.path(), |req| {
            match req["execute"].as_str() {
            Some("query-status") => vec![
                r#"{"event": "BLOCK_IO_ERROR", "data": {"device": "berth-vol", "operation": "write", "action": "stop", "nospace": true, "reason": "No space left on device"}, "timestamp": {"seconds": 1, "microseconds": 2}}"#.into(),
                serde_json::json!({"return": {"status": "io-error", "running": false}, "id": req["id"]}).to_string(),
                r#"{"event": "STOP", "timestamp": {"seconds": 1, "microseconds": 3}}"#.into(),
            ],
            _ => vec![ok(req)],
        }
        });
        let mut qmp = Qmp::connect(&path).await.unwrap();
        // The answer skips the event before it; the events stay readable after.
        assert_eq!(qmp.query_status().await.unwrap(), RunState::IoError);
        let stop = qmp.next_event().await.unwrap();
        assert_eq!(stop.name, "STOP");
        assert_eq!(stop.data, serde_json::Value::Null);
    }

    #[tokio::test]
    async fn quit_counts_a_closed_connection_as_done() {
        let dir = tempfile::tempdir().unwrap();
        // QEMU exits on quit before answering.
        let (path, server) = fake_qemu(dir.path(), |req| {
            if req["execute"] == "quit" {
                vec![]
            } else {
                vec![ok(req)]
            }
        });
        let mut qmp = Qmp::connect(&path).await.unwrap();
        qmp.quit().await.unwrap();
        assert_eq!(server.await.unwrap().len(), 2);
    }

    #[tokio::test]
    async fn garbage_a_missing_greeting_and_silence_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("qmp.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let server = tokio::spawn(async move {
            // 1: no greeting. 2: garbage. 3: silence (kept open until the client gives up).
            for reply in [r#"{"return": {}}"#, "not json"] {
                let (mut s, _) = listener.accept().await.unwrap();
                s.write_all(format!("{reply}\n").as_bytes()).await.unwrap();
            }
            let (s, _) = listener.accept().await.unwrap();
            let _ = BufReader::new(s).lines().next_line().await;
        });
        assert!(matches!(
            Qmp::connect(&path).await,
            Err(QmpError::NoGreeting)
        ));
        assert!(matches!(
            Qmp::connect(&path).await,
            Err(QmpError::Malformed { .. })
        ));
        tokio::time::pause();
        assert!(matches!(
            Qmp::connect(&path).await,
            Err(QmpError::Timeout { .. })
        ));
        server.await.unwrap();
        let missing = dir.path().join("none.sock");
        assert!(matches!(
            Qmp::connect(&missing).await,
            Err(QmpError::Connect { .. })
        ));
    }
}
