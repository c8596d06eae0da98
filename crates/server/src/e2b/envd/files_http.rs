//! envd's `/files`: not served yet.

use http::StatusCode;

pub async fn download() -> StatusCode {
    StatusCode::NOT_IMPLEMENTED
}

pub async fn upload() -> StatusCode {
    StatusCode::NOT_IMPLEMENTED
}
