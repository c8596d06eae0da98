//! Where tests keep the VM images they build: one directory per machine, shared by every test
//! binary and run (the images are content-addressed, so builds of different berth versions
//! never clash and each image is built once).

use std::path::PathBuf;

/// The variable that moves the cache.
pub const DIR_VAR: &str = "BERTH_TEST_IMAGE_DIR";

/// `$BERTH_TEST_IMAGE_DIR`, else `/var/tmp/berth-test-images` (kept across reboots). A
/// data dir of its own: `berth_image::ImageStore::new(&dir())` keeps its images in `images/`.
pub fn dir() -> PathBuf {
    std::env::var_os(DIR_VAR)
        .map(PathBuf::from)
        .unwrap_or_else(|| "/var/tmp/berth-test-images".into())
}
