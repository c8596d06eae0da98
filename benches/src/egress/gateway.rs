//! berth's gateway as the daemon runs it: `Gateway::serve_box` on a box's Unix socket, on its
//! own runtime, with `resolve_overrides` sending [`HOST`](super::HOST) to the upstream and
//! the audit log written by a `JsonlDirSink` (one JSON line per connection, as in
//! production). Optionally the box-side hop berth-init adds in a sandbox: a TCP listener on
//! 127.0.0.1 that hands each accepted socket to the gateway over its socket and closes it,
//! like berth-init's 127.0.0.1:443 (`crates/init/src/egress/forward.rs`).

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use berth_egress::gateway::{
    AuditError, BoxEgress, Gateway, GatewayConfig, GatewayError, HandoffSender, JsonlDirSink,
    SystemResolver,
};
use berth_egress::policy::{Allowlist, PolicyError};
use berth_protocol::BoxId;
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::runtime::one_worker;

/// How long dropping the gateway waits for its connections to end and be logged.
const STOP: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum GatewaySetupError {
    #[error("gateway runtime or socket")]
    Io(#[from] io::Error),
    #[error("audit sink")]
    Audit(#[from] AuditError),
    #[error("allowlist")]
    Policy(#[from] PolicyError),
    #[error("gateway config")]
    Gateway(#[from] GatewayError),
}

/// The gateway serving one box's socket until dropped.
pub struct BenchGateway {
    pub socket: PathBuf,
    audit: Arc<JsonlDirSink>,
    box_id: BoxId,
    stop: Option<oneshot::Sender<()>>,
    served: Option<JoinHandle<()>>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl BenchGateway {
    /// Serves `<dir>/egress.sock`, allowing `host` and resolving it to `upstream`.
    pub fn start(
        dir: &Path,
        host: &str,
        upstream: SocketAddr,
    ) -> Result<BenchGateway, GatewaySetupError> {
        let runtime = one_worker("bench-gateway")?;
        let box_id = BoxId::from_random([7; 20]);
        let audit = Arc::new(JsonlDirSink::new(dir.join("audit"))?);
        let config = GatewayConfig {
            resolve_overrides: HashMap::from([(host.to_string(), upstream)]),
            // The box hop (berth-init's part) runs in this process.
            handoff_from: HandoffSender::ThisProcess,
            ..GatewayConfig::default()
        };
        let gateway = Gateway::new(config, Arc::new(SystemResolver), audit.clone())?;
        let egress = BoxEgress {
            box_id: box_id.clone(),
            allow: Allowlist::new(&[host.to_string()])?,
        };
        let socket = dir.join("egress.sock");
        let listener = {
            let _in = runtime.enter();
            UnixListener::bind(&socket)?
        };
        let (stop, stopped) = oneshot::channel::<()>();
        let served = runtime.spawn(async move {
            gateway
                .serve_box(listener, egress, async {
                    let _ = stopped.await;
                })
                .await
        });
        Ok(BenchGateway {
            socket,
            audit,
            box_id,
            stop: Some(stop),
            served: Some(served),
            runtime: Some(runtime),
        })
    }

    /// Stops serving (the connections still open are cut and audited) and returns how
    /// many audit lines were written, one per connection.
    pub fn finish(mut self) -> io::Result<usize> {
        self.stop_serving();
        // The log is written by its own thread: wait for what was queued.
        self.audit.sync();
        Ok(self.audit.read_page(&self.box_id, 0, usize::MAX)?.0.len())
    }

    fn stop_serving(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let (Some(rt), Some(served)) = (self.runtime.take(), self.served.take()) {
            // serve_box cuts the connections still open and writes their audit lines before
            // it returns; a runtime shutdown alone would drop those tasks mid-way.
            let _ = rt.block_on(async move { tokio::time::timeout(STOP, served).await });
            rt.shutdown_background();
        }
    }
}

impl Drop for BenchGateway {
    fn drop(&mut self) {
        self.stop_serving();
        let _ = std::fs::remove_file(&self.socket);
    }
}

/// berth-init's hop in miniature, as it runs as a sandbox's PID 1: 127.0.0.1:port → each
/// accepted socket, TCP_NODELAY set, handed to the gateway over a fresh stream to its socket
/// (`berth_handoff::send`) and closed here. Nothing is copied on this side.
pub struct BoxHop {
    pub addr: SocketAddr,
    runtime: Option<tokio::runtime::Runtime>,
}

impl BoxHop {
    pub fn start(gateway_socket: PathBuf) -> io::Result<BoxHop> {
        let runtime = one_worker("bench-box-hop")?;
        let listener = {
            let _in = runtime.enter();
            let std = std::net::TcpListener::bind("127.0.0.1:0")?;
            std.set_nonblocking(true)?;
            TcpListener::from_std(std)?
        };
        let addr = listener.local_addr()?;
        let gateway_socket = Arc::new(gateway_socket);
        runtime.spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(hand_over(client, gateway_socket.clone()));
            }
        });
        Ok(BoxHop {
            addr,
            runtime: Some(runtime),
        })
    }
}

async fn hand_over(client: TcpStream, gateway: Arc<PathBuf>) {
    let _ = client.set_nodelay(true);
    let Ok(up) = UnixStream::connect(gateway.as_path()).await else {
        return;
    };
    let Ok(socket) = client.into_std() else {
        return;
    };
    let _ = berth_handoff::send(&up, OwnedFd::from(socket)).await;
}

impl Drop for BoxHop {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}
