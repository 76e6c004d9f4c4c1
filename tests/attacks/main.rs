//! The attack corpus (issue 52, reviews `security-2026-12` and `security-2026-12b`):
//! what the person driftwatch watches can write — the object, its annotations, its
//! field manager, the Application, the audit ID, the requests to driftwatch's own
//! ports — one test per attack, each saying who writes what, in which order, and the
//! page or refusal expected. Each row failed before its fix.
//!
//! Rows that need a real API server (etcd and kube-apiserver from
//! `KUBEBUILDER_ASSETS`) sit in a module `on_a_real_api_server`, so that
//! `scripts/test.sh` can leave them out, and say so, where the binaries are missing.

#[path = "../common/mod.rs"]
mod common;

mod annotations;
mod app_writes;
mod audit_identity;
mod break_glass;
mod desired_state;
mod flux_fleet;
mod listeners;
mod masking;
mod patch_forms;
mod project;
