//! Mattermost's REST API: `POST /api/v4/posts` to the recipient channel (its id) with
//! the message and the template's `mattermost.attachments` (Slack-style attachments)
//! as `props.attachments`, authenticated with a bot or personal access token.

mod client;
mod config;
pub mod template;
pub(crate) mod payload;
#[cfg(test)]
mod tests;

pub use client::MattermostClient;
pub use config::MattermostConfig;
pub use payload::post;

/// The Mattermost kind: what the registry (`deliver::kinds`) needs of it.
pub struct Mattermost;

impl crate::deliver::kind::Kind for Mattermost {
    const KIND: crate::model::DestinationKind = crate::model::DestinationKind::Mattermost;
    type Config = MattermostConfig;
    const LIMITS: crate::deliver::kind::Limits = crate::deliver::kind::Limits { per_second: 1.0, burst: 5, concurrency: 2 };
    const ENCODE: crate::template::Encoder = payload::encode;
    type Template = template::MattermostDef;
    const TEMPLATE_FIELDS: &'static [(&'static str, crate::template::FieldKind)] = &[("mattermost.attachments", crate::template::FieldKind::Json)];

    fn template_fields<'a>(t: &'a Self::Template, all: &mut Vec<(String, crate::template::FieldKind, Option<&'a crate::source::At<String>>)>) {
        template::fields(t, all)
    }
    const ARGO: Option<crate::deliver::kind::ArgoService> = Some(crate::deliver::kind::ArgoService {
        name: "mattermost",
        settings: &[("apiURL", "apiURL"), ("token", "token"), ("insecureSkipVerify", "insecureSkipVerify")],
        not_needed: &[],
        typed: true,
        written_order: true,
    });

    fn secrets(c: &MattermostConfig) -> Vec<&str> {
        vec![c.token.as_str()]
    }

    fn client(name: &str, c: &MattermostConfig, env: &crate::deliver::env::Env) -> Result<std::sync::Arc<dyn crate::deliver::Deliverer>, crate::deliver::kind::BuildError> {
        Ok(std::sync::Arc::new(MattermostClient::new(name, c, env)?))
    }
}
