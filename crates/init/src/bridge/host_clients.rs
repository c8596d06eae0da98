//! Host processes reaching the guest: each client of the `--uds-path` socket asks for a
//! guest port with `CONNECT <port>\n` ([`connect_line`], within [`connect_line::LINE_TIMEOUT`]); the bridge opens a stream to it,
//! answers `OK <n>\n` once the guest accepted, and splices. A refusal, a reset link or a
//! bad request closes the client without an `OK`, as Firecracker's hybrid vsock does.

use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::{UnixListener, UnixStream};
use tokio::task::JoinSet;

use super::connect_line;
use super::splice::splice;
use crate::mux::Link;

/// Clients served at once. Each holds a socket, a task and, once connected, a stream with
/// its bounded window; one past the limit is closed at once rather than queued.
pub const MAX_CLIENTS: usize = 512;
/// How long the guest may take to accept a stream (a link that has not heard the guest's
/// HELLO yet waits for it).
pub const OPEN_TIMEOUT: Duration = Duration::from_secs(30);

/// Accepts clients until the task is dropped; dropping it drops every client.
pub async fn serve(listener: UnixListener, link: Link, line_timeout: Duration) {
    let mut clients = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((client, _)) if clients.len() < MAX_CLIENTS => {
                    clients.spawn(serve_client(client, link.clone(), line_timeout));
                }
                Ok(_) => eprintln!("berth-init bridge: {MAX_CLIENTS} clients already, one closed"),
                Err(err) => {
                    // EMFILE and the like pass; do not spin on them.
                    eprintln!("berth-init bridge: accept failed: {err}");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            },
            Some(_) = clients.join_next(), if !clients.is_empty() => {}
        }
    }
}

async fn serve_client(mut client: UnixStream, link: Link, line_timeout: Duration) {
    let request = match connect_line::read(&mut client, line_timeout).await {
        Ok(request) => request,
        Err(err) => {
            eprintln!("berth-init bridge: a client's request refused: {err}");
            return;
        }
    };
    // A refused or reset open closes the client: that is its ECONNREFUSED.
    let Ok(Ok(mut stream)) = tokio::time::timeout(OPEN_TIMEOUT, link.open(request.port)).await
    else {
        return;
    };
    let ok = format!("OK {}\n", stream.id());
    if client.write_all(ok.as_bytes()).await.is_err()
        || stream.write_all(&request.early).await.is_err()
    {
        return;
    }
    let _ = splice(&mut client, &mut stream).await;
}
