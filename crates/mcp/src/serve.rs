//! The two ways the tools are served: MCP over stdio (`berth mcp`, one client, one key) and
//! Streamable HTTP (the daemon's `/mcp`, any client, the key of each request).

use std::sync::Arc;

use rmcp::service::ServerInitializeError;
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::ServiceExt as _;

use crate::api::{Api, Caller};
use crate::handler::BerthMcp;
use crate::limits::MAX_MCP_MESSAGE_BYTES;

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("the MCP client did not complete the handshake")]
    Handshake(#[source] Box<ServerInitializeError>),
    #[error("the MCP session ended abnormally")]
    Session(#[source] tokio::task::JoinError),
}

/// Serves MCP on stdin and stdout until the client closes stdin. Every call acts for
/// `caller`. A line over [`MAX_MCP_MESSAGE_BYTES`] is dropped, never buffered.
pub async fn stdio(api: Arc<dyn Api>, caller: Caller) -> Result<(), ServeError> {
    let transport = AsyncRwTransport::new_server(tokio::io::stdin(), tokio::io::stdout())
        .with_max_line_length(MAX_MCP_MESSAGE_BYTES);
    let running = BerthMcp::for_caller(api, caller)
        .serve(transport)
        .await
        .map_err(|e| ServeError::Handshake(Box::new(e)))?;
    running.waiting().await.map_err(ServeError::Session)?;
    Ok(())
}

/// The Streamable HTTP endpoint, a tower service.
pub type McpHttpService = StreamableHttpService<BerthMcp, NeverSessionManager>;

/// The tower service for Streamable HTTP. Each request must carry a [`Caller`] in its
/// extensions (the daemon's auth middleware puts it there).
///
/// Stateless: no session is kept between requests (each POST is answered on its own, as
/// JSON), so a client cannot make the daemon hold state by opening sessions, and every call
/// is authorized by its own request's key. Hosts are not checked: the key is, on every
/// request, and a browser page cannot send it (DNS rebinding gains nothing).
pub fn http(api: Arc<dyn Api>) -> McpHttpService {
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_sse_keep_alive(None)
        .disable_allowed_hosts()
        .with_max_request_body_bytes(MAX_MCP_MESSAGE_BYTES);
    let server = BerthMcp::per_request(api);
    StreamableHttpService::new(
        move || Ok(server.clone()),
        Arc::new(NeverSessionManager::default()),
        config,
    )
}
