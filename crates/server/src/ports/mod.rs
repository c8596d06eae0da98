//! A box's ports, reached through berth (docs/api.md, "Ports"): the HTTP/WebSocket proxy
//! over the guest channel, the `[ports]` settings and `base_domain` host names (and the
//! warning when they share a site with berth's own host), and berth's cookies kept from
//! apps. The handlers are in `api/ports.rs`, the operations in
//! `ops/port_connect.rs` and `ops/port_links.rs`.

pub mod config;
pub mod cookie;
pub mod dial;
pub mod host;
pub mod pool;
pub mod proxy;
pub mod shared_site;
