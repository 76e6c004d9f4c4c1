//! Opsgenie's Alert API: an alert created with a stable `alias` (the same Application,
//! trigger and condition always give the same one, so a re-send after a crash updates
//! the same alert), and closed by that alias on resolve, as PagerDuty's `dedup_key`.
//! `POST /v2/alerts` and `POST /v2/alerts/{alias}/close?identifierType=alias`, with
//! `Authorization: GenieKey <key>`; both answer 202.

mod client;
mod config;
pub mod template;
pub(crate) mod payload;
#[cfg(test)]
mod tests;

pub use client::OpsgenieClient;
pub use config::OpsgenieConfig;
pub use payload::{alias, close, create};

/// The Opsgenie kind: what the registry (`deliver::kinds`) needs of it.
pub struct Opsgenie;

impl crate::deliver::kind::Kind for Opsgenie {
    const KIND: crate::model::DestinationKind = crate::model::DestinationKind::Opsgenie;
    type Config = OpsgenieConfig;
    const LIMITS: crate::deliver::kind::Limits = crate::deliver::kind::Limits { per_second: 5.0, burst: 10, concurrency: 2 };
    const ENCODE: crate::template::Encoder = payload::encode;
    type Template = template::OpsgenieDef;
    const TEMPLATE_FIELDS: &'static [(&'static str, crate::template::FieldKind)] = &[("opsgenie.description", crate::template::FieldKind::Text), ("opsgenie.priority", crate::template::FieldKind::Text), ("opsgenie.alias", crate::template::FieldKind::Text), ("opsgenie.note", crate::template::FieldKind::Text), ("opsgenie.entity", crate::template::FieldKind::Text), ("opsgenie.user", crate::template::FieldKind::Text), ("opsgenie.tags", crate::template::FieldKind::Json), ("opsgenie.actions", crate::template::FieldKind::Json), ("opsgenie.responders", crate::template::FieldKind::Json), ("opsgenie.visibleTo", crate::template::FieldKind::Json), ("opsgenie.details", crate::template::FieldKind::Json)];

    fn template_fields<'a>(t: &'a Self::Template, all: &mut Vec<(String, crate::template::FieldKind, Option<&'a crate::source::At<String>>)>) {
        template::fields(t, all)
    }
    const ARGO: Option<crate::deliver::kind::ArgoService> = Some(crate::deliver::kind::ArgoService {
        name: "opsgenie",
        settings: &[("apiUrl", "apiUrl"), ("apiKeys", "apiKeys")],
        not_needed: &[],
        typed: true,
        written_order: true,
    });

    fn secrets(c: &OpsgenieConfig) -> Vec<&str> {
        c.api_keys.values().map(String::as_str).collect()
    }

    fn client(_name: &str, c: &OpsgenieConfig, env: &crate::deliver::env::Env) -> Result<std::sync::Arc<dyn crate::deliver::Deliverer>, crate::deliver::kind::BuildError> {
        Ok(std::sync::Arc::new(OpsgenieClient::new(c, env)?))
    }
}
