//! `/mcp`: berth's MCP server over Streamable HTTP (docs/mcp.md), for any MCP client with a
//! berth API key in `Authorization: Bearer`.
//!
//! The tools (`berth-mcp`) call berth's API; here that call goes into this daemon's own
//! router, in process, with the request's key. So a tool passes through exactly what an API
//! client does (auth, tenant scoping, quotas, stream budgets, validation, the request log),
//! written once. The router the tools call has no `/mcp`: a tool cannot call itself.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{FromRequestParts, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;
use berth_mcp::{Api, ApiAnswer, ApiRequest, BoxError, Caller, TransportError};
use http::header::{ACCEPT, AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE, HOST};
use http::HeaderValue;
use http_body_util::BodyExt as _;
use tower_service::Service as _;

use crate::api::auth;
use crate::api::error::ApiError;
use crate::ctx::Ctx;

/// Where the MCP endpoint is served.
pub const PATH: &str = "/mcp";

/// The MCP service, calling the API through `api` (the daemon's router, without `/mcp`).
pub fn service(api: Router) -> berth_mcp::serve::McpHttpService {
    berth_mcp::serve::http(Arc::new(RouterApi { router: api }))
}

/// Lets only a request with a valid API key in `Authorization: Bearer` through (a browser's
/// session cookie is not enough: the tools need a key to act with), and hands the key on to
/// the tools as the request's [`Caller`].
pub async fn authenticate(State(ctx): State<Ctx>, request: Request, next: Next) -> Response {
    let (mut parts, body) = request.into_parts();
    let Some(key) = bearer_key(&parts.headers) else {
        return ApiError::Unauthorized.into_response();
    };
    // The API's own check: the key, and the connection charged to its tenant.
    if let Err(rejection) = auth::Caller::from_request_parts(&mut parts, &ctx).await {
        return rejection.into_response();
    }
    let mut caller = Caller::new(key);
    caller.host = parts.headers.get(HOST).cloned();
    caller.forwarded_proto = parts.headers.get("x-forwarded-proto").cloned();
    parts.extensions.insert(caller);
    next.run(Request::from_parts(parts, body)).await
}

fn bearer_key(headers: &http::HeaderMap) -> Option<String> {
    headers
        .get(AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
        .map(|key| key.trim().to_owned())
        .filter(|key| !key.is_empty())
}

/// The API, called in process.
struct RouterApi {
    router: Router,
}

#[async_trait::async_trait]
impl Api for RouterApi {
    async fn call(
        &self,
        caller: &Caller,
        request: ApiRequest,
    ) -> Result<ApiAnswer, TransportError> {
        let content_type = request.body.content_type();
        let body = request.body.into_bytes();
        let mut builder = http::Request::builder()
            .method(request.method)
            .uri(&request.path_and_query)
            .header(ACCEPT, request.accept)
            .header(CONTENT_LENGTH, body.len());
        let auth = HeaderValue::try_from(format!("Bearer {}", caller.key())).map_err(|e| {
            TransportError {
                message: "the API key is not a valid header value".into(),
                source: Some(Box::new(e)),
            }
        })?;
        builder = builder.header(AUTHORIZATION, auth);
        if let Some(content_type) = content_type {
            builder = builder.header(CONTENT_TYPE, content_type);
        }
        if let Some(host) = &caller.host {
            builder = builder.header(HOST, host);
        }
        if let Some(proto) = &caller.forwarded_proto {
            builder = builder.header("x-forwarded-proto", proto);
        }
        let http_request = builder.body(Body::from(body)).map_err(|e| TransportError {
            message: format!("cannot build the request for {}", request.path_and_query),
            source: Some(Box::new(e)),
        })?;
        // The router is always ready and never fails (its error type is `Infallible`).
        let response = match self.router.clone().call(http_request).await {
            Ok(response) => response,
            Err(never) => match never {},
        };
        let (parts, body) = response.into_parts();
        Ok(ApiAnswer {
            status: parts.status,
            headers: parts.headers,
            body: body.map_err(|e| Box::new(e) as BoxError).boxed_unsync(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_bearer_key_is_taken() {
        let mut headers = http::HeaderMap::new();
        assert_eq!(bearer_key(&headers), None);
        headers.insert(AUTHORIZATION, HeaderValue::from_static("Basic abc"));
        assert_eq!(bearer_key(&headers), None);
        headers.insert(AUTHORIZATION, HeaderValue::from_static("Bearer  "));
        assert_eq!(bearer_key(&headers), None);
        headers.insert(AUTHORIZATION, HeaderValue::from_static("Bearer berth_k "));
        assert_eq!(bearer_key(&headers).as_deref(), Some("berth_k"));
    }
}
