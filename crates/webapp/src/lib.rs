//! berth's web app (`web/`), built from source by this crate's build script and embedded in
//! the binary, so `berth up` serves it with no other process (docs/webapp.md).

/// One file of the built app.
#[derive(Debug)]
pub struct WebFile {
    pub bytes: &'static [u8],
    /// The same bytes gzipped, when that is smaller.
    pub gzip: Option<&'static [u8]>,
    pub content_type: &'static str,
    /// Hashed names (`assets/…`) never change content: cache them for good.
    pub immutable: bool,
    /// A strong ETag, quotes included.
    pub etag: &'static str,
}

include!(concat!(env!("OUT_DIR"), "/files.rs"));

/// The file at `path` (relative, no leading `/`: `index.html`, `assets/app-….js`).
pub fn file(path: &str) -> Option<&'static WebFile> {
    FILES.iter().find(|(p, _)| *p == path).map(|(_, f)| f)
}

/// Every file, for listings and tests.
pub fn files() -> impl Iterator<Item = (&'static str, &'static WebFile)> {
    FILES.iter().map(|(p, f)| (*p, f))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shell_is_embedded_and_references_hashed_assets() {
        let index = std::str::from_utf8(file("index.html").unwrap().bytes).unwrap();
        let js = files().find(|(p, _)| p.starts_with("assets/app-") && p.ends_with(".js"));
        let (js_path, js_file) = js.expect("an app bundle");
        assert!(index.contains(&format!("/{js_path}")), "{index}");
        assert!(js_file.immutable && !file("index.html").unwrap().immutable);
        assert!(file("sw.js").is_some() && file("manifest.webmanifest").is_some());
        assert_eq!(
            file("icons/icon-512.png").unwrap().content_type,
            "image/png"
        );
        assert!(file("nope.js").is_none());
    }
}
