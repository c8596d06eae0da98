//! The store handle: opening a local directory or an S3 bucket through object_store, and
//! the few object operations the rest of the crate uses, each turning object_store's
//! error into a [`ChunkError::Backend`] that names the operation and the key.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::stream::BoxStream;
use futures_util::TryStreamExt as _;
use object_store::aws::AmazonS3Builder;
use object_store::local::LocalFileSystem;
use object_store::path::Path as Key;
use object_store::prefix::PrefixStore;
use object_store::{ClientOptions, ObjectMeta, ObjectStore, ObjectStoreExt as _, PutPayload};

use crate::credentials::S3Credentials;
use crate::location::{Location, S3Settings, StoreConfig};
use crate::ChunkError;

/// How long one request may take: a 4 MiB chunk over a slow uplink needs more than
/// object_store's 30 s default.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

/// A content-addressed store of volume images. Cheap to clone: all clones share one
/// connection pool.
#[derive(Clone)]
pub struct ChunkStore {
    inner: Arc<Inner>,
}

struct Inner {
    objects: Arc<dyn ObjectStore>,
    location: Location,
    /// Where an S3 store is reached, for [`ChunkStore::describe`].
    endpoint: Option<String>,
}

impl std::fmt::Debug for ChunkStore {
    /// The location only: object_store's own Debug of an S3 client shows its credentials.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("ChunkStore").field(&self.describe()).finish()
    }
}

impl ChunkStore {
    /// Opens the store `config` names; S3 settings and credentials come from the process's
    /// environment (see the crate docs).
    pub fn open(config: &StoreConfig) -> Result<ChunkStore, ChunkError> {
        ChunkStore::open_with_env(config, &|name| std::env::var(name).ok())
    }

    /// [`ChunkStore::open`] with the `AWS_*` variables looked up through `env` instead of
    /// the process's environment: for a caller (a test against a private S3 stand-in, say)
    /// that must not set process-wide variables.
    pub fn open_with_env(
        config: &StoreConfig,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<ChunkStore, ChunkError> {
        let location = Location::parse(&config.url)?;
        let (objects, endpoint): (Arc<dyn ObjectStore>, _) = match &location {
            Location::Local { dir } => (open_local(dir, &location)?, None),
            Location::S3 { bucket, prefix } => {
                let settings = S3Settings::read(env)?;
                let credentials = S3Credentials::find(config.credentials_file.as_deref(), env)?
                    .ok_or_else(|| ChunkError::NoCredentials {
                        location: location.url(),
                    })?;
                let endpoint = settings.endpoint.clone();
                let s3 = open_s3(bucket, prefix, settings, credentials, &location)?;
                (s3, endpoint)
            }
        };
        Ok(ChunkStore {
            inner: Arc::new(Inner {
                objects,
                location,
                endpoint,
            }),
        })
    }

    /// The store's location for logs and errors, without credentials:
    /// `file:///dir`, `s3://bucket/prefix`, or `s3://bucket/prefix at http://endpoint`.
    pub fn describe(&self) -> String {
        match &self.inner.endpoint {
            Some(endpoint) => format!("{} at {endpoint}", self.inner.location.url()),
            None => self.inner.location.url(),
        }
    }

    pub(crate) fn location(&self) -> &Location {
        &self.inner.location
    }

    pub(crate) async fn put(
        &self,
        op: &'static str,
        key: &str,
        body: Bytes,
    ) -> Result<(), ChunkError> {
        self.inner
            .objects
            .put(&Key::from(key), PutPayload::from(body))
            .await
            .map(drop)
            .map_err(backend(op, key))
    }

    /// The object at `key`, None when there is none; `limit` bounds what is read into
    /// memory (an object larger than it is an error for the caller to name, so it is
    /// returned as its size alone).
    pub(crate) async fn get(
        &self,
        op: &'static str,
        key: &str,
        limit: u64,
    ) -> Result<Option<Fetched>, ChunkError> {
        let got = match self.inner.objects.get(&Key::from(key)).await {
            Ok(got) => got,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(backend(op, key)(e)),
        };
        if got.meta.size > limit {
            return Ok(Some(Fetched::TooLarge(got.meta.size)));
        }
        match got.bytes().await {
            Ok(bytes) => Ok(Some(Fetched::Bytes(bytes))),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(backend(op, key)(e)),
        }
    }

    /// Whether an object is at `key`.
    pub(crate) async fn exists(&self, op: &'static str, key: &str) -> Result<bool, ChunkError> {
        match self.inner.objects.head(&Key::from(key)).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(backend(op, key)(e)),
        }
    }

    /// Deletes `key`; one already gone is no error.
    pub(crate) async fn delete(&self, op: &'static str, key: &str) -> Result<(), ChunkError> {
        match self.inner.objects.delete(&Key::from(key)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(backend(op, key)(e)),
        }
    }

    /// Deletes `keys` in batches (S3's DeleteObjects); ones already gone are no error.
    pub(crate) async fn delete_all(
        &self,
        op: &'static str,
        keys: Vec<Key>,
    ) -> Result<(), ChunkError> {
        let first = keys.first().map(|k| k.to_string()).unwrap_or_default();
        let input: BoxStream<'static, object_store::Result<Key>> =
            Box::pin(futures_util::stream::iter(keys.into_iter().map(Ok)));
        let mut results = self.inner.objects.delete_stream(input);
        while let Some(result) = futures_util::StreamExt::next(&mut results).await {
            match result {
                Ok(_) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(backend(op, &first)(e)),
            }
        }
        Ok(())
    }

    /// Every object under `prefix` (a whole path segment), in no particular order.
    pub(crate) async fn list(
        &self,
        op: &'static str,
        prefix: &str,
    ) -> Result<Vec<ObjectMeta>, ChunkError> {
        self.inner
            .objects
            .list(Some(&Key::from(prefix)))
            .try_collect()
            .await
            .map_err(backend(op, prefix))
    }
}

impl ChunkStore {
    /// Every object under `prefix`, as the listing pages in: for listings too long to hold.
    pub(crate) fn list_stream(
        &self,
        op: &'static str,
        prefix: &str,
    ) -> BoxStream<'static, Result<ObjectMeta, ChunkError>> {
        let prefix_key = prefix.to_owned();
        Box::pin(
            self.inner
                .objects
                .list(Some(&Key::from(prefix)))
                .map_err(move |source| backend(op, &prefix_key)(source)),
        )
    }
}

/// What [`ChunkStore::get`] found.
pub(crate) enum Fetched {
    Bytes(Bytes),
    TooLarge(u64),
}

fn backend(op: &'static str, key: &str) -> impl FnOnce(object_store::Error) -> ChunkError {
    let key = key.to_owned();
    move |source| ChunkError::Backend { op, key, source }
}

/// A local directory, created if absent. Writes are fsync'd (file and directory) before
/// they return, as S3's are durable when they return.
fn open_local(
    dir: &std::path::Path,
    location: &Location,
) -> Result<Arc<dyn ObjectStore>, ChunkError> {
    std::fs::create_dir_all(dir).map_err(|source| ChunkError::Io {
        action: "create the chunk store's directory",
        path: dir.to_owned(),
        source,
    })?;
    let local = LocalFileSystem::new_with_prefix(dir).map_err(|source| ChunkError::Open {
        location: location.url(),
        source,
    })?;
    Ok(Arc::new(local.with_fsync(true)))
}

fn open_s3(
    bucket: &str,
    prefix: &str,
    settings: S3Settings,
    credentials: S3Credentials,
    location: &Location,
) -> Result<Arc<dyn ObjectStore>, ChunkError> {
    install_tls_provider();
    let mut builder = AmazonS3Builder::new()
        .with_bucket_name(bucket)
        .with_region(settings.region)
        .with_access_key_id(credentials.access_key_id)
        .with_secret_access_key(credentials.secret_access_key)
        .with_client_options(ClientOptions::new().with_timeout(REQUEST_TIMEOUT));
    if let Some(token) = credentials.session_token {
        builder = builder.with_token(token);
    }
    if let Some(endpoint) = settings.endpoint {
        builder = builder
            .with_allow_http(endpoint.starts_with("http://"))
            .with_virtual_hosted_style_request(false)
            .with_endpoint(endpoint);
    }
    let s3 = builder.build().map_err(|source| ChunkError::Open {
        location: location.url(),
        source,
    })?;
    Ok(if prefix.is_empty() {
        Arc::new(s3)
    } else {
        Arc::new(PrefixStore::new(s3, prefix))
    })
}

/// reqwest's rustls is built here without a crypto provider of its own (berth uses ring
/// everywhere; reqwest's default would add aws-lc), and it takes the process's default:
/// ring's, unless the process installed one already.
fn install_tls_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Err means another thread installed one meanwhile, which serves as well.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}
