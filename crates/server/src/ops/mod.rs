//! Typed operations, one per verb. They take a [`Ctx`] and typed input and know nothing
//! about HTTP.
//!
//! Waking, stopping and putting boxes to sleep are not here: they belong to the box's
//! lifecycle owner (`crate::lifecycle::Lifecycle`).

pub mod box_create;
pub mod box_delete;
pub mod box_disk;
pub mod box_find;
pub mod box_move;
pub mod box_update;
pub mod desktop;
pub mod desktop_vnc;
pub mod events_read;
pub mod exec;
pub mod files;
pub mod files_archive;
pub mod files_watch;
pub mod memory_read;
pub mod message_list;
pub mod message_post;
pub mod port_connect;
pub mod port_links;
pub mod port_proxy;
pub mod process;
pub mod reconcile;
pub mod secrets;
pub mod service;
pub mod tenant_choice;
pub mod tenant_create;
pub mod tenant_keys;
pub mod tenant_update;
pub mod terminal;
pub mod wakeups;
pub mod web_sessions;
