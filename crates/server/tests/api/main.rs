//! The daemon over real HTTP: started in-process on 127.0.0.1:0 with a temporary data dir.
//!
//! - `requests`: everything that needs no box (auth, validation, limits, tenancy), with a
//!   runtime that cannot start anything: passes on any host.
//! - `lifecycle`: wake, exec, files, stop, reconcile and shutdown against a fake runtime
//!   whose "boxes" are in-process fake agents on Unix sockets (no root needed).
//! - `end_to_end`: the real sandbox runtime (runc) and berth-init; skips (part `sandbox`)
//!   when the host cannot run it.
//!
//! Every server's guard stops and deletes the OCI containers of its data dir on drop, even
//! when the test panics.

mod box_record;
mod box_record_e2e;
mod box_wakeup_limits;
mod computer_use;
mod connection_admission;
mod desktop_vnc;
mod disk_full;
mod e2b_control;
mod e2b_envd_files;
mod e2b_envd_process;
mod e2b_hosts;
mod e2b_lifetime;
mod e2b_list;
mod e2b_refusals;
mod egress_policy;
mod end_to_end;
mod event_limits;
mod fake;
mod fake_agent;
mod files_dirs;
mod harness;
mod idle;
mod isolation;
mod key_sessions;
mod lifecycle;
mod messages;
mod metrics;
mod port_cookies;
mod ports;
mod ports_faults;
mod ports_handoff;
mod ports_links;
mod processes;
mod prometheus_text;
mod push;
mod push_faults;
mod push_fixtures;
mod requests;
mod runtimes;
mod secrets;
mod server_limits;
mod services;
mod sleep_ladder;
mod snapshots;
mod sse;
mod stream_budget;
mod talk;
mod templates;
mod tenant_keys;
mod tenant_quotas;
mod tenants;
mod terminals;
mod tls;
mod tls_acme;
mod transitions;
mod turns;
mod wakeups;
mod warm_pool;
mod web_session_cookies;
mod web_session_fixtures;
mod web_sessions;
mod webapp;
mod webhooks;
