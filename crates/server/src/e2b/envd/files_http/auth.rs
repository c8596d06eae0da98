//! Who may use `/files`: envd's rules. The sandbox's access token in `X-Access-Token`, or a
//! signed URL (what the SDKs' `download_url`/`upload_url` make): `signature=v1_<sig>` where
//! `<sig>` is SHA-256 of `path:operation:username:token[:expiration]` in base64 without
//! padding, `operation` `read` (GET) or `write` (POST), with `signature_expiration` (unix
//! seconds) when it expires. A wrong signature, or one past its expiration, is `401`, as
//! envd answers; signatures are compared in constant time.
//!
//! The sandbox is the one the request names (`E2b-Sandbox-Id`, or the host name). A signed
//! URL the SDK made from `E2B_SANDBOX_URL` names none (the SDK joins `/files` to that URL,
//! which drops its `/e2b`): such a request, at berth's own `/files`, is for the running
//! sandbox whose token made the signature, found by checking the signature against each
//! running sandbox's token. A URL that is not signed, expired, or malformed is refused
//! before any sandbox is looked at.

use base64::Engine as _;
use berth_store::BoxState;
use http::request::Parts;
use ring::digest;

use super::{FilesError, FilesQuery};
use crate::ctx::Ctx;
use crate::e2b::access_token;
use crate::e2b::envd::caller::{self, EnvdCaller, SandboxByHost, ACCESS_TOKEN_HEADER};

/// What a signed URL allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    Read,
    Write,
}

impl Operation {
    fn as_str(self) -> &'static str {
        match self {
            Operation::Read => "read",
            Operation::Write => "write",
        }
    }
}

/// The label berth gives every sandbox's box.
const SANDBOX_LABEL: (&str, &str) = ("e2b", "true");

/// The signature of a URL for `path`, as the SDKs compute it.
pub fn signature(
    path: &str,
    operation: Operation,
    username: &str,
    token: &str,
    expiration: Option<i64>,
) -> String {
    let raw = match expiration {
        None => format!("{path}:{}:{username}:{token}", operation.as_str()),
        Some(at) => format!("{path}:{}:{username}:{token}:{at}", operation.as_str()),
    };
    let hash = digest::digest(&digest::SHA256, raw.as_bytes());
    format!(
        "v1_{}",
        base64::engine::general_purpose::STANDARD_NO_PAD.encode(hash.as_ref())
    )
}

/// The caller of a `/files` request.
pub fn authorize(
    ctx: &Ctx,
    parts: &mut Parts,
    query: &FilesQuery,
    operation: Operation,
) -> Result<EnvdCaller, FilesError> {
    let user = caller::box_user(query.username.as_deref().unwrap_or(""))
        .map_err(|e| FilesError::BadRequest(e.to_string()))?;
    if let Some(token) = parts
        .headers
        .get(ACCESS_TOKEN_HEADER)
        .and_then(|v| v.to_str().ok())
    {
        let sandbox = caller::sandbox(ctx, parts, Some(token)).map_err(unauthorized)?;
        return Ok(EnvdCaller { sandbox, user });
    }
    let signed = query.signature.as_deref().ok_or(FilesError::Unauthorized(
        "missing signature query parameter",
    ))?;
    if let Some(at) = query.signature_expiration {
        if at < time::OffsetDateTime::now_utc().unix_timestamp() {
            return Err(FilesError::Unauthorized("signature is already expired"));
        }
    }
    // A SHA-256 in base64 without padding: anything else matches no sandbox.
    if !signed.starts_with("v1_") || signed.len() != 46 {
        return Err(FilesError::Unauthorized("invalid signature"));
    }
    let path = query.path.as_deref().unwrap_or("");
    let username = query.username.as_deref().unwrap_or("");
    let matches = |box_id: &berth_protocol::BoxId| {
        let token = access_token::for_box(ctx, box_id);
        let expected = signature(
            path,
            operation,
            username,
            &token,
            query.signature_expiration,
        );
        same_bytes(expected.as_bytes(), signed.as_bytes())
    };
    let box_id = match caller::sandbox_id(parts) {
        Some(sandbox_id) => ctx
            .store
            .e2b_sandbox_on_host(&sandbox_id)
            .map_err(|e| FilesError::Internal(e.to_string()))?
            .map(|row| row.box_id)
            .filter(|id| matches(id)),
        None => {
            let found = signer_among_running(ctx, &matches)?;
            if let Some((_, name)) = &found {
                parts.extensions.insert(SandboxByHost(name.clone()));
            }
            found.map(|(id, _)| id)
        }
    };
    let box_id = box_id.ok_or(FilesError::Unauthorized("invalid signature"))?;
    let token = access_token::for_box(ctx, &box_id);
    let sandbox = caller::sandbox(ctx, parts, Some(&token)).map_err(unauthorized)?;
    Ok(EnvdCaller { sandbox, user })
}

/// The running sandbox whose token signed the URL: its box id and sandbox id.
fn signer_among_running(
    ctx: &Ctx,
    matches: &dyn Fn(&berth_protocol::BoxId) -> bool,
) -> Result<Option<(berth_protocol::BoxId, String)>, FilesError> {
    let boxes = ctx
        .store
        .list_all_boxes()
        .map_err(|e| FilesError::Internal(e.to_string()))?;
    Ok(boxes
        .into_iter()
        .filter(|b| b.state == BoxState::Running)
        .filter(|b| b.labels.get(SANDBOX_LABEL.0).map(String::as_str) == Some(SANDBOX_LABEL.1))
        .find(|b| matches(&b.id))
        .map(|b| (b.id, b.name)))
}

/// Whether `a` and `b` are equal, in time that depends only on their lengths.
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    let differ = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    a.len() == b.len() && std::hint::black_box(differ) == 0
}

fn unauthorized(error: caller::CallerError) -> FilesError {
    match error {
        caller::CallerError::Unauthenticated { .. } | caller::CallerError::NoSandbox => {
            FilesError::Unauthorized("the X-Access-Token is not this sandbox's envdAccessToken")
        }
        other => FilesError::Caller(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_are_the_sdks() {
        // e2b/sandbox/signature.py of the pinned SDK, for these inputs.
        let sig = signature("/home/user/a.txt", Operation::Read, "", "tok", None);
        assert!(sig.starts_with("v1_") && sig.len() == 46, "{sig}");
        assert_ne!(
            sig,
            signature("/home/user/a.txt", Operation::Write, "", "tok", None)
        );
        assert_ne!(
            sig,
            signature("/home/user/a.txt", Operation::Read, "", "tok", Some(1))
        );
    }
}
