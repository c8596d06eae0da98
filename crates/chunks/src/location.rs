//! Where a store is: its URL parsed into a local directory or an S3 bucket and prefix, and
//! the S3 settings read from the environment. Nothing here holds a secret: the credentials
//! are read in `open` and handed straight to object_store.

use std::path::{Path, PathBuf};

use crate::ChunkError;

/// What a [`crate::ChunkStore`] opens.
#[derive(Clone)]
pub struct StoreConfig {
    /// An absolute path or `file:///abs/dir` (a local directory, created if absent), or
    /// `s3://bucket/prefix` (the prefix may be empty).
    pub url: String,
    /// For S3: a file with the credentials, used instead of the environment's when given.
    /// Its form is in the crate docs ("Opening a store").
    pub credentials_file: Option<PathBuf>,
}

impl std::fmt::Debug for StoreConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreConfig")
            .field("url", &redact(&self.url))
            .field("credentials_file", &self.credentials_file)
            .finish()
    }
}

/// A parsed store URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Location {
    Local { dir: PathBuf },
    S3 { bucket: String, prefix: String },
}

impl Location {
    pub(crate) fn parse(url: &str) -> Result<Location, ChunkError> {
        let bad = |why| ChunkError::BadUrl {
            url: redact(url),
            why,
        };
        if let Some(rest) = url.strip_prefix("s3://") {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.contains('@') {
                return Err(bad("credentials do not go in the URL"));
            }
            if bucket.is_empty() {
                return Err(bad("it names no bucket"));
            }
            let prefix = prefix.trim_matches('/');
            if prefix.split('/').any(|part| part == "." || part == "..") || prefix.contains("//") {
                return Err(bad("its prefix has an empty, `.` or `..` part"));
            }
            return Ok(Location::S3 {
                bucket: bucket.to_owned(),
                prefix: prefix.to_owned(),
            });
        }
        let path = match url.strip_prefix("file://") {
            Some(rest) if rest.starts_with('/') => berth_basics::percent_decode(rest),
            Some(_) => return Err(bad("a file URL names a host; use file:///abs/dir")),
            None if url.starts_with('/') => url.to_owned(),
            None if url.contains("://") => return Err(bad("only file:// and s3:// are known")),
            None => return Err(bad("a local directory must be an absolute path")),
        };
        let dir = PathBuf::from(path);
        if dir
            .components()
            .any(|c| c == std::path::Component::ParentDir)
        {
            return Err(bad("its path has a `..` part"));
        }
        Ok(Location::Local { dir })
    }

    /// The location for logs and errors: `file:///dir` or `s3://bucket/prefix`.
    pub(crate) fn url(&self) -> String {
        match self {
            Location::Local { dir } => format!("file://{}", dir.display()),
            Location::S3 { bucket, prefix } if prefix.is_empty() => format!("s3://{bucket}"),
            Location::S3 { bucket, prefix } => format!("s3://{bucket}/{prefix}"),
        }
    }

    pub(crate) fn local_dir(&self) -> Option<&Path> {
        match self {
            Location::Local { dir } => Some(dir),
            Location::S3 { .. } => None,
        }
    }
}

/// The S3 settings read from the environment (`AWS_*`), or from a lookup a test gives.
pub(crate) struct S3Settings {
    pub(crate) region: String,
    /// `AWS_ENDPOINT_URL`: a stand-in (moto, MinIO) or another provider, addressed
    /// path-style (`endpoint/bucket/key`), plain http allowed.
    pub(crate) endpoint: Option<String>,
}

/// The region when `AWS_REGION` is unset.
const DEFAULT_REGION: &str = "us-east-1";

impl S3Settings {
    pub(crate) fn read(env: &dyn Fn(&str) -> Option<String>) -> Result<S3Settings, ChunkError> {
        let set = |name: &str| env(name).filter(|value| !value.is_empty());
        let endpoint = set("AWS_ENDPOINT_URL")
            .map(|url| url.trim_end_matches('/').to_owned())
            .map(|url| check_endpoint(&url).map(|()| url))
            .transpose()?;
        Ok(S3Settings {
            region: set("AWS_REGION").unwrap_or_else(|| DEFAULT_REGION.to_owned()),
            endpoint,
        })
    }
}

fn check_endpoint(url: &str) -> Result<(), ChunkError> {
    let bad = |why| Err(ChunkError::BadEndpoint { why });
    let Some(rest) = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
    else {
        return bad("it is not an http:// or https:// URL");
    };
    let authority = rest.split('/').next().unwrap_or_default();
    if authority.contains('@') {
        return bad("credentials do not go in the URL");
    }
    if authority.is_empty() {
        return bad("it names no host");
    }
    Ok(())
}

/// `url` with any `user:password@` replaced, for errors and Debug output.
pub(crate) fn redact(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) if !scheme.is_empty() => format!("{scheme}://<redacted>@{}", &rest[at + 1..]),
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_name_a_directory_or_a_bucket_and_prefix() {
        let local = |dir: &str| Location::Local { dir: dir.into() };
        let s3 = |bucket: &str, prefix: &str| Location::S3 {
            bucket: bucket.into(),
            prefix: prefix.into(),
        };
        assert_eq!(
            Location::parse("/srv/chunks").unwrap(),
            local("/srv/chunks")
        );
        assert_eq!(
            Location::parse("file:///srv/my%20chunks").unwrap(),
            local("/srv/my chunks")
        );
        assert_eq!(Location::parse("s3://b").unwrap(), s3("b", ""));
        assert_eq!(Location::parse("s3://b/").unwrap(), s3("b", ""));
        assert_eq!(Location::parse("s3://b/x/y/").unwrap(), s3("b", "x/y"));
        assert_eq!(s3("b", "x/y").url(), "s3://b/x/y");
        assert_eq!(s3("b", "").url(), "s3://b");
        assert_eq!(local("/srv/c").url(), "file:///srv/c");
    }

    #[test]
    fn other_urls_are_refused_without_echoing_credentials() {
        for url in [
            "relative/dir",
            "file://host/dir",
            "gs://bucket",
            "s3://",
            "s3:///prefix",
            "s3://b/x/../y",
            "s3://b/x//y",
            "/srv/../etc",
            "s3://AKIAEXAMPLE:hunter2@bucket/p",
        ] {
            let err = Location::parse(url).unwrap_err();
            assert!(matches!(err, ChunkError::BadUrl { .. }), "{url}: {err}");
            assert!(!err.to_string().contains("hunter2"), "{err}");
        }
        let config = StoreConfig {
            url: "s3://AKIAEXAMPLE:hunter2@bucket/p".into(),
            credentials_file: None,
        };
        let debug = format!("{config:?}");
        assert!(
            !debug.contains("hunter2") && debug.contains("bucket/p"),
            "{debug}"
        );
    }

    #[test]
    fn s3_settings_come_from_the_environment_with_defaults() {
        let none = S3Settings::read(&|_| None).unwrap();
        assert_eq!(none.region, "us-east-1");
        assert_eq!(none.endpoint, None);
        let env = |name: &str| match name {
            "AWS_REGION" => Some("eu-west-3".to_owned()),
            "AWS_ENDPOINT_URL" => Some("http://127.0.0.1:9000/".to_owned()),
            _ => None,
        };
        let set = S3Settings::read(&env).unwrap();
        assert_eq!(set.region, "eu-west-3");
        assert_eq!(set.endpoint.as_deref(), Some("http://127.0.0.1:9000"));
        for endpoint in ["127.0.0.1:9000", "http://k:secret@h", "https://"] {
            let env = |name: &str| (name == "AWS_ENDPOINT_URL").then(|| endpoint.to_owned());
            let err = S3Settings::read(&env).err().unwrap();
            assert!(
                matches!(err, ChunkError::BadEndpoint { .. }),
                "{endpoint}: {err}"
            );
            assert!(!err.to_string().contains("secret"), "{err}");
        }
    }
}
