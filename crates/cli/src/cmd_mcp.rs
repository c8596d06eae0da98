//! `berth mcp`: berth's MCP server on stdin and stdout, for an MCP client that starts it
//! (Claude Desktop, Claude Code, …). The tools (`berth-mcp`) call the daemon's HTTP API with
//! this CLI's own client, found the way every client command finds it (`BERTH_URL` and
//! `BERTH_API_KEY`, else the data dir's files). Stdout carries only the protocol.

use std::sync::Arc;

use berth_mcp::{Api, ApiAnswer, ApiRequest, BoxError, Caller, TransportError};
use http_body_util::BodyExt as _;

use crate::client::{self, Client, ClientError};
use crate::target::Target;

/// `berth mcp` takes no arguments: its help is the command's (`main.rs`).
#[derive(Debug, clap::Args)]
pub struct McpArgs {}

pub async fn run(target: Target, _args: McpArgs) -> anyhow::Result<u8> {
    let caller = Caller::new(target.api_key.clone());
    berth_mcp::serve::stdio(Arc::new(HttpApi { target }), caller).await?;
    Ok(0)
}

/// The API over HTTP, with the caller's key.
struct HttpApi {
    target: Target,
}

#[async_trait::async_trait]
impl Api for HttpApi {
    async fn call(
        &self,
        caller: &Caller,
        request: ApiRequest,
    ) -> Result<ApiAnswer, TransportError> {
        let mut target = self.target.clone();
        target.api_key = caller.key().to_owned();
        let content_type = request.body.content_type();
        let body = request.body.into_bytes();
        let response = Client::new(target)
            .answer(
                request.method,
                &request.path_and_query,
                request.accept,
                content_type,
                Some(body.len() as u64),
                &[],
                client::full(body),
            )
            .await
            .map_err(transport)?;
        let (parts, body) = response.into_parts();
        Ok(ApiAnswer {
            status: parts.status,
            headers: parts.headers,
            body: body.map_err(|e| Box::new(e) as BoxError).boxed_unsync(),
        })
    }
}

fn transport(err: ClientError) -> TransportError {
    TransportError {
        message: err.to_string(),
        source: std::error::Error::source(&err).map(|s| s.to_string().into()),
    }
}
