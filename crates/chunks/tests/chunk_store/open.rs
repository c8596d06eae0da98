//! Opening stores: local directories by path or URL, S3 with credentials from a file or
//! the environment, prefixes kept apart, and no secret in what a store says of itself.

use berth_chunks::{ChunkError, ChunkStore, StoreConfig};
use berth_testkit::moto::Moto;

use crate::support::{ignore_progress, noise, open_moto, sparse_image, CHUNK};

#[test]
fn a_local_directory_is_created_and_described_by_its_url() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("a/b/store");
    let store = ChunkStore::open(&StoreConfig {
        url: format!("file://{}", root.display()),
        credentials_file: None,
    })
    .unwrap();
    assert!(root.is_dir());
    assert_eq!(store.describe(), format!("file://{}", root.display()));
    assert!(format!("{store:?}").contains(&store.describe()));
}

#[test]
fn s3_without_credentials_is_refused_with_what_to_set() {
    let config = StoreConfig {
        url: "s3://bucket/prefix".into(),
        credentials_file: None,
    };
    let err = ChunkStore::open_with_env(&config, &|_| None).unwrap_err();
    assert!(matches!(err, ChunkError::NoCredentials { .. }), "{err}");
    assert!(err.to_string().contains("AWS_ACCESS_KEY_ID"), "{err}");
}

#[test]
fn a_credentials_file_opens_moto_and_nothing_shows_the_secret() {
    let Some(moto) = Moto::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let credentials = dir.path().join("s3.toml");
    let secret = "do-not-print-this-secret";
    std::fs::write(
        &credentials,
        format!("access_key_id = \"berth\"\nsecret_access_key = \"{secret}\"\n"),
    )
    .unwrap();
    // The endpoint only: the keys come from the file.
    let endpoint_only = |name: &str| (name == "AWS_ENDPOINT_URL").then(|| moto.endpoint());
    let store = ChunkStore::open_with_env(
        &StoreConfig {
            url: moto.url("from-file"),
            credentials_file: Some(credentials),
        },
        &endpoint_only,
    )
    .unwrap();
    assert_eq!(
        store.describe(),
        format!("s3://berth-test/from-file at {}", moto.endpoint())
    );
    assert!(!format!("{store:?}").contains(secret));

    tokio::runtime::Runtime::new().unwrap().block_on(async {
        let image = dir.path().join("image");
        sparse_image(&image, CHUNK, &[(0, noise(5, 4096))]);
        let up = store
            .upload("v", 1, &image, None, &ignore_progress)
            .await
            .unwrap();
        assert_eq!(store.latest("v").await.unwrap(), Some(up.manifest));
        // Another prefix of the same bucket is another store.
        let other = open_moto(&moto, "elsewhere", &|name| moto.var(name));
        assert_eq!(other.latest("v").await.unwrap(), None);
        assert_eq!(other.usage().await.unwrap().chunks, 0);
    });
}
