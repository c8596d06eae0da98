//! The egress benchmark's parts: a TLS upstream on loopback with a test CA, the paths a client
//! can take to it (direct, the gateway, the gateway behind a box-side TCP hop, nginx with
//! `ssl_preread`), and the client that times connection setup and bulk transfers.

pub mod client;
pub mod gateway;
pub mod nginx;
pub mod runtime;
pub mod tls;
pub mod upstream;

/// The name the client puts in its SNI and the upstream's certificate carries.
pub const HOST: &str = "bench.example.test";
