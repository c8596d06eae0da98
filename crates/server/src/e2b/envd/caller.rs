//! Who an envd request is for, and as whom. envd has no API key: a request names its sandbox
//! (the `E2b-Sandbox-Id` header that `E2B_SANDBOX_URL` makes the SDKs send, or the host name
//! `49983-<sandboxID>.<base_domain>`) and proves it may act in it with the sandbox's
//! `envdAccessToken` (`X-Access-Token`). A missing or wrong token and an unknown sandbox get
//! the same answer, so a caller without the token learns nothing of which sandboxes exist.
//! The box user is the Basic-auth user name the SDKs send (`user:`), `user` when none is
//! given (envd's default since 0.4.0).

use base64::Engine as _;
use berth_protocol::guest::BoxUser;
use berth_protocol::{BoxId, TenantId};
use berth_store::BoxRecord;
use http::request::Parts;
use http::HeaderMap;

use crate::admission::connection;
use crate::ctx::Ctx;
use crate::e2b::lookup;

/// The header naming the sandbox of an envd request sent to `E2B_SANDBOX_URL`.
pub const SANDBOX_ID_HEADER: &str = "e2b-sandbox-id";
/// The header carrying the sandbox's `envdAccessToken`.
pub const ACCESS_TOKEN_HEADER: &str = "x-access-token";

/// The sandbox a request reached by its host name (`49983-<id>.<base_domain>`), set by the
/// host router before the envd routes run.
#[derive(Debug, Clone)]
pub struct SandboxByHost(pub String);

/// The sandbox an envd request acts in.
#[derive(Debug, Clone)]
pub struct Sandbox {
    pub sandbox_id: String,
    pub box_id: BoxId,
    pub tenant: TenantId,
    pub record: BoxRecord,
}

/// An identified envd caller: the sandbox and the box user it acts as.
#[derive(Debug, Clone)]
pub struct EnvdCaller {
    pub sandbox: Sandbox,
    pub user: BoxUser,
}

#[derive(Debug, thiserror::Error)]
pub enum CallerError {
    #[error("no sandbox named: send the E2b-Sandbox-Id header, or use the host name 49983-<sandboxID>.<base_domain>")]
    NoSandbox,
    /// No such sandbox, or not its token (one answer for both).
    #[error("sandbox {sandbox_id} is not running here, or the X-Access-Token is not its envdAccessToken (get one with Sandbox.connect)")]
    Unauthenticated { sandbox_id: String },
    #[error("unknown user {name:?}: berth boxes have the users \"user\" and \"root\"")]
    UnknownUser { name: String },
    #[error("a malformed Authorization header: envd takes Basic auth with the user name only")]
    BadAuthorization,
    /// The store failed finding the sandbox.
    #[error(transparent)]
    Lookup(#[from] crate::e2b::error::E2bError),
    #[error(transparent)]
    Api(#[from] crate::api::error::ApiError),
}

impl From<CallerError> for berth_e2b_wire::ConnectError {
    fn from(error: CallerError) -> Self {
        use berth_e2b_wire::{Code, ConnectError};
        match error {
            CallerError::Api(api) => super::error::connect_error(api),
            CallerError::Lookup(lookup) => {
                tracing::error!(error = %berth_runtime::error_chain(&lookup), "envd: finding a sandbox failed");
                ConnectError::new(Code::Internal, lookup.to_string())
            }
            CallerError::NoSandbox | CallerError::Unauthenticated { .. } => {
                ConnectError::new(Code::Unauthenticated, error.to_string())
            }
            CallerError::UnknownUser { .. } | CallerError::BadAuthorization => {
                ConnectError::new(Code::InvalidArgument, error.to_string())
            }
        }
    }
}

/// The sandbox the request names, if it names one.
pub fn sandbox_id(parts: &Parts) -> Option<String> {
    if let Some(SandboxByHost(id)) = parts.extensions.get::<SandboxByHost>() {
        return Some(id.clone());
    }
    parts
        .headers
        .get(SANDBOX_ID_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim().to_owned())
}

/// The sandbox named by `parts` when `token` is its access token; charges the request's
/// connection to the sandbox's tenant.
pub fn sandbox(ctx: &Ctx, parts: &Parts, token: Option<&str>) -> Result<Sandbox, CallerError> {
    let sandbox_id = sandbox_id(parts).ok_or(CallerError::NoSandbox)?;
    let unauthenticated = || CallerError::Unauthenticated {
        sandbox_id: sandbox_id.clone(),
    };
    let token = token.ok_or_else(unauthenticated)?;
    let found = lookup::find_by_token(ctx, &sandbox_id, token)?;
    let (record, row) = found.ok_or_else(unauthenticated)?;
    connection::charge(&parts.extensions, &row.tenant_id)
        .map_err(|e| CallerError::Api(e.into()))?;
    Ok(Sandbox {
        sandbox_id,
        box_id: record.id.clone(),
        tenant: row.tenant_id,
        record,
    })
}

/// `user` or `root` by name; the empty name is the default user.
pub fn box_user(name: &str) -> Result<BoxUser, CallerError> {
    match name {
        "" | "user" => Ok(BoxUser::User),
        "root" => Ok(BoxUser::Root),
        _ => Err(CallerError::UnknownUser {
            name: name.to_owned(),
        }),
    }
}

/// The user of `Authorization: Basic base64("<name>:")`; the default user without one.
pub fn basic_user(headers: &HeaderMap) -> Result<BoxUser, CallerError> {
    let Some(value) = headers.get(http::header::AUTHORIZATION) else {
        return Ok(BoxUser::User);
    };
    let encoded = value
        .to_str()
        .ok()
        .and_then(|v| v.strip_prefix("Basic "))
        .ok_or(CallerError::BadAuthorization)?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .map_err(|_| CallerError::BadAuthorization)?;
    let text = String::from_utf8(decoded).map_err(|_| CallerError::BadAuthorization)?;
    let (name, _password) = text.split_once(':').unwrap_or((&text, ""));
    box_user(name)
}

/// The caller of a Connect request: the sandbox (by `X-Access-Token`) and the Basic-auth user.
pub fn identify(ctx: &Ctx, parts: &Parts) -> Result<EnvdCaller, CallerError> {
    let token = parts
        .headers
        .get(ACCESS_TOKEN_HEADER)
        .and_then(|v| v.to_str().ok());
    let sandbox = sandbox(ctx, parts, token)?;
    let user = basic_user(&parts.headers)?;
    Ok(EnvdCaller { sandbox, user })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auth(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(http::header::AUTHORIZATION, value.parse().unwrap());
        headers
    }

    #[test]
    fn the_basic_user_name_picks_the_box_user() {
        assert_eq!(basic_user(&HeaderMap::new()).unwrap(), BoxUser::User);
        // base64("root:") and base64("user:")
        assert_eq!(basic_user(&auth("Basic cm9vdDo=")).unwrap(), BoxUser::Root);
        assert_eq!(basic_user(&auth("Basic dXNlcjo=")).unwrap(), BoxUser::User);
        // base64("admin:")
        assert!(matches!(
            basic_user(&auth("Basic YWRtaW46")),
            Err(CallerError::UnknownUser { .. })
        ));
        assert!(matches!(
            basic_user(&auth("Bearer x")),
            Err(CallerError::BadAuthorization)
        ));
    }
}
