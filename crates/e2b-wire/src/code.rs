//! Connect's error codes: the same sixteen as gRPC, spelled in snake case on the wire, each with
//! the HTTP status a unary error answers with (the table in the Connect protocol reference,
//! <https://connectrpc.com/docs/protocol#error-codes>, as revised in 2024: `canceled` 499,
//! `deadline_exceeded` 504, `failed_precondition` 400, `unimplemented` 501).

use std::fmt;

use http::StatusCode;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A Connect error code. There are no others: the protocol has no user-defined codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Code {
    Canceled,
    Unknown,
    InvalidArgument,
    DeadlineExceeded,
    NotFound,
    AlreadyExists,
    PermissionDenied,
    ResourceExhausted,
    FailedPrecondition,
    Aborted,
    OutOfRange,
    Unimplemented,
    Internal,
    Unavailable,
    DataLoss,
    Unauthenticated,
}

impl Code {
    /// Every code, in gRPC's numeric order (1 to 16).
    pub const ALL: [Code; 16] = [
        Code::Canceled,
        Code::Unknown,
        Code::InvalidArgument,
        Code::DeadlineExceeded,
        Code::NotFound,
        Code::AlreadyExists,
        Code::PermissionDenied,
        Code::ResourceExhausted,
        Code::FailedPrecondition,
        Code::Aborted,
        Code::OutOfRange,
        Code::Unimplemented,
        Code::Internal,
        Code::Unavailable,
        Code::DataLoss,
        Code::Unauthenticated,
    ];

    /// The code as the wire spells it (`"not_found"`).
    pub const fn name(self) -> &'static str {
        match self {
            Code::Canceled => "canceled",
            Code::Unknown => "unknown",
            Code::InvalidArgument => "invalid_argument",
            Code::DeadlineExceeded => "deadline_exceeded",
            Code::NotFound => "not_found",
            Code::AlreadyExists => "already_exists",
            Code::PermissionDenied => "permission_denied",
            Code::ResourceExhausted => "resource_exhausted",
            Code::FailedPrecondition => "failed_precondition",
            Code::Aborted => "aborted",
            Code::OutOfRange => "out_of_range",
            Code::Unimplemented => "unimplemented",
            Code::Internal => "internal",
            Code::Unavailable => "unavailable",
            Code::DataLoss => "data_loss",
            Code::Unauthenticated => "unauthenticated",
        }
    }

    /// The code a wire name stands for, `None` for a name Connect does not define.
    pub fn from_name(name: &str) -> Option<Code> {
        Code::ALL.into_iter().find(|code| code.name() == name)
    }

    /// The HTTP status of a unary response carrying this error. Streaming responses always
    /// answer 200 and carry the error in their end-stream message.
    pub fn http_status(self) -> StatusCode {
        match self {
            // 499 "Client Closed Request" (nginx's) has no constant; any 3-digit code parses.
            Code::Canceled => {
                StatusCode::from_u16(499).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
            }
            Code::InvalidArgument | Code::FailedPrecondition | Code::OutOfRange => {
                StatusCode::BAD_REQUEST
            }
            Code::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
            Code::NotFound => StatusCode::NOT_FOUND,
            Code::AlreadyExists | Code::Aborted => StatusCode::CONFLICT,
            Code::PermissionDenied => StatusCode::FORBIDDEN,
            Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
            Code::Unimplemented => StatusCode::NOT_IMPLEMENTED,
            Code::Unknown | Code::Internal | Code::DataLoss => StatusCode::INTERNAL_SERVER_ERROR,
            Code::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            Code::Unauthenticated => StatusCode::UNAUTHORIZED,
        }
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Serialize for Code {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for Code {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        Code::from_name(&name).ok_or_else(|| {
            serde::de::Error::custom(format_args!("unknown Connect error code {name:?}"))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_has_a_distinct_name_that_reads_back() {
        let mut names: Vec<&str> = Code::ALL.iter().map(|code| code.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), 16);
        for code in Code::ALL {
            assert_eq!(Code::from_name(code.name()), Some(code));
            assert_eq!(serde_json::to_value(code).unwrap(), code.name());
            let back: Code = serde_json::from_value(code.name().into()).unwrap();
            assert_eq!(back, code);
        }
        assert_eq!(Code::from_name("NOT_FOUND"), None);
        assert!(serde_json::from_str::<Code>("\"ok\"").is_err());
    }

    #[test]
    fn http_statuses_follow_the_connect_table() {
        let table = [
            ("canceled", 499),
            ("unknown", 500),
            ("invalid_argument", 400),
            ("deadline_exceeded", 504),
            ("not_found", 404),
            ("already_exists", 409),
            ("permission_denied", 403),
            ("resource_exhausted", 429),
            ("failed_precondition", 400),
            ("aborted", 409),
            ("out_of_range", 400),
            ("unimplemented", 501),
            ("internal", 500),
            ("unavailable", 503),
            ("data_loss", 500),
            ("unauthenticated", 401),
        ];
        for (name, status) in table {
            let code = Code::from_name(name).unwrap();
            assert_eq!(code.http_status().as_u16(), status, "{name}");
        }
    }
}
