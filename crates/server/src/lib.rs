//! The berth daemon: the public HTTP API (docs/api.md) and the box lifecycle.
//!
//! - [`api`]: routes and thin handlers (parse, authorize, call one operation);
//!   `api/error.rs` is the one place errors become HTTP.
//! - [`ops`]: typed operations, one per verb, knowing nothing about HTTP.
//! - [`boxes`]: in-memory per-box state (lifecycle lock, the current guest client).
//! - [`pumps`]: per-running-box tasks: message delivery and event ingestion.
//! - [`server`]: start (store, admin key, reconcile, listen) and shutdown.
//! - [`metrics`]: what `/metrics` shows Prometheus.

pub mod admission;
pub mod api;
pub mod backup;
pub mod box_env;
pub mod box_labels;
pub mod boxes;
pub mod cluster;
pub mod config;
pub mod ctx;
pub mod data_dir_lock;
pub mod desktop;
pub mod disk_space;
pub mod dns_label;
pub mod durable;
pub mod e2b;
pub mod egress;
pub mod error;
pub mod host_config;
pub mod images;
pub mod lifecycle;
pub mod memory;
pub mod metrics;
pub mod ops;
pub mod outbound;
pub mod ports;
pub mod public_url;
pub mod pumps;
pub mod push;
pub mod rfb_input;
pub mod runtimes;
pub mod secrets;
pub mod server;
pub mod stream_limits;
pub mod templates;
pub mod tls;
pub mod validate;
pub mod webhooks;

pub use config::{ServerConfig, ADMIN_KEY_FILE, URL_FILE};
pub use error::{OpError, ServerError};
pub use host_config::{HostConfig, HostConfigError};
pub use runtimes::{RuntimeEntry, Runtimes};
pub use server::{run, Server};
