//! The e-mail (SMTP) client: sends each notification and turns the answer into an `Outcome` (delivered, retry, permanent).

use lettre::transport::smtp::authentication::Credentials;
use lettre::transport::smtp::client::{Certificate, Tls, TlsParameters};
use lettre::{AsyncSmtpTransport, AsyncTransport, Tokio1Executor};

use super::config::{EmailConfig, TlsMode};
use super::payload::message;
use crate::deliver::outcome::Outcome;
use crate::deliver::deliverer::{BoxFuture, Deliverer};
use crate::model::Notification;
use crate::secret::Secrets;

pub struct EmailClient {
    transport: AsyncSmtpTransport<Tokio1Executor>,
    from: String,
}

impl EmailClient {
    pub fn new(cfg: &EmailConfig, secrets: &Secrets) -> Result<EmailClient, crate::deliver::kind::BuildError> {
        crate::tls::init_crypto();
        let port = cfg.port.unwrap_or(match cfg.tls {
            TlsMode::None => 25,
            TlsMode::Starttls => 587,
            TlsMode::Implicit => 465,
        });
        let tls = match cfg.tls {
            TlsMode::None => Tls::None,
            mode => {
                let mut p = TlsParameters::builder(cfg.host.clone());
                if let Some(path) = &cfg.ca_file {
                    let pem = std::fs::read(path).map_err(|e| crate::deliver::kind::BuildError::Tls(format!("CA file {path}: {e}")))?;
                    p = p.add_root_certificate(Certificate::from_pem(&pem).map_err(|e| crate::deliver::kind::BuildError::Tls(format!("CA file {path}: {e}")))?);
                }
                let params = p.build_rustls().map_err(|e| crate::deliver::kind::BuildError::Tls(format!("TLS: {e}")))?;
                if mode == TlsMode::Implicit { Tls::Wrapper(params) } else { Tls::Required(params) }
            }
        };
        let mut b = AsyncSmtpTransport::<Tokio1Executor>::builder_dangerous(cfg.host.clone())
            .port(port)
            .tls(tls)
            .timeout(Some(std::time::Duration::from_secs(20)));
        if let Some(user) = &cfg.username {
            let password = match &cfg.password {
                Some(p) => secrets.resolve(p)?.expose().to_string(),
                None => String::new(),
            };
            b = b.credentials(Credentials::new(user.clone(), password));
        }
        Ok(EmailClient { transport: b.build(), from: cfg.from.clone() })
    }
}

/// SMTP 4xx and connection trouble are retried; 5xx and bad addresses are permanent.
fn classify(e: &lettre::transport::smtp::Error) -> Outcome {
    let text = format!("smtp: {e}");
    if e.is_permanent() { Outcome::Permanent(text) } else { Outcome::retry(text) }
}

impl Deliverer for EmailClient {
    fn deliver<'a>(&'a self, batch: &'a [Notification]) -> BoxFuture<'a, Outcome> {
        Box::pin(async move {
            for n in batch {
                let msg = match message(&self.from, n) {
                    Ok(m) => m,
                    Err(e) => return e.into(),
                };
                if let Err(e) = self.transport.send(msg).await {
                    return classify(&e);
                }
            }
            Outcome::Delivered
        })
    }
}
