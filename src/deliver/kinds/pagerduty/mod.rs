//! PagerDuty Events API v2: `POST <api>/v2/enqueue` with `trigger` events carrying a
//! stable `dedup_key` (Application UID, trigger, condition — never random), and
//! `resolve` with the same key when a `resolve: true` condition clears.

mod client;
mod config;
pub mod template;
pub(crate) mod payload;
#[cfg(test)]
mod tests;

pub use client::PagerDutyClient;
pub use config::PagerDutyConfig;
pub use payload::{MAX_BODY_BYTES, dedup_key, event};

/// The Pagerduty kind: what the registry (`deliver::kinds`) needs of it.
pub struct Pagerduty;

impl crate::deliver::kind::Kind for Pagerduty {
    const KIND: crate::model::DestinationKind = crate::model::DestinationKind::Pagerduty;
    type Config = PagerDutyConfig;
    const LIMITS: crate::deliver::kind::Limits = crate::deliver::kind::Limits { per_second: 1.5, burst: 10, concurrency: 2 };
    const ENCODE: crate::template::Encoder = payload::encode;
    type Template = template::PagerDutyDef;
    const TEMPLATE_FIELDS: &'static [(&'static str, crate::template::FieldKind)] = &[("pagerduty.summary", crate::template::FieldKind::Text), ("pagerduty.severity", crate::template::FieldKind::Text), ("pagerduty.source", crate::template::FieldKind::Text), ("pagerduty.component", crate::template::FieldKind::Text), ("pagerduty.group", crate::template::FieldKind::Text), ("pagerduty.class", crate::template::FieldKind::Text), ("pagerduty.customDetails", crate::template::FieldKind::Json)];

    fn template_fields<'a>(t: &'a Self::Template, all: &mut Vec<(String, crate::template::FieldKind, Option<&'a crate::source::At<String>>)>) {
        template::fields(t, all)
    }
    const ARGO: Option<crate::deliver::kind::ArgoService> = Some(crate::deliver::kind::ArgoService {
        name: "pagerdutyv2",
        settings: &[("serviceKeys", "routingKeys")],
        not_needed: &[],
        typed: true,
        written_order: false,
    });

    fn secrets(c: &PagerDutyConfig) -> Vec<&str> {
        c.routing_keys.values().map(String::as_str).collect()
    }

    fn client(_name: &str, c: &PagerDutyConfig, env: &crate::deliver::env::Env) -> Result<std::sync::Arc<dyn crate::deliver::Deliverer>, crate::deliver::kind::BuildError> {
        Ok(std::sync::Arc::new(PagerDutyClient::new(c, env)?))
    }
}
