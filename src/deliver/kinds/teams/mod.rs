//! Microsoft Teams through incoming webhooks: a MessageCard built from the template's
//! `teams.*` fields (Argo CD's names: `title`, `summary`, `text`, `themeColor`,
//! `facts`, `sections`, `potentialAction`, or a whole card in `template`), posted to
//! the recipient's webhook URL. A webhook cannot edit a message: a resolve is a new
//! card rendered with `resolved` true.

mod client;
mod config;
pub mod template;
pub(crate) mod payload;
#[cfg(test)]
mod tests;

pub use client::TeamsClient;
pub use config::TeamsConfig;
pub use payload::card;

/// The Teams kind: what the registry (`deliver::kinds`) needs of it.
pub struct Teams;

impl crate::deliver::kind::Kind for Teams {
    const KIND: crate::model::DestinationKind = crate::model::DestinationKind::Teams;
    type Config = TeamsConfig;
    const LIMITS: crate::deliver::kind::Limits = crate::deliver::kind::Limits { per_second: 1.0, burst: 3, concurrency: 2 };
    const ENCODE: crate::template::Encoder = payload::encode;
    type Template = template::TeamsDef;
    const TEMPLATE_FIELDS: &'static [(&'static str, crate::template::FieldKind)] = &[("teams.title", crate::template::FieldKind::Text), ("teams.summary", crate::template::FieldKind::Text), ("teams.text", crate::template::FieldKind::Text), ("teams.themeColor", crate::template::FieldKind::Text), ("teams.facts", crate::template::FieldKind::Json), ("teams.sections", crate::template::FieldKind::Json), ("teams.potentialAction", crate::template::FieldKind::Json), ("teams.template", crate::template::FieldKind::Json)];

    fn template_fields<'a>(t: &'a Self::Template, all: &mut Vec<(String, crate::template::FieldKind, Option<&'a crate::source::At<String>>)>) {
        template::fields(t, all)
    }
    const ARGO: Option<crate::deliver::kind::ArgoService> = Some(crate::deliver::kind::ArgoService {
        name: "teams",
        settings: &[("recipientUrls", "recipientUrls")],
        not_needed: &[],
        typed: true,
        written_order: true,
    });

    fn secrets(c: &TeamsConfig) -> Vec<&str> {
        c.recipient_urls.values().map(String::as_str).collect()
    }

    fn client(_name: &str, c: &TeamsConfig, env: &crate::deliver::env::Env) -> Result<std::sync::Arc<dyn crate::deliver::Deliverer>, crate::deliver::kind::BuildError> {
        Ok(std::sync::Arc::new(TeamsClient::new(c, env)?))
    }
}
