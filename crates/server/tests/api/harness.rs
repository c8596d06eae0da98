//! Starting a daemon for a test, talking HTTP to it, and cleaning up after it.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use berth_protocol::BoxId;
use berth_runtime::{
    BootToken, Booted, BoxSpec, Capabilities, EgressListener, GuestAddr, GuestClient, IdMap,
    Runtime, RuntimeError, RuntimeStatus,
};
use berth_server::lifecycle::wakeups::doorbell::Wakeups;
use berth_server::{Runtimes, Server, ServerConfig};
use berth_store::Store;
use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use serde_json::Value;

/// A runtime that cannot start boxes: for everything that must work without one.
#[derive(Debug)]
pub struct NoBoxes;

#[async_trait]
impl Runtime for NoBoxes {
    fn name(&self) -> &'static str {
        "none"
    }
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            pause: false,
            snapshot: false,
            host_rootfs: true,
        }
    }
    async fn start(&self, _spec: &BoxSpec) -> Result<Booted, RuntimeError> {
        Err(RuntimeError::Missing {
            what: "a runtime".into(),
            hint: "this test runs without one".into(),
        })
    }
    async fn rebind_egress(
        &self,
        _id: &BoxId,
        _id_map: IdMap,
    ) -> Result<EgressListener, RuntimeError> {
        Err(RuntimeError::Missing {
            what: "a runtime".into(),
            hint: "this test runs without one".into(),
        })
    }
    async fn stop(&self, _id: &BoxId, _grace: Duration) -> Result<(), RuntimeError> {
        Ok(())
    }
    async fn pause(&self, _id: &BoxId) -> Result<(), RuntimeError> {
        Err(RuntimeError::Unsupported {
            backend: "none",
            operation: "pause",
        })
    }
    async fn resume(&self, _id: &BoxId) -> Result<(), RuntimeError> {
        Err(RuntimeError::Unsupported {
            backend: "none",
            operation: "resume",
        })
    }
    async fn status(&self, _id: &BoxId) -> Result<RuntimeStatus, RuntimeError> {
        Ok(RuntimeStatus::Stopped)
    }
    fn channel(&self, _id: &BoxId, token: &BootToken) -> GuestClient {
        GuestClient::new(
            GuestAddr::Unix("/nonexistent/agent.sock".into()),
            token.clone(),
        )
    }
    async fn list(&self) -> Result<Vec<BoxId>, RuntimeError> {
        Ok(Vec::new())
    }
    async fn remove(&self, _id: &BoxId) -> Result<(), RuntimeError> {
        Ok(())
    }
}

/// A running daemon. Dropping it kills and deletes every OCI container of its data dir.
pub struct TestServer {
    pub addr: SocketAddr,
    pub key: String,
    pub store: Arc<Store>,
    /// The wakeups' limits, doorbell and clock: a test may drive the clock.
    pub wakeups: Arc<Wakeups>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<Result<(), berth_server::ServerError>>>,
    oci_runtime: Option<String>,
    pub data: tempfile::TempDir,
}

impl TestServer {
    pub async fn start(
        runtime: Arc<dyn Runtime>,
        oci_runtime: Option<String>,
        data: tempfile::TempDir,
    ) -> TestServer {
        TestServer::start_with(Runtimes::single(runtime), oci_runtime, data).await
    }

    /// A daemon with several runtimes.
    pub async fn start_with(
        runtimes: Runtimes,
        oci_runtime: Option<String>,
        data: tempfile::TempDir,
    ) -> TestServer {
        TestServer::start_with_host(runtimes, oci_runtime, data, Default::default()).await
    }

    /// A daemon with these `berth.toml` settings.
    pub async fn start_with_host(
        runtimes: Runtimes,
        oci_runtime: Option<String>,
        data: tempfile::TempDir,
        host: berth_server::HostConfig,
    ) -> TestServer {
        TestServer::start_configured(runtimes, oci_runtime, data, host, |_| ()).await
    }

    /// A daemon with these `berth.toml` settings, and `configure` applied to the rest of
    /// its configuration (`berth up`'s flags).
    pub async fn start_configured(
        runtimes: Runtimes,
        oci_runtime: Option<String>,
        data: tempfile::TempDir,
        host: berth_server::HostConfig,
        configure: impl FnOnce(&mut ServerConfig),
    ) -> TestServer {
        let mut config = ServerConfig {
            data_dir: data.path().to_owned(),
            listen: "127.0.0.1:0".parse().unwrap(),
            runtimes,
            // Short, so idle-reclaim tests wait little.
            idle_check: Duration::from_millis(200),
            host,
            tls: None,
            public_url: None,
            role: Default::default(),
        };
        configure(&mut config);
        let server = Server::bind(config).await.expect("the daemon binds");
        let key = server.admin_key_created.clone().unwrap_or_else(|| {
            std::fs::read_to_string(data.path().join("admin.key"))
                .expect("an admin key")
                .trim()
                .to_owned()
        });
        let (addr, store, wakeups) = (server.local_addr(), server.store(), server.wakeups());
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(server.serve(async move {
            let _ = rx.await;
        }));
        TestServer {
            addr,
            key,
            store,
            wakeups,
            shutdown: Some(tx),
            task: Some(task),
            oci_runtime,
            data,
        }
    }

    pub async fn without_runtime() -> TestServer {
        TestServer::start(Arc::new(NoBoxes), None, tempfile::tempdir().unwrap()).await
    }

    /// Graceful shutdown: the daemon stops every box.
    /// Containers the OCI runtime still has for this daemon's data dir.
    pub fn runtime_containers_running(&self) -> Vec<String> {
        let out = std::process::Command::new("runc")
            .arg("--root")
            .arg(self.data.path().join("oci"))
            .args(["list", "-q"])
            .output()
            .expect("runc list");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect()
    }

    pub async fn shut_down(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            task.await.unwrap().expect("the daemon shuts down cleanly");
        }
    }

    pub async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let body = body.map(|v| Bytes::from(v.to_string())).unwrap_or_default();
        let (status, _, bytes) = self.raw(method, path, Some(&self.key), &[], body).await;
        let value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes)
                .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", String::from_utf8_lossy(&bytes)))
        };
        (status, value)
    }

    pub async fn raw(
        &self,
        method: Method,
        path: &str,
        key: Option<&str>,
        headers: &[(&str, &str)],
        body: Bytes,
    ) -> (StatusCode, HeaderMap, Bytes) {
        request(self.addr, method, path, key, headers, body).await
    }
}

/// One HTTP/1.1 request on a fresh connection; the whole answer.
pub async fn request(
    addr: SocketAddr,
    method: Method,
    path: &str,
    key: Option<&str>,
    headers: &[(&str, &str)],
    body: Bytes,
) -> (StatusCode, HeaderMap, Bytes) {
    {
        let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .unwrap();
        tokio::spawn(conn);
        let mut req = http::Request::builder()
            .method(method)
            .uri(path)
            .header("host", "berth");
        if let Some(key) = key {
            req = req.header("authorization", format!("Bearer {key}"));
        }
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        let response = sender
            .send_request(req.body(Full::new(body)).unwrap())
            .await
            .unwrap();
        let (parts, body) = response.into_parts();
        (
            parts.status,
            parts.headers,
            body.collect().await.unwrap().to_bytes(),
        )
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
        if let Some(runc) = &self.oci_runtime {
            kill_containers(runc, &self.data.path().join("oci"));
            // Without a graceful shutdown the boxes' volume mounts are still there.
            berth_runtime::sandbox::release_all_mounts_blocking(self.data.path());
        }
    }
}

/// Kills and deletes every container under an OCI runtime root (blocking, for Drop).
pub(crate) fn kill_containers(runc: &str, root: &Path) {
    if !root.exists() {
        return;
    }
    let Ok(out) = std::process::Command::new(runc)
        .arg("--root")
        .arg(root)
        .args(["list", "-q"])
        .output()
    else {
        return;
    };
    for id in String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| !l.is_empty())
    {
        eprintln!("cleanup: deleting leftover container {id}");
        let _ = std::process::Command::new(runc)
            .arg("--root")
            .arg(root)
            .args(["kill", id, "KILL"])
            .status();
        let _ = std::process::Command::new(runc)
            .arg("--root")
            .arg(root)
            .args(["delete", "-f", id])
            .status();
    }
}

/// Every `Set-Cookie` of an answer, in order.
pub fn set_cookies(headers: &HeaderMap) -> Vec<String> {
    headers
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().unwrap().to_owned())
        .collect()
}

pub fn error_code(body: &Value) -> &str {
    body["error"]["code"]
        .as_str()
        .unwrap_or_else(|| panic!("not an error body: {body}"))
}
