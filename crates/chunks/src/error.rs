//! What can go wrong, one variant per cause, each saying what to do next where it can.
//! Sources are chained, not repeated in the message: print the chain once. The detail
//! enums ([`ManifestProblem`], [`CorruptChunk`], [`CredentialsProblem`]) are part of their
//! variant's message instead, so a caller can match on them.
//!
//! No variant ever holds a secret: URLs are redacted before they are stored here, the
//! credentials file is named by its path only, and a bad line in it by its number.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum ChunkError {
    /// The store's URL is not one this crate opens.
    #[error("cannot use {url:?} as a chunk store: {why}; give an absolute path, file:///abs/dir or s3://bucket/prefix")]
    BadUrl { url: String, why: &'static str },

    /// `AWS_ENDPOINT_URL` is not one this crate connects to.
    #[error("cannot use the S3 endpoint of AWS_ENDPOINT_URL: {why}")]
    BadEndpoint { why: &'static str },

    /// An S3 store with neither credentials file nor credentials in the environment.
    #[error("no S3 credentials for {location}: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or name a credentials file")]
    NoCredentials { location: String },

    /// The credentials file is unreadable or not of the documented form.
    #[error("the S3 credentials file {} is not usable: {problem}", path.display())]
    CredentialsFile {
        path: PathBuf,
        problem: CredentialsProblem,
    },

    /// object_store refused the configuration.
    #[error("cannot open the chunk store {location}")]
    Open {
        location: String,
        #[source]
        source: object_store::Error,
    },

    /// A request to the store failed (after object_store's own retries).
    #[error("cannot {op} {key} in the chunk store; check that the store is reachable and writable, then retry")]
    Backend {
        op: &'static str,
        key: String,
        #[source]
        source: object_store::Error,
    },

    #[error("volume {volume:?} has no manifest of generation {generation}; list what it has with latest()")]
    NoManifest { volume: String, generation: u64 },

    #[error(
        "the manifest {key} is unusable: {reason}; delete it, or upload that generation again"
    )]
    BadManifest {
        key: String,
        reason: ManifestProblem,
    },

    /// A volume name that is not a plain name (the keys are built from it).
    #[error("{volume:?} is not a volume name: {why}")]
    BadVolume { volume: String, why: &'static str },

    #[error("chunk {index} ({hash}) of volume {volume} generation {generation} is corrupt: {why}; restore another generation, or upload the volume again without a base to store the chunk anew")]
    Corrupt {
        volume: String,
        generation: u64,
        index: u64,
        hash: String,
        why: CorruptChunk,
    },

    #[error("chunk {index} ({hash}) of volume {volume} generation {generation} is missing from the store; restore another generation, or upload the volume again without a base to store the chunk anew")]
    Missing {
        volume: String,
        generation: u64,
        index: u64,
        hash: String,
    },

    #[error("cannot {action} {}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// gc(0) would delete every manifest: forgetting volumes is forget_volume's job.
    #[error("gc keeps at least one manifest per volume (2 or more lets an upload's base survive); call forget_volume to drop a volume")]
    KeepNone,

    /// A GC took this upload's marker for a crashed upload's (it was not refreshed for
    /// [`crate::STALE_MARKER_AFTER`]), so it may have swept chunks this upload wrote.
    #[error("the upload of volume {volume} generation {generation} lost its marker {key} (it stalled past the stale limit, and a GC may have swept its chunks); no manifest was written: upload again")]
    MarkerLost {
        volume: String,
        generation: u64,
        key: String,
    },

    /// An upload took this GC's marker for a crashed GC's (it was not refreshed for
    /// [`crate::STALE_MARKER_AFTER`]) and may be storing chunks: the GC stopped deleting.
    #[error("this GC stalled past the stale limit and lost its marker {key}; it stopped before deleting more: run it again")]
    GcMarkerLost { key: String },

    /// A memory snapshot's object or record is missing or damaged.
    #[error("the memory object {key} is unusable: {why}; take a new snapshot, or restore another")]
    MemoryObject { key: String, why: &'static str },

    /// A backup's memory history is not whole, or not what its names say.
    #[error("the memory history is unusable: {0}")]
    HistoryImport(String),

    /// What a snapshot was given is not a tree of memory files.
    #[error("cannot take a memory snapshot: {0}")]
    MemoryInput(String),

    /// A worker thread of an upload or restore panicked or was cancelled.
    #[error("a worker thread failed while trying to {action}")]
    Worker {
        action: &'static str,
        #[source]
        source: tokio::task::JoinError,
    },
}

/// Why a credentials file is not usable. Never holds a value read from the file.
#[derive(Debug, thiserror::Error)]
pub enum CredentialsProblem {
    #[error("cannot read it ({0})")]
    Unreadable(std::io::Error),
    #[error("line {line} is not `key = value`")]
    NotKeyValue { line: usize },
    #[error("line {line} sets an unknown key {key:?} (known: access_key_id, secret_access_key, session_token)")]
    UnknownKey { line: usize, key: String },
    #[error("it sets no {key}")]
    Lacks { key: &'static str },
}

/// Why a manifest cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ManifestProblem {
    #[error("it is not a manifest's JSON ({0})")]
    NotJson(serde_json::Error),
    #[error("it is {bytes} bytes, more than a manifest's limit of {limit}")]
    TooLarge { bytes: u64, limit: u64 },
    #[error("it names volume {found:?}, not the one of its key")]
    WrongVolume { found: String },
    #[error("it names generation {found}, not the one of its key")]
    WrongGeneration { found: u64 },
    #[error("its chunk size {chunk_size} is outside 1..={limit}")]
    BadChunkSize { chunk_size: u64, limit: u64 },
    #[error("it lists {found} chunks where its size needs {expected}")]
    ChunkCount { found: u64, expected: u64 },
    #[error("chunk {index} has {hash:?}, not a lowercase hex sha256")]
    BadHash { index: u64, hash: String },
}

/// How a stored chunk differs from what its manifest names.
#[derive(Debug, thiserror::Error)]
pub enum CorruptChunk {
    #[error("it is not zstd, or holds more than the chunk's {expected} bytes ({zstd})")]
    NotZstd { expected: u64, zstd: std::io::Error },
    #[error("it is stored as {found} bytes, more than zstd ever makes of a chunk ({limit})")]
    Oversized { found: u64, limit: u64 },
    #[error("it holds {found} bytes, not the chunk's {expected}")]
    WrongLength { found: u64, expected: u64 },
    #[error("its bytes hash to {found}")]
    HashMismatch { found: String },
}
