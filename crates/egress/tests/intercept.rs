//! TLS interception end to end on loopback: a test CA plays the public CA (trusted upstream
//! through `extra_roots`), a rustls server on 127.0.0.1 plays the API (reached through
//! resolve overrides), and the box is a rustls client over the gateway's Unix socket that
//! trusts its per-box CA. No DNS, no traffic beyond loopback.

#[path = "common/intercept.rs"]
mod fixture;
#[path = "intercept/laundering.rs"]
mod laundering;
#[path = "intercept/secrets.rs"]
mod secrets;
