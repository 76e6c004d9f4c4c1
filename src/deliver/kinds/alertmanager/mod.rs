//! Prometheus Alertmanager's v2 API: drift routed into an existing Alertmanager. An
//! alert is `POST /api/v2/alerts` with labels (the template's `alertmanager.labels`, by
//! default `alertname` = the trigger plus the Application's name, namespace and
//! project), annotations and a `generatorURL`; a resolve posts the same labels with
//! `endsAt` now, which resolves it. The same labels always identify the same alert.
//! Every target gets the alert; one that accepts is enough.

mod client;
mod config;
pub mod template;
pub(crate) mod payload;
#[cfg(test)]
mod tests;

pub use client::AlertmanagerClient;
pub use config::AlertmanagerConfig;
pub use payload::alerts;

/// The Alertmanager kind: what the registry (`deliver::kinds`) needs of it.
pub struct Alertmanager;

impl crate::deliver::kind::Kind for Alertmanager {
    const KIND: crate::model::DestinationKind = crate::model::DestinationKind::Alertmanager;
    type Config = AlertmanagerConfig;
    const LIMITS: crate::deliver::kind::Limits = crate::deliver::kind::Limits { per_second: 20.0, burst: 40, concurrency: 4 };
    const ENCODE: crate::template::Encoder = payload::encode;
    type Template = template::AlertmanagerDef;
    const TEMPLATE_FIELDS: &'static [(&'static str, crate::template::FieldKind)] = &[];

    fn template_fields<'a>(t: &'a Self::Template, all: &mut Vec<(String, crate::template::FieldKind, Option<&'a crate::source::At<String>>)>) {
        template::fields(t, all)
    }
    const ARGO: Option<crate::deliver::kind::ArgoService> = Some(crate::deliver::kind::ArgoService {
        name: "alertmanager",
        settings: &[("targets", "targets"), ("scheme", "scheme"), ("apiPath", "apiPath"), ("basicAuth", "basicAuth"), ("bearerToken", "bearerToken"), ("insecureSkipVerify", "insecureSkipVerify")],
        not_needed: &[],
        typed: true,
        written_order: true,
    });

    fn validate(c: &AlertmanagerConfig) -> Result<(), crate::deliver::kind::SettingsError> {
        if c.targets.is_empty() {
            return Err(crate::deliver::kind::SettingsError::Rule("an alertmanager service needs at least one of targets".into()));
        }
        Ok(())
    }

    fn secrets(c: &AlertmanagerConfig) -> Vec<&str> {
        let mut out: Vec<&str> = c.bearer_token.as_deref().into_iter().collect();
        if let Some(b) = &c.basic_auth {
            out.push(&b.password);
        }
        out
    }

    fn client(_name: &str, c: &AlertmanagerConfig, env: &crate::deliver::env::Env) -> Result<std::sync::Arc<dyn crate::deliver::Deliverer>, crate::deliver::kind::BuildError> {
        Ok(std::sync::Arc::new(AlertmanagerClient::new(c, env)?))
    }
}
