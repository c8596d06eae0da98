//! A stand-in QEMU for tests of a save: a QMP server on a Unix socket that records every
//! command, answers `migrate` by connecting to the daemon's migration socket and sending a
//! short stream (then `query-migrate` says `completed`), and refuses the commands it is
//! told to with QMP's `GenericError`. A subverted one ([`FakeQmp::endless`]) streams
//! without end and says `active` forever.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};

/// What `migrate` streams: a few pages' worth.
pub(super) const STREAM_BYTES: usize = 16 * 1024;

pub(super) struct FakeQmp {
    pub socket: PathBuf,
    seen: Arc<Mutex<Vec<String>>>,
    server: tokio::task::JoinHandle<()>,
}

impl Drop for FakeQmp {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl FakeQmp {
    /// Serves QMP at `<dir>/qmp.sock`; `migrate` streams into `migration_socket`;
    /// each command in `refuse` is answered with an error.
    pub fn serve(dir: &Path, migration_socket: &Path, refuse: &'static [&'static str]) -> FakeQmp {
        FakeQmp::serving(dir, migration_socket, refuse, false)
    }

    /// A QEMU whose migration stream never ends.
    pub fn endless(dir: &Path, migration_socket: &Path) -> FakeQmp {
        FakeQmp::serving(dir, migration_socket, &[], true)
    }

    fn serving(
        dir: &Path,
        migration_socket: &Path,
        refuse: &'static [&'static str],
        endless: bool,
    ) -> FakeQmp {
        let socket = dir.join("qmp.sock");
        let listener = UnixListener::bind(&socket).unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let migration_socket = migration_socket.to_path_buf();
        let log = seen.clone();
        let server = tokio::spawn(async move {
            let (stream, _) = listener.accept().await.unwrap();
            let (read, mut write) = stream.into_split();
            write
                .write_all(b"{\"QMP\": {\"version\": {}, \"capabilities\": []}}\r\n")
                .await
                .unwrap();
            let mut lines = BufReader::new(read).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let request: serde_json::Value = serde_json::from_str(&line).unwrap();
                let command = request["execute"].as_str().unwrap_or_default().to_owned();
                log.lock().unwrap().push(command.clone());
                let reply = if refuse.contains(&command.as_str()) {
                    serde_json::json!({"error": {"class": "GenericError", "desc": format!("{command} refused")}, "id": request["id"]})
                } else {
                    let answer = match command.as_str() {
                        "migrate" => {
                            tokio::spawn(stream_into(migration_socket.clone(), endless));
                            serde_json::json!({})
                        }
                        "query-migrate" if endless => serde_json::json!({"status": "active"}),
                        "query-migrate" => serde_json::json!({"status": "completed"}),
                        "query-version" => serde_json::json!({"qemu": {"major": 7}}),
                        _ => serde_json::json!({}),
                    };
                    serde_json::json!({"return": answer, "id": request["id"]})
                };
                if write
                    .write_all(format!("{reply}\r\n").as_bytes())
                    .await
                    .is_err()
                {
                    break;
                }
            }
        });
        FakeQmp {
            socket,
            seen,
            server,
        }
    }

    /// The commands received so far, in order (`qmp_capabilities` first).
    pub fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

async fn stream_into(socket: PathBuf, endless: bool) {
    let mut stream = UnixStream::connect(&socket).await.unwrap();
    let chunk = vec![0x5a; STREAM_BYTES];
    if endless {
        while stream.write_all(&chunk).await.is_ok() {}
    } else {
        stream.write_all(&chunk).await.unwrap();
        stream.shutdown().await.unwrap();
    }
}
