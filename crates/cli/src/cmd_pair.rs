//! `berth pair`: a one-time link that signs a browser (a phone) in to the web app, printed
//! with its expiry and as a QR code to scan.

use std::io::{IsTerminal as _, Write as _};

use anyhow::Context as _;
use clap::Args;
use http::Method;
use qrcode::{Color, EcLevel, QrCode};
use serde::{Deserialize, Serialize};

use crate::args::parse_duration_s;
use crate::client::Client;

#[derive(Debug, Args)]
pub struct PairArgs {
    /// Sign the browser in as this tenant (name or id; admin key needed). Default: the
    /// API key's tenant.
    #[arg(long, value_name = "T")]
    tenant: Option<String>,
    /// How long the link works: seconds, or 90s, 10m, 1h (10s to 1h). It works once.
    #[arg(long, default_value = "10m", value_parser = parse_duration_s)]
    ttl: u64,
    /// Print the daemon's JSON answer (`code`, `url`, `expires_at`) instead of text.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Serialize)]
struct PairBody<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    tenant: Option<&'a str>,
    ttl_s: u64,
}

#[derive(Debug, Deserialize)]
struct Pairing {
    url: String,
    expires_at: String,
}

pub async fn run(client: &Client, args: PairArgs) -> anyhow::Result<u8> {
    let body = PairBody {
        tenant: args.tenant.as_deref(),
        ttl_s: args.ttl,
    };
    let raw: serde_json::Value = client
        .json(Method::POST, "/v1/web/pairings", Some(&body), "a pairing")
        .await?;
    let mut out = std::io::stdout().lock();
    if args.json {
        crate::output::json(&mut out, &raw)?;
        return Ok(0);
    }
    let pairing: Pairing =
        serde_json::from_value(raw).context("the daemon's answer is not a pairing")?;
    let code = QrCode::with_error_correction_level(pairing.url.as_bytes(), EcLevel::L)
        .context("the link does not fit in a QR code")?;
    let colored = out.is_terminal();
    writeln!(out, "{}", half_blocks(&code, colored))?;
    writeln!(
        out,
        "Open this link on the device to sign in (it works once, until {}):\n{}",
        pairing.expires_at, pairing.url
    )?;
    out.flush().context("writing to stdout")?;
    if only_this_host(&pairing.url) {
        eprintln!(
            "note: this link reaches berth only from this host; for a phone, start berth up \
             with --public-url (and TLS: docs/tls.md)"
        );
    }
    Ok(0)
}

/// Whether the link names a loopback address, which a phone cannot reach.
fn only_this_host(url: &str) -> bool {
    let authority = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = authority.split(['/', '#']).next().unwrap_or("");
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => authority.split(':').next().unwrap_or(""),
    };
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Modules of light around the code: a scanner finds the code's edges by it.
const QUIET_ZONE: usize = 4;

/// The code in Unicode half blocks, two rows of modules per line, dark on light. On a
/// terminal the colours are set (black on white) so a dark theme does not invert it; in a
/// pipe the blocks are the dark modules.
fn half_blocks(code: &QrCode, colored: bool) -> String {
    let width = code.width();
    let colors = code.to_colors();
    let side = width + 2 * QUIET_ZONE;
    let dark = |x: usize, y: usize| {
        let (Some(x), Some(y)) = (x.checked_sub(QUIET_ZONE), y.checked_sub(QUIET_ZONE)) else {
            return false;
        };
        x < width && y < width && colors[y * width + x] == Color::Dark
    };
    let mut text = String::new();
    for y in (0..side).step_by(2) {
        if colored {
            text.push_str("\x1b[30;107m");
        }
        for x in 0..side {
            text.push(match (dark(x, y), dark(x, y + 1)) {
                (true, true) => '█',
                (true, false) => '▀',
                (false, true) => '▄',
                (false, false) => ' ',
            });
        }
        if colored {
            text.push_str("\x1b[0m");
        }
        text.push('\n');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_links_are_told_apart() {
        for url in [
            "http://127.0.0.1:7070/#/pair/bwp_x",
            "https://localhost/#/pair/bwp_x",
            "http://[::1]:7070/#/pair/bwp_x",
        ] {
            assert!(only_this_host(url), "{url}");
        }
        for url in [
            "https://berth.example.com/#/pair/bwp_x",
            "https://192.168.1.20:7443/#/pair/bwp_x",
            "http://[fd00::2]:7070/#/pair/bwp_x",
        ] {
            assert!(!only_this_host(url), "{url}");
        }
    }

    /// Reads the blocks back into modules: what a phone's camera would see.
    fn modules_of(text: &str) -> Vec<Vec<bool>> {
        let mut rows = Vec::new();
        for line in text.lines() {
            let (top, bottom): (Vec<bool>, Vec<bool>) = line
                .chars()
                .map(|c| match c {
                    '█' => (true, true),
                    '▀' => (true, false),
                    '▄' => (false, true),
                    _ => (false, false),
                })
                .unzip();
            rows.push(top);
            rows.push(bottom);
        }
        rows
    }

    #[test]
    fn the_blocks_are_the_codes_modules_inside_a_quiet_zone() {
        let url = "https://berth.example/#/pair/bwp_0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
        let code = QrCode::with_error_correction_level(url, EcLevel::L).unwrap();
        let text = half_blocks(&code, false);
        let modules = modules_of(&text);
        let width = code.width();
        let colors = code.to_colors();
        for (y, row) in modules.iter().enumerate() {
            assert_eq!(row.len(), width + 2 * QUIET_ZONE);
            for (x, &is_dark) in row.iter().enumerate() {
                let inside = (QUIET_ZONE..QUIET_ZONE + width).contains(&x)
                    && (QUIET_ZONE..QUIET_ZONE + width).contains(&y);
                let want =
                    inside && colors[(y - QUIET_ZONE) * width + (x - QUIET_ZONE)] == Color::Dark;
                assert_eq!(is_dark, want, "module ({x}, {y})");
            }
        }
        // Fits an 80-column terminal.
        assert!(width + 2 * QUIET_ZONE <= 80, "{width}");
        let colored = half_blocks(&code, true);
        assert!(colored
            .lines()
            .all(|l| l.starts_with("\x1b[30;107m") && l.ends_with("\x1b[0m")));
    }
}
