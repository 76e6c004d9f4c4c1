//! driftwatch watches Argo CD `Application` objects, decides when something worth
//! telling a human (or a SIEM) has happened, and delivers a rendered message.
//!
//! # Layout
//!
//! Data flows one way, each stage talking to the next through the plain types of
//! [`model`]:
//!
//! ```text
//! replay/watch -> trigger (rhai) -> state (dedup) -> template (handlebars) -> deliver -> state (record)
//!                      ^ route (subscriptions decide which triggers run for whom)
//! ```
//!
//! - [`config`]: loads `driftwatch.yaml`, trigger and template files (and the built-in
//!   catalog) and compiles them into a [`config::Runtime`]; every error names file, line
//!   and column.
//! - [`model`]: the owned types passed between stages; no I/O.
//! - [`trigger`]: the only module that knows rhai; turns an Application into condition
//!   results.
//! - [`template`]: the only module that knows handlebars; turns a firing into a payload
//!   per destination kind.
//! - [`route`]: subscriptions (Argo CD annotations, AppProjects, config-level
//!   subscriptions with label selectors) and the route tree -> which trigger goes to
//!   which destination; what drifted (`drift`: classes, direction, severity).
//! - [`attribution`]: who changed a drifted resource, from its `managedFields`.
//! - [`episode`]: drift episodes (open, escalate, resolve) as a pure transition.
//! - [`live`]: the daemon's background reads of drifted resources' live objects.
//! - [`state`]: the embedded notification-state store (dedup keys, written only after a
//!   delivery succeeded; the outbox; the drift history and hold-downs).
//! - [`pipeline`]: wires the stages for one Application snapshot.
//! - [`deliver`]: every destination behind a durable outbox — Slack, PagerDuty, e-mail,
//!   webhooks, SIEMs, and the other kinds Argo CD users rely on (GitHub, Teams,
//!   Opsgenie, Alertmanager, ...); the console and a JSON-lines file for previews.
//! - [`replay`]: reads a sequence of Application snapshots from disk.
//! - [`watch`]: the Kubernetes watch of Applications and AppProjects, as `Change`s.
//! - [`daemon`]: `driftwatch run` live — an async shell (watch, leader election via
//!   [`lease`], signals, the operations server of [`admin`] and [`metrics`]) feeding an
//!   evaluation thread that owns the pipeline and the state store.
//! - [`duration`]: durations in Go's syntax (plus days), a leaf every stage may use.
//! - [`import`]: `driftwatch import`, an Argo CD notifications configuration (expr
//!   triggers, Go templates) converted into driftwatch's.
//! - [`secret`]: `$key` references and the redactor that keeps their values out of output.

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
pub mod metrics;
pub mod model;
pub mod pipeline;
pub mod replay;
pub mod route;
pub mod secret;
pub mod source;
pub mod state;
pub mod template;
pub mod tls;
pub mod trigger;
