//! A template's `base`, as written: `host`, `minimal`, `debian`, `debian:<suite>`,
//! `desktop`, `dir:/abs/path` or `tarball:/abs/path.tar[.gz]`.

use std::path::{Path, PathBuf};

use super::Base;

/// Why a `base` string is refused (the template error adds the file and line).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BaseError {
    #[error("`base` {base:?} is not one of \"host\", \"minimal\", \"debian\", \"debian:<suite>\", \"desktop\", \"dir:/abs/path\", \"tarball:/abs/path.tar[.gz]\"")]
    Unknown { base: String },
    #[error("`base` {base:?}: the Debian suite {suite:?} must be lower-case letters, digits and - (e.g. bookworm)")]
    BadSuite { base: String, suite: String },
    #[error(
        "`base` {base:?}: the path must be absolute and plain (no `..`, no trailing /): {rule}"
    )]
    BadPath { base: String, rule: &'static str },
}

/// Parses a `base` string. Checks the form only: whether the directory or tarball exists
/// is checked when a box starts (it may be made after the template).
pub fn parse_base(text: &str) -> Result<Base, BaseError> {
    match text {
        "host" => return Ok(Base::Host),
        "minimal" => return Ok(Base::Minimal),
        "debian" => {
            return Ok(Base::Debian {
                suite: berth_image::DEBIAN_SUITE.into(),
            })
        }
        "desktop" => return Ok(Base::Desktop),
        _ => {}
    }
    if let Some(suite) = text.strip_prefix("debian:") {
        let ok = suite.starts_with(|c: char| c.is_ascii_lowercase())
            && suite.len() <= 64
            && suite
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        if !ok {
            return Err(BaseError::BadSuite {
                base: text.into(),
                suite: suite.into(),
            });
        }
        return Ok(Base::Debian {
            suite: suite.into(),
        });
    }
    if let Some(path) = text.strip_prefix("dir:") {
        return Ok(Base::Dir(plain_path(text, path)?));
    }
    if let Some(path) = text.strip_prefix("tarball:") {
        return Ok(Base::Tarball(plain_path(text, path)?));
    }
    Err(BaseError::Unknown { base: text.into() })
}

fn plain_path(base: &str, path: &str) -> Result<PathBuf, BaseError> {
    let bad = |rule| BaseError::BadPath {
        base: base.into(),
        rule,
    };
    if path.len() > 4096 || path.contains(['\0', '\n']) {
        return Err(bad("one line of at most 4096 bytes"));
    }
    let p = Path::new(path);
    if !p.is_absolute() {
        return Err(bad("it is not absolute"));
    }
    if path.len() > 1 && path.ends_with('/') {
        return Err(bad("it ends with /"));
    }
    // By the text: `Path::components` drops inner `.` segments.
    if path.split('/').any(|c| c == "." || c == "..") {
        return Err(bad("it holds . or .."));
    }
    if p == Path::new("/") {
        return Err(bad("it is /"));
    }
    Ok(p.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_form_parses_and_prints_back() {
        for (text, base) in [
            ("host", Base::Host),
            ("minimal", Base::Minimal),
            (
                "debian",
                Base::Debian {
                    suite: "bookworm".into(),
                },
            ),
            (
                "debian:trixie",
                Base::Debian {
                    suite: "trixie".into(),
                },
            ),
            ("desktop", Base::Desktop),
            ("dir:/srv/root", Base::Dir("/srv/root".into())),
            (
                "tarball:/srv/root.tar.gz",
                Base::Tarball("/srv/root.tar.gz".into()),
            ),
        ] {
            assert_eq!(parse_base(text), Ok(base.clone()), "{text}");
            assert_eq!(base.to_string(), text);
        }
        // `debian:bookworm` is `debian`.
        assert_eq!(parse_base("debian:bookworm").unwrap().to_string(), "debian");
    }

    #[test]
    fn bad_forms_are_refused() {
        for text in ["", "Host", "ubuntu", "debian:", "dir:", "desktop:bookworm"] {
            assert!(parse_base(text).is_err(), "{text}");
        }
        assert!(matches!(
            parse_base("debian:Bookworm"),
            Err(BaseError::BadSuite { .. })
        ));
        assert!(matches!(
            parse_base("debian:--foo"),
            Err(BaseError::BadSuite { .. })
        ));
        for path in [
            "dir:rel/x",
            "dir:/a/../b",
            "tarball:/",
            "dir:/a/",
            "dir:/a/./b",
        ] {
            assert!(
                matches!(parse_base(path), Err(BaseError::BadPath { .. })),
                "{path}"
            );
        }
    }
}
