//! Version 3's directory calls: a tree out of the box as a tar stream, a tar stream into
//! it, and a watch on a directory. Each streams: the host holds a few chunks, never the
//! tree. An archive has no size limit of its own (a box's volume bounds it), so both
//! directions are read only as fast as the other side takes them.

use berth_protocol::files::{ArchiveWritten, WatchEvent};
use berth_protocol::guest::{Call, FileQuery, MAX_JSON_ANSWER_BYTES};
use bytes::Bytes;
use http::Method;

use super::body::{collect_limited, FileDownload, Upload};
use super::error::{BodyError, GuestError};
use super::{file_uri, GuestClient, NdjsonStream};

/// The changes under a watched directory, as they come. Dropping it ends the watch.
pub type WatchStream = NdjsonStream<WatchEvent>;

/// A `PUT` of a tar on an open connection to the agent, waiting for its body.
pub struct ArchiveUpload {
    upload: Upload,
}

impl ArchiveUpload {
    /// Streams `body` to the agent as hyper asks for it, and returns what was extracted.
    pub async fn send<B>(self, body: B) -> Result<ArchiveWritten, GuestError>
    where
        B: hyper::body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<BodyError>,
    {
        let response = self.upload.send_answered(body).await?;
        let bytes = collect_limited(response, MAX_JSON_ANSWER_BYTES, "JSON answer").await?;
        Ok(serde_json::from_slice(&bytes)?)
    }
}

impl GuestClient {
    /// `q.path` (a directory, or one file) as a tar stream, read as `q.user`. A stream the
    /// box cut (an unreadable file deep in the tree, the box going away) ends with an
    /// error, never as a short but valid-looking tar.
    pub async fn download_archive(&self, q: &FileQuery) -> Result<FileDownload, GuestError> {
        let uri = file_uri("/v1/files/archive", q);
        let response = self
            .send(Call::FileArchiveRead, Method::GET, &uri, Bytes::new())
            .await?;
        Ok(FileDownload::unbounded(response))
    }

    /// Connects for an archive extraction into `q.path`; [`ArchiveUpload::send`] then
    /// streams the tar. Split in two so a caller can retry the connect without having
    /// spent the body.
    pub async fn open_archive_upload(&self, q: &FileQuery) -> Result<ArchiveUpload, GuestError> {
        self.require(Call::FileArchiveWrite).await?;
        Ok(ArchiveUpload {
            upload: Upload {
                sender: self.connection().await?,
                request: self.builder(Method::PUT, &file_uri("/v1/files/archive", q)),
                // A tree has no limit of its own: the box's volume bounds it.
                limit: None,
            },
        })
    }

    /// Watches `q.path` (with `q.recursive`, its subdirectories too) as `q.user`.
    pub async fn watch(&self, q: &FileQuery) -> Result<WatchStream, GuestError> {
        let uri = file_uri("/v1/files/watch", q);
        let response = self
            .send(Call::FileWatch, Method::GET, &uri, Bytes::new())
            .await?;
        Ok(NdjsonStream::new(response.into_body()))
    }
}
