//! Syslog (RFC 5424) over UDP, TCP with octet counting (RFC 6587) or TLS (RFC 5425);
//! the message is the notification's ECS record as JSON, or CEF.

mod client;
mod config;
pub(crate) mod payload;
#[cfg(test)]
mod tests;

pub use client::SyslogClient;
pub use config::{Format, Protocol, SyslogConfig};
pub use payload::{Header, cef, frame, rfc5424};
