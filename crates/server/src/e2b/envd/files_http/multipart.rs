//! A `multipart/form-data` upload: each part is a file, written as it arrives (never held
//! whole). Its path is the query's `path` when the upload has one part, else the part's file
//! name (resolved like any envd path: relative to the user's home).
//!
//! Bounds: a part's bytes are at most berth's upload limit (256 MiB); a request carries at
//! most [`MAX_PARTS`] parts; and the bytes read while looking for a part's headers are at
//! most [`MAX_HEADER_BYTES`] (the parser holds them until the headers end, so a part with
//! endless headers would otherwise be held whole).

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use axum::body::Body;
use futures_util::StreamExt;

use super::{query_path, write_one, FilesError, FilesQuery, Written};
use crate::ctx::Ctx;
use crate::e2b::envd::caller::EnvdCaller;
use crate::e2b::envd::filesystem::paths::parent;

/// The most parts (files) one upload may carry.
pub const MAX_PARTS: usize = 1000;
/// The most bytes read while a part's headers (and the boundary before them) are looked for.
pub const MAX_HEADER_BYTES: u64 = 1024 * 1024;

/// How much was read while the parser looked for headers.
#[derive(Default)]
struct HeaderBudget {
    reading_headers: AtomicBool,
    read: AtomicU64,
}

pub async fn upload(
    ctx: &Ctx,
    caller: &EnvdCaller,
    query: &FilesQuery,
    content_type: &str,
    body: Body,
) -> Result<Vec<Written>, FilesError> {
    let boundary = multer::parse_boundary(content_type)
        .map_err(|e| FilesError::BadRequest(format!("a malformed multipart Content-Type: {e}")))?;
    let budget = Arc::new(HeaderBudget::default());
    let counted = {
        let budget = Arc::clone(&budget);
        body.into_data_stream().map(move |chunk| {
            let chunk = chunk.map_err(std::io::Error::other)?;
            if budget.reading_headers.load(Ordering::Relaxed) {
                let read = budget.read.fetch_add(chunk.len() as u64, Ordering::Relaxed);
                if read + chunk.len() as u64 > MAX_HEADER_BYTES {
                    return Err(std::io::Error::other(HeadersTooLong));
                }
            }
            Ok(chunk)
        })
    };
    let limits = multer::SizeLimit::new().per_field(crate::api::extract::UPLOAD_LIMIT_BYTES);
    let mut form = multer::Multipart::with_constraints(
        counted,
        boundary,
        multer::Constraints::new().size_limit(limits),
    );
    let mut written = Vec::new();
    // The directories this upload has made already: each is made once.
    let mut made = HashSet::new();
    loop {
        budget.read.store(0, Ordering::Relaxed);
        budget.reading_headers.store(true, Ordering::Relaxed);
        let next = form.next_field().await;
        budget.reading_headers.store(false, Ordering::Relaxed);
        let Some(part) = next.map_err(part_error)? else {
            break;
        };
        if written.len() == MAX_PARTS {
            return Err(FilesError::BadRequest(format!(
                "an upload carries at most {MAX_PARTS} files"
            )));
        }
        let name = match (&query.path, part.file_name()) {
            (Some(path), _) if written.is_empty() => path.clone(),
            (_, Some(file_name)) => file_name.to_owned(),
            (Some(path), None) => path.clone(),
            (None, None) => {
                return Err(FilesError::BadRequest(
                    "a part has no file name and the upload no path".to_owned(),
                ))
            }
        };
        let path = query_path(&name, caller)?;
        let make_parents = made.insert(parent(&path));
        let data = Body::from_stream(part);
        written.push(write_one(ctx, caller, path, data, make_parents).await?);
    }
    if written.is_empty() {
        return Err(FilesError::BadRequest(
            "the multipart upload carries no file".to_owned(),
        ));
    }
    Ok(written)
}

#[derive(Debug, thiserror::Error)]
#[error("a multipart part's headers run past {MAX_HEADER_BYTES} bytes")]
struct HeadersTooLong;

fn part_error(error: multer::Error) -> FilesError {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&error);
    while let Some(e) = source {
        // An io::Error's `source` skips the error it wraps: look inside it too.
        let wrapped = e
            .downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::get_ref)
            .is_some_and(|inner| inner.is::<HeadersTooLong>());
        if wrapped || e.is::<HeadersTooLong>() {
            return FilesError::BadRequest(HeadersTooLong.to_string());
        }
        source = e.source();
    }
    FilesError::BadRequest(format!("a malformed multipart body: {error}"))
}
