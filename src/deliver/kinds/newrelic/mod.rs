//! New Relic deployment markers: `POST /v2/applications/{id}/deployments.json` (the
//! recipient is the APM application id) with `X-Api-Key`, the revision (the template's
//! `newrelic.revision`, else the Application's synced revision), `changelog`,
//! `description` (else the message) and `user`.

mod client;
mod config;
pub mod template;
pub(crate) mod payload;
#[cfg(test)]
mod tests;

pub use client::NewRelicClient;
pub use config::NewRelicConfig;
pub use payload::deployment;

/// The Newrelic kind: what the registry (`deliver::kinds`) needs of it.
pub struct Newrelic;

impl crate::deliver::kind::Kind for Newrelic {
    const KIND: crate::model::DestinationKind = crate::model::DestinationKind::Newrelic;
    type Config = NewRelicConfig;
    const LIMITS: crate::deliver::kind::Limits = crate::deliver::kind::Limits { per_second: 2.0, burst: 5, concurrency: 2 };
    const ENCODE: crate::template::Encoder = payload::encode;
    type Template = template::NewRelicDef;
    const TEMPLATE_FIELDS: &'static [(&'static str, crate::template::FieldKind)] = &[("newrelic.revision", crate::template::FieldKind::Text), ("newrelic.changelog", crate::template::FieldKind::Text), ("newrelic.description", crate::template::FieldKind::Text), ("newrelic.user", crate::template::FieldKind::Text)];

    fn template_fields<'a>(t: &'a Self::Template, all: &mut Vec<(String, crate::template::FieldKind, Option<&'a crate::source::At<String>>)>) {
        template::fields(t, all)
    }
    const ARGO: Option<crate::deliver::kind::ArgoService> = Some(crate::deliver::kind::ArgoService {
        name: "newrelic",
        settings: &[("apiURL", "apiURL"), ("apiKey", "apiKey")],
        not_needed: &[],
        typed: true,
        written_order: true,
    });

    fn secrets(c: &NewRelicConfig) -> Vec<&str> {
        vec![c.api_key.as_str()]
    }

    fn client(_name: &str, c: &NewRelicConfig, env: &crate::deliver::env::Env) -> Result<std::sync::Arc<dyn crate::deliver::Deliverer>, crate::deliver::kind::BuildError> {
        Ok(std::sync::Arc::new(NewRelicClient::new(c, env)?))
    }
}
