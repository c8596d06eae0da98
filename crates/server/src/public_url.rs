//! berth's own origin as browsers reach it (`berth up --public-url`): pairing links are built
//! on it, and a signed-in browser's requests may come from it (`api/web_origin.rs`).

use std::fmt;
use std::str::FromStr;

/// `scheme://host[:port]`, lowercase, without a default port or a trailing slash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicUrl(String);

#[derive(Debug, thiserror::Error)]
#[error("{value:?} is not an origin: expected http(s)://host[:port], with no path")]
pub struct InvalidPublicUrl {
    value: String,
}

impl FromStr for PublicUrl {
    type Err = InvalidPublicUrl;

    fn from_str(value: &str) -> Result<PublicUrl, InvalidPublicUrl> {
        let invalid = || InvalidPublicUrl {
            value: value.to_owned(),
        };
        let lower = value.trim().to_ascii_lowercase();
        let (scheme, rest) = lower.split_once("://").ok_or_else(invalid)?;
        if scheme != "http" && scheme != "https" {
            return Err(invalid());
        }
        let authority = rest.strip_suffix('/').unwrap_or(rest);
        let authority = authority_without_default_port(scheme, authority);
        let well_formed = !authority.is_empty()
            && authority
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b".-:[]".contains(&b));
        if !well_formed {
            return Err(invalid());
        }
        Ok(PublicUrl(format!("{scheme}://{authority}")))
    }
}

impl fmt::Display for PublicUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl PublicUrl {
    pub fn scheme(&self) -> &str {
        self.0.split_once("://").map_or("", |(s, _)| s)
    }

    pub fn authority(&self) -> &str {
        self.0.split_once("://").map_or("", |(_, a)| a)
    }
}

pub(crate) fn authority_without_default_port<'a>(scheme: &str, authority: &'a str) -> &'a str {
    let default = if scheme == "https" { ":443" } else { ":80" };
    authority.strip_suffix(default).unwrap_or(authority)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn public_urls_are_origins() {
        let url: PublicUrl = "HTTPS://Berth.Example:443/".parse().unwrap();
        assert_eq!(url.to_string(), "https://berth.example");
        assert_eq!(
            "http://10.0.0.2:7070".parse::<PublicUrl>().unwrap().0,
            "http://10.0.0.2:7070"
        );
        for bad in [
            "berth.example",
            "ftp://x",
            "https://x/app",
            "https://",
            "null",
            "https://a b",
        ] {
            assert!(bad.parse::<PublicUrl>().is_err(), "{bad}");
        }
    }
}
