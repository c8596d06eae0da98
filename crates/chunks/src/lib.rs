//! Durable copies of boxes' volume images, so that a box can be restored on another
//! machine: a content-addressed store of [`CHUNK_SIZE`] chunks on a local directory or S3
//! (through the `object_store` crate).
//!
//! # What is stored
//!
//! An image (a sparse ext4 file, mostly holes) is cut into 4 MiB chunks. A chunk that is a
//! hole or all zeros is stored as nothing; any other is named by the sha256 of its bytes
//! and stored once, zstd-compressed, at `chunks/<first 2 hex>/<hash>`. A *manifest*, the
//! list of a generation's chunks, goes to `volumes/<volume>/<generation, 20 digits>.json`:
//!
//! - [`ChunkStore::upload`] reads only the image's data extents (`SEEK_DATA`/`SEEK_HOLE`),
//!   stores the chunks the previous manifest (`base`) does not name, with a few in flight
//!   at most, and writes the manifest last.
//! - [`ChunkStore::restore`] writes the image beside its destination, holes as holes, every
//!   chunk checked against its hash, then renames it into place: the destination is the
//!   whole image or untouched.
//! - [`ChunkStore::gc`] keeps each volume's newest manifests and deletes the chunks none of
//!   the kept ones name; [`ChunkStore::forget_volume`] drops a volume's manifests.
//!
//! # Opening a store
//!
//! [`StoreConfig::url`] is an absolute path or `file:///abs/dir` (a local directory,
//! created if absent; its writes are fsync'd), or `s3://bucket/prefix`. For S3:
//!
//! - credentials: from [`StoreConfig::credentials_file`] when given, else from
//!   `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` and (temporary keys) `AWS_SESSION_TOKEN`.
//!   The file is `key = value` lines, which a TOML file of strings also is:
//!   `access_key_id = "..."`, `secret_access_key = "..."`, optionally `session_token`
//!   (`aws_` prefixes allowed, `#` comments skipped, other keys refused);
//! - region: `AWS_REGION`, else `us-east-1`;
//! - endpoint: `AWS_ENDPOINT_URL` when set (moto, MinIO, another provider), addressed
//!   path-style, plain `http://` allowed; else AWS itself.
//!
//! [`ChunkStore::open_with_env`] reads those variables through a function instead of the
//! process's environment (tests give a private S3 stand-in that way). Neither errors nor
//! Debug output ever hold a secret. TLS is rustls with ring; see `store.rs`.
//!
//! # Why a GC never deletes a chunk an upload is about to name
//!
//! An upload stores chunks before the manifest that names them, and a GC deletes chunks
//! no manifest names: between the two, an upload's chunks are unnamed. Markers close that
//! gap (`markers.rs`):
//!
//! 1. An upload writes `uploads/<random id>` (holding its times) before any chunk, and
//!    removes it after its manifest is written.
//! 2. A GC writes `gc/<random id>`, then lists `uploads/`. Any live upload marker: the
//!    chunk sweep is skipped this round ([`GcReport::skipped_for_upload`]). Else it lists
//!    the manifests, reads the chunks they name, lists the chunks, deletes the unnamed
//!    ones, and removes its marker.
//! 3. An upload, after writing its marker, lists `gc/` and waits (polling every 200 ms)
//!    until the GC markers it found there are gone; only then does it store chunks.
//!
//! Each side writes its marker, then lists the other's; S3 and local directories list
//! what was written before the listing began. So of an upload and a GC that overlap,
//! whichever lists second sees the other's marker: either the GC skips its sweep, or the
//! upload waits until that GC is over. A GC marker that the upload's listing did not show
//! was written after the upload's marker could be seen, so that GC sees the upload and
//! skips its sweep: the upload need not wait for it (and GCs back to back cannot starve
//! it). A GC that lists manifests after an upload's marker is gone sees that upload's
//! manifest.
//!
//! An upload skips storing a chunk only when `base` (or the upload itself, earlier) names
//! it, never because the store seems to have it: an unnamed chunk may be swept at any
//! moment. The base's chunks survive because the base does: the caller passes the
//! volume's newest manifest, uploads one volume at a time, and runs [`ChunkStore::gc`]
//! keeping 2 or more per volume, so the base is kept throughout the upload (gc refuses 0).
//!
//! A marker not refreshed for [`STALE_MARKER_AFTER`] (an hour) belongs to a process that
//! crashed: it is ignored and deleted, so nothing blocks forever. Owners refresh theirs
//! every 5 minutes; before each refresh, before an upload writes its manifest, and before
//! each batch a GC deletes, the owner checks its marker is still there, and stops with
//! [`ChunkError::MarkerLost`] or [`ChunkError::GcMarkerLost`] if another took it for stale
//! (a process stalled for most of an hour). Staleness is judged by the time in the marker,
//! so clocks may disagree by up to the 55 minutes between a refresh and the limit.
//!
//! # What the caller should know
//!
//! - A restore of a manifest that a GC prunes meanwhile fails ([`ChunkError::Missing`]);
//!   restore a kept generation (the newest ones).
//! - Uploading a generation that exists replaces its manifest (a retry is idempotent).
//! - A manifest that cannot be read makes a GC stop rather than guess what it names.

mod credentials;
mod error;
mod gc;
mod image;
mod keys;
mod location;
mod manifest;
mod markers;
pub mod memory;
mod restore;
mod store;
mod upload;
mod worker;

pub use error::{ChunkError, CorruptChunk, CredentialsProblem, ManifestProblem};
pub use gc::{GcReport, Usage};
pub use keys::check_volume;
pub use location::StoreConfig;
pub use manifest::{ChunkRef, Manifest};
pub use markers::STALE_MARKER_AFTER;
pub use restore::Restored;
pub use store::ChunkStore;
pub use upload::{Progress, Uploaded};

/// The length of every chunk an upload makes (the last of an image may be shorter).
pub const CHUNK_SIZE: u64 = 4 << 20;
