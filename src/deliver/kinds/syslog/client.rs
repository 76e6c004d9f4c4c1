//! The syslog client: sends each notification and turns the answer into an `Outcome` (delivered, retry, permanent).

use std::sync::Arc;

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpStream, UdpSocket};

use super::config::{Format, Protocol, SyslogConfig};
use super::payload::{Header, cef, frame, rfc5424};
use crate::deliver::ecs::Origin;
use crate::deliver::siem::Schema;
use crate::deliver::outcome::Outcome;
use crate::deliver::env::Env;
use crate::deliver::deliverer::{BoxFuture, Deliverer};
use crate::model::Notification;

/// UDP datagrams longer than this are cut (a common receiver limit).
const MAX_UDP_BYTES: usize = 8192;

pub struct SyslogClient {
    address: String,
    protocol: Protocol,
    format: Format,
    header: Header,
    origin: Origin,
    tls: Option<(tokio_rustls::TlsConnector, rustls::pki_types::ServerName<'static>)>,
}

fn tls_connector(ca_file: Option<&str>) -> Result<tokio_rustls::TlsConnector, crate::deliver::kind::BuildError> {
    crate::tls::init_crypto();
    let mut roots = rustls::RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() };
    if let Some(path) = ca_file {
        let pem = std::fs::read(path).map_err(|e| crate::deliver::kind::BuildError::Tls(format!("CA file {path}: {e}")))?;
        for cert in rustls_pemfile::certs(&mut pem.as_slice()) {
            let cert = cert.map_err(|e| crate::deliver::kind::BuildError::Tls(format!("CA file {path}: {e}")))?;
            roots.add(cert).map_err(|e| crate::deliver::kind::BuildError::Tls(format!("CA file {path}: {e}")))?;
        }
    }
    let config = rustls::ClientConfig::builder().with_root_certificates(roots).with_no_client_auth();
    Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
}

impl SyslogClient {
    pub fn new(cfg: &SyslogConfig, env: &Env) -> Result<SyslogClient, crate::deliver::kind::BuildError> {
        let tls = if cfg.protocol == Protocol::Tls {
            let host =
                cfg.server_name.clone().unwrap_or_else(|| cfg.address.rsplit_once(':').map_or(cfg.address.clone(), |(h, _)| h.to_string()));
            let host = host.trim_start_matches('[').trim_end_matches(']').to_string();
            let name = rustls::pki_types::ServerName::try_from(host.clone()).map_err(|e| crate::deliver::kind::BuildError::Setting(format!("TLS server name {host:?}: {e}")))?;
            Some((tls_connector(cfg.ca_file.as_deref())?, name))
        } else {
            None
        };
        Ok(SyslogClient {
            address: cfg.address.clone(),
            protocol: cfg.protocol,
            format: cfg.format,
            header: Header {
                facility: cfg.facility.unwrap_or(16),
                hostname: cfg.hostname.clone().unwrap_or_else(crate::deliver::hostname),
                app_name: cfg.app_name.clone().unwrap_or_else(|| "driftwatch".into()),
                procid: std::process::id().to_string(),
            },
            origin: env.origin(),
            tls,
        })
    }

    /// The syslog lines for a notification: one, or with OCSF one per record.
    pub fn lines(&self, n: &Notification, now: chrono::DateTime<chrono::Utc>) -> Vec<String> {
        let schema = match self.format {
            Format::Ocsf => Schema::Ocsf,
            Format::Ocsf1_7 => Schema::Ocsf1_7,
            Format::Json | Format::Cef => Schema::Ecs,
        };
        schema
            .records(n, &self.origin, now)
            .into_iter()
            .map(|mut record| {
                if self.protocol == Protocol::Udp && self.format != Format::Cef {
                    // One datagram: leave room for the RFC 5424 header and structured data.
                    record = schema.fit(record, MAX_UDP_BYTES - 1024);
                }
                let msg = match self.format {
                    Format::Json | Format::Ocsf | Format::Ocsf1_7 => record.to_string(),
                    Format::Cef => cef(n, &record),
                };
                rfc5424(&self.header, n, &msg, now)
            })
            .collect()
    }

    async fn send(&self, line: &str) -> Result<(), Outcome> {
        let io = |e: std::io::Error| Outcome::retry(format!("syslog {}: {e}", self.address));
        match self.protocol {
            Protocol::Udp => {
                let bind = if self.address.starts_with('[') { "[::]:0" } else { "0.0.0.0:0" };
                let sock = UdpSocket::bind(bind).await.map_err(io)?;
                let bytes = line.as_bytes();
                sock.send_to(&bytes[..bytes.len().min(MAX_UDP_BYTES)], &self.address).await.map_err(io)?;
            }
            Protocol::Tcp => {
                let mut s = TcpStream::connect(&self.address).await.map_err(io)?;
                s.write_all(&frame(line)).await.map_err(io)?;
                s.shutdown().await.map_err(io)?;
            }
            Protocol::Tls => {
                let Some((connector, name)) = &self.tls else { return Err(Outcome::Permanent("TLS is not configured".into())) };
                let tcp = TcpStream::connect(&self.address).await.map_err(io)?;
                // Retried whatever the TLS error, a certificate not accepted included
                // (a rotation in progress; `is_certificate_error` names it).
                let mut s = connector.connect(name.clone(), tcp).await.map_err(|e| {
                    let what = if crate::deliver::outcome::is_certificate_error(&e) { "certificate not accepted: " } else { "" };
                    Outcome::retry(format!("syslog TLS {}: {what}{e}", self.address))
                })?;
                s.write_all(&frame(line)).await.map_err(io)?;
                s.shutdown().await.map_err(io)?;
            }
        }
        Ok(())
    }
}

impl Deliverer for SyslogClient {
    fn deliver<'a>(&'a self, batch: &'a [Notification]) -> BoxFuture<'a, Outcome> {
        Box::pin(async move {
            for n in batch {
                for line in self.lines(n, chrono::Utc::now()) {
                    if let Err(o) = self.send(&line).await {
                        return o;
                    }
                }
            }
            Outcome::Delivered
        })
    }
}
