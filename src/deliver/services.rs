//! Service configuration as written under `services:` in `driftwatch.yaml`, and the
//! step that turns a validated configuration into running delivery clients. What each
//! kind reads and builds is the kind's own (`deliver::kinds`); secret values are `$key`
//! references, resolved only when a client is built.

use serde_json::Value;

use super::deliverer::ServiceRuntime;
use super::env::Env;
use super::kind::{self, BuildError, SettingsError};
pub use super::kinds::ServiceConfig;
use super::outcome::DeliverySettings;
use crate::model::DestinationKind;

/// A service's configuration: its kind's settings and the common ones.
#[derive(Debug, Clone, PartialEq)]
pub struct ServiceSpec {
    pub config: ServiceConfig,
    pub settings: DeliverySettings,
}

impl ServiceSpec {
    /// Builds the typed configuration of `kind` from the YAML mapping (without `type`).
    pub fn from_value(kind: DestinationKind, v: Value) -> Result<ServiceSpec, SettingsError> {
        let (rest, settings) = kind::split_common(v, super::kinds::limits(kind))?;
        Ok(ServiceSpec { config: ServiceConfig::parse(kind, rest)?, settings })
    }
}

/// Builds the client of one service; errors name what is missing (an unset secret, an
/// unreadable CA file), never a secret value.
pub fn build(name: &str, spec: &ServiceSpec, env: &Env) -> Result<ServiceRuntime, BuildError> {
    let deliverer = spec.config.client(name, env)?;
    Ok(kind::assemble(name, spec.config.kind(), deliverer, spec.settings, &spec.config.strings(), env))
}
