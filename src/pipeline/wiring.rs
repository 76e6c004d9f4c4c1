//! Wiring a loaded configuration to the running parts: its services' clients (on the
//! shared HTTP client, the state store, its secrets) and each template field bound to
//! the destination kind's encoder. `config/` only parses and validates; what runs is
//! built here, on the layer that drives passes.

use std::sync::Arc;

use crate::config::Runtime;
use crate::deliver::ServiceRuntime;
use crate::deliver::env::Env;
use crate::deliver::kind::BuildError;
use crate::model::App;
use crate::state::Store;
use crate::template::{RenderContext, RenderError, Rendered, Target};

/// What the services' clients share: the HTTP client, the state store (message
/// references), the secrets and the template context.
pub fn delivery_env(rt: &Runtime, state: &Arc<Store>) -> Result<Env, BuildError> {
    Ok(Env {
        http: crate::deliver::http::client(None, false).map_err(|e| BuildError::Http(e.to_string()))?,
        refs: state.message_refs(),
        secrets: rt.secrets.clone(),
        context: rt.context.clone(),
    })
}

/// Every configured service's client, or why not: every missing secret (with where it
/// was looked for), else the first client that fails to build. The daemon's start-up,
/// leading and reloads and `run --replay --deliver` all go through here, so they refuse
/// the same things in the same words.
pub fn service_clients(rt: &Runtime, state: &Arc<Store>) -> Result<Vec<ServiceRuntime>, Vec<String>> {
    if !rt.missing_secrets.is_empty() {
        return Err(rt.missing_secrets.clone());
    }
    let env = delivery_env(rt, state).map_err(|e| vec![e.to_string()])?;
    rt.services
        .values()
        .map(|s| crate::deliver::services::build(&s.name, &s.spec, &env).map_err(|e| vec![format!("service {}: {e}", s.name)]))
        .collect()
}

/// Renders template `name` for `target`'s destination, its payload shaped by the
/// destination kind's encoder.
pub fn render(rt: &Runtime, name: &str, ctx: &mut RenderContext, target: &Target<'_>, app: &App) -> Result<Rendered, RenderError> {
    rt.templates.render(name, ctx, target, app, crate::deliver::kinds::encoder(target.kind))
}
