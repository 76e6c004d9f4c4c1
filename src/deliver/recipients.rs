//! A secret per recipient — a webhook URL per Teams channel or Google Chat space, a
//! routing key per PagerDuty service, an API key per Opsgenie team — resolved once when
//! the service is built, looked up per notification.

use std::collections::BTreeMap;

use super::env::Env;
use super::outcome::Outcome;
use crate::model::Notification;
use crate::secret::Secret;

pub struct PerRecipient {
    /// What the secret is (`routing key`) and the setting that maps recipients to it
    /// (`routingKeys`), for the error when a recipient has none.
    what: &'static str,
    setting: &'static str,
    secrets: BTreeMap<String, Secret>,
}

impl PerRecipient {
    /// Resolves every recipient's `$key` reference.
    pub fn resolve(
        configured: &BTreeMap<String, String>,
        env: &Env,
        what: &'static str,
        setting: &'static str,
    ) -> Result<PerRecipient, crate::secret::SecretError> {
        let secrets = configured.iter().map(|(r, s)| Ok((r.clone(), env.secret(s)?))).collect::<Result<_, crate::secret::SecretError>>()?;
        Ok(PerRecipient { what, setting, secrets })
    }

    /// The notification's recipient's secret, or the permanent failure naming the
    /// setting to add it to.
    pub fn get(&self, n: &Notification) -> Result<&Secret, Outcome> {
        self.secrets.get(&n.destination.recipient).ok_or_else(|| {
            Outcome::Permanent(format!("no {} for recipient {:?} (services.<name>.{})", self.what, n.destination.recipient, self.setting))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::deliver::ecs::tests::sample;
    use crate::model::DestinationKind;
    use crate::secret::Secrets;

    #[test]
    fn a_recipient_without_a_secret_is_a_permanent_failure_naming_the_setting() {
        let state = std::sync::Arc::new(crate::state::Store::in_memory().unwrap());
        let env = crate::deliver::testkit::env(state, Secrets::from_map([("pd-key", "R0UT1NG")]));
        let configured: BTreeMap<String, String> = [("platform".to_string(), "$pd-key".to_string())].into();
        let keys = PerRecipient::resolve(&configured, &env, "routing key", "routingKeys").unwrap();
        let mut n = sample(DestinationKind::Pagerduty, "pd");
        n.destination.recipient = "platform".into();
        assert_eq!(keys.get(&n).map(|s| s.expose().to_string()), Ok("R0UT1NG".to_string()));
        n.destination.recipient = "payments".into();
        assert_eq!(
            keys.get(&n).err(),
            Some(Outcome::Permanent(r#"no routing key for recipient "payments" (services.<name>.routingKeys)"#.into()))
        );
        let missing: BTreeMap<String, String> = [("platform".to_string(), "$absent".to_string())].into();
        let err = PerRecipient::resolve(&missing, &env, "routing key", "routingKeys").err().unwrap();
        assert!(matches!(&err, crate::secret::SecretError::Missing { key, .. } if key == "absent"), "{err}");
    }
}
