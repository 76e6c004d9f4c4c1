//! driftwatch watches Argo CD `Application` objects, decides when something worth
//! telling a human (or a SIEM) has happened, and delivers a rendered message.
//!
//! # Layout
//!
//! Data flows one way; each layer uses only the layers below it (`tests/layers.rs`
//! fails on any edge upwards):
//!
//! ```text
//! cluster (watch) or replay -> pipeline::pass::run -> Pipeline::evaluate:
//!     drift (what, who, episode) -> route (subscriptions, route tree) -> trigger (rhai)
//!     -> state (dedup, hold-downs) -> template (handlebars) + the kind's encoder (payload per kind)
//! -> state (the pass and its notifications, one transaction) -> deliver (outbox workers)
//! -> state (recorded, noted in the episode; a deleted Application purged)
//! ```
//!
//! From the bottom:
//! - leaves: [`duration`] (Go's syntax plus days), [`clock`] (the pass's instant),
//!   [`exit`], [`tls`], [`secret`] (`$key` references, the redactor), [`metrics`],
//!   [`quote`] (rhai and Go string literals),
//!   [`model`] (the owned types passed between stages); then [`source`] (positions in
//!   configuration files, configured durations);
//! - [`drift`]: typed records of what drifted (classes, direction, severity),
//!   attribution from `managedFields`, and drift episodes; pure;
//! - pure stages: [`trigger`] (the only module that knows rhai), [`template`] (the only
//!   one that knows handlebars), [`route`] (subscriptions, label selectors, the route
//!   tree); and [`state`], the store (redb or PostgreSQL) with one face per role: the
//!   pass's, the outbox's, the history's, chat message references;
//! - [`deliver`]: every destination behind the durable outbox, one folder per kind
//!   (its configuration, its payload encoder, its client);
//! - [`config`]: loads `driftwatch.yaml`, trigger and template files and the built-in
//!   catalog into a [`config::Runtime`], whole or not at all, every error with its
//!   position;
//! - [`pipeline`]: one Application snapshot evaluated, and [`pipeline::pass`], the one
//!   driver of a pass for the daemon and replays; [`replay`] (snapshot files),
//!   [`cluster`] (everything that talks to Kubernetes: client, watch, live reads,
//!   lease) and [`import`] (an Argo CD configuration converted) beside it;
//! - [`daemon`]: `driftwatch run` live — an async shell (watch, leader election,
//!   signals, the operations server) feeding an evaluation thread (`daemon/core/`);
//! - [`cli`]: the commands.

pub mod audit;
pub mod cli;
pub mod clock;
pub mod cluster;
pub mod config;
pub mod daemon;
pub mod deliver;
pub mod drift;
pub mod duration;
pub mod exit;
pub mod import;
pub mod json;
pub mod memory;
pub mod metrics;
pub mod model;
pub mod pipeline;
pub mod project;
pub mod quote;
pub mod replay;
pub mod route;
pub mod secret;
pub mod serve;
pub mod shard;
pub mod source;
pub mod state;
pub mod template;
pub mod text;
pub mod tls;
pub mod trigger;
pub mod unit;
