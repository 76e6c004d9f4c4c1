//! The console: each notification printed as one JSON line on stdout (replays, trying
//! a configuration out). No settings but the common ones.

mod client;

pub use client::ConsoleDeliverer;

use std::sync::Arc;

use serde_json::Value;

use crate::deliver::env::Env;
use crate::deliver::kind::{BuildError, Kind, Limits, SettingsError};
use crate::deliver::Deliverer;
use crate::model::{App, DestinationKind};
use crate::template::{Fields, Payload, Target};

/// The console has no settings of its own.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
pub struct ConsoleConfig;

/// The console kind.
pub struct Console;

impl Kind for Console {
    const KIND: DestinationKind = DestinationKind::Console;
    type Config = ConsoleConfig;
    // One ordered stream, as fast as stdout takes it.
    const LIMITS: Limits = Limits { per_second: 1000.0, burst: 1000, concurrency: 1 };
    const ENCODE: crate::template::Encoder = message;
    type Template = crate::deliver::kind::NoSection;
    const ARGO: Option<crate::deliver::kind::ArgoService> = None;

    fn config(v: Value) -> Result<ConsoleConfig, SettingsError> {
        if v.as_object().is_some_and(|m| !m.is_empty()) {
            return Err(crate::deliver::kind::SettingsError::Rule("a console service takes no settings but timeout, retry and rateLimit".into()));
        }
        Ok(ConsoleConfig)
    }

    fn secrets(_: &ConsoleConfig) -> Vec<&str> {
        Vec::new()
    }

    fn client(_name: &str, _: &ConsoleConfig, _: &Env) -> Result<Arc<dyn Deliverer>, BuildError> {
        Ok(Arc::new(ConsoleDeliverer))
    }
}

/// The console's payload: the message as rendered.
fn message(f: &Fields<'_>, _: &Target<'_>, _: &App) -> Payload {
    f.message_only()
}
