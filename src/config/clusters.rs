//! `clusters:` (spoke clusters whose live objects are read per Application
//! destination), `argocd:` (Argo CD's API as the source of desired values) and
//! `diff:` (how much of a drifted resource's diff is shown), validated at load time
//! with positions. No client is built here (`cluster/` builds them).

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

use super::relative_to;
use crate::json::Pointer;
use crate::secret::{Secret, Secrets};
use crate::source::{At, ConfigError, SourceFile, in_range};

/// At most this many spoke clusters (each is a metric label).
pub const MAX_CLUSTERS: usize = 256;

/// One entry of `clusters:` as written.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ClusterDef {
    /// Matches `spec.destination.name`.
    pub name: Option<String>,
    /// Matches `spec.destination.server`, and is the API server's URL with `token`.
    pub server: Option<String>,
    /// A kubeconfig file for the cluster (its current context, or `context`).
    pub kubeconfig: Option<String>,
    pub context: Option<String>,
    /// A bearer token (`$key`), with `server` and, unless the server's certificate is
    /// signed by a public root, `caFile`.
    pub token: Option<String>,
    pub ca_file: Option<String>,
    /// Opt-in: the name of Argo CD's own cluster Secret for this cluster
    /// (`cluster-spoke-1`, labelled `argocd.argoproj.io/secret-type: cluster`), read
    /// from `argocdNamespace` at start-up. Needs `get` on that Secret by name
    /// (`deploy/kubernetes/argocd-cluster-secrets.yaml`); see docs/drift.md for the risk.
    pub argocd_secret: Option<String>,
    /// Where that Secret is (`argocd` when absent).
    pub argocd_namespace: Option<String>,
    /// The bearer token (`$key`) this cluster's API server posts its audit batches to
    /// `audit.listen` with: what tells its events from the hub's and other spokes'.
    pub audit_token: Option<String>,
    /// Whose writes in this cluster are the engines' own (Argo CD's cluster account,
    /// Fleet's agent, a Flux kubeconfig's identity); [`DEFAULT_SPOKE_IDENTITIES`] when
    /// absent.
    pub audit_identities: Option<Vec<String>>,
}

/// The identities of a spoke's writes that are the engines' when
/// `clusters[].auditIdentities` is absent: Argo CD's cluster account (what `argocd
/// cluster add` creates) and Fleet's agent.
pub const DEFAULT_SPOKE_IDENTITIES: &[&str] =
    &["system:serviceaccount:kube-system:argocd-manager", "system:serviceaccount:cattle-fleet-system:fleet-agent"];

/// A spoke's audit feed: the credential its API server posts with, and whose writes
/// there are the engines'.
#[derive(Debug, Clone, PartialEq)]
pub struct SpokeAudit {
    pub token: Secret,
    pub identities: Vec<String>,
}

/// `argocd:` as written.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ArgocdDef {
    /// `https://argocd.example.com` (the API server of Argo CD, not the UI's path).
    pub server: String,
    /// An Argo CD API token (`$key`) of an account that may `get` applications.
    pub token: String,
    pub ca_file: Option<String>,
}

/// `diff:` as written.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct DiffDef {
    /// Whether drifted resources are read in full and diffed (true when absent).
    pub enabled: Option<bool>,
    /// Changed fields shown per resource (20; 1 to 1000).
    pub max_fields: Option<At<usize>>,
    /// Characters shown per value (120; 8 to 10000).
    pub max_value_chars: Option<At<usize>>,
    /// Regexes of the operator's own credential shapes, masked like the built-in ones.
    pub mask: Option<At<Vec<String>>>,
}

/// How a spoke cluster is reached.
#[derive(Debug, Clone)]
pub enum ClusterAuth {
    Kubeconfig {
        path: PathBuf,
        context: Option<String>,
    },
    Token {
        token: Secret,
        ca_file: Option<PathBuf>,
    },
    /// Argo CD's cluster Secret `name` in `namespace`, read through the hub's client.
    ArgocdSecret {
        namespace: String,
        name: String,
    },
}

/// A spoke cluster, validated.
#[derive(Debug, Clone)]
pub struct ClusterSpec {
    /// What logs, metrics and the history call it: its name, else its server.
    pub label: String,
    pub name: String,
    pub server: String,
    pub auth: ClusterAuth,
    /// Its audit feed (`auditToken`), if its API server posts to `audit.listen`.
    pub audit: Option<SpokeAudit>,
}

/// Argo CD's API, validated.
#[derive(Debug, Clone)]
pub struct ArgocdApi {
    pub server: String,
    pub token: Secret,
    pub ca_file: Option<PathBuf>,
}

/// `diff:` validated.
#[derive(Debug, Clone, PartialEq)]
pub struct DiffSettings {
    pub enabled: bool,
    pub limits: crate::drift::diff::Limits,
    /// The built-in credential rules and `diff.mask`'s patterns.
    pub mask: crate::drift::mask::Masker,
}

impl Default for DiffSettings {
    fn default() -> DiffSettings {
        DiffSettings { enabled: true, limits: crate::drift::diff::Limits::default(), mask: crate::drift::mask::Masker::default() }
    }
}

/// Where an Application's resources are read.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Target {
    /// The cluster driftwatch runs in (`attribution.destinations`).
    #[default]
    Local,
    /// A configured spoke, by label.
    Spoke(String),
    /// Neither: not read (`server or name`, for the note).
    Elsewhere(String),
}

impl Target {
    /// The cluster part of a live index key: empty for the local cluster.
    pub fn key(&self) -> String {
        match self {
            Target::Local => String::new(),
            Target::Spoke(l) => l.clone(),
            Target::Elsewhere(d) => format!("?{d}"),
        }
    }
}

/// The destination (`server`, `name`) of an Application.
pub fn destination(app: &Value) -> (&str, &str) {
    let dest = |k: &str| app.at(&format!("/spec/destination/{k}")).and_then(Value::as_str).unwrap_or_default();
    (dest("server"), dest("name"))
}

/// The cluster an Application's resources live in.
pub fn target(app: &Value, local: &[String], spokes: &[ClusterSpec]) -> Target {
    let (server, name) = destination(app);
    // Argo CD refuses a destination with both: which cluster it meant is not known, so
    // none is read (resolving either half would let the Application pick a cluster its
    // project does not permit by naming one it does).
    if !server.is_empty() && !name.is_empty() {
        return Target::Elsewhere(format!("both name {name} and server {server}"));
    }
    let is = |d: &str| (!server.is_empty() && d == server) || (!name.is_empty() && d == name);
    if local.iter().any(|d| is(d)) {
        return Target::Local;
    }
    // By name first: Argo CD resolves `destination.name` to a server itself.
    if let Some(c) = spokes
        .iter()
        .find(|c| !name.is_empty() && c.name == name)
        .or_else(|| spokes.iter().find(|c| !server.is_empty() && c.server == server))
    {
        return Target::Spoke(c.label.clone());
    }
    Target::Elsewhere(if server.is_empty() { name.to_string() } else { server.to_string() })
}

/// Where the secret values a setting references are resolved and recorded.
pub struct SecretSink<'a> {
    pub secrets: &'a Secrets,
    pub referenced: &'a mut Vec<Secret>,
    pub missing: &'a mut Vec<String>,
}

impl SecretSink<'_> {
    /// A token that must be a `$key` reference.
    pub(super) fn token(
        &mut self,
        key: &str,
        value: &str,
        pos: Option<crate::source::Pos>,
        errors: &mut Vec<ConfigError>,
    ) -> Option<Secret> {
        if Secrets::references(value).is_empty() {
            errors.push(ConfigError::new(pos, key, "must reference a secret ($key), not hold the token itself"));
            return None;
        }
        match self.secrets.resolve(value) {
            Ok(v) if v.expose().is_empty() => {
                errors.push(ConfigError::new(pos, key, "the secret it references is empty"));
                None
            }
            Ok(v) => {
                self.referenced.push(v.clone());
                Some(v)
            }
            Err(e) => {
                self.missing.push(format!("{key}: {e}"));
                None
            }
        }
    }
}

fn file_exists(base: &Path, p: &str, key: &str, pos: Option<crate::source::Pos>, errors: &mut Vec<ConfigError>) -> PathBuf {
    let path = relative_to(base, p);
    if !path.is_file() {
        errors.push(ConfigError::new(pos, key, format!("{} does not exist or is not a file", path.display())));
    }
    path
}

/// An `https://` URL, or `http://` on loopback (tests, a port-forward). Also applied to
/// the server an Argo CD cluster Secret names (`cluster::client`).
pub fn server_url(s: &str) -> Result<(), NotHttps> {
    server_url_text(s).map_err(NotHttps)
}

/// [`server_url`], its refusal as text.
fn server_url_text(s: &str) -> Result<(), String> {
    let url: reqwest::Url = s.parse().map_err(|e| format!("{s:?} is not a URL: {e}"))?;
    match url.scheme() {
        "https" => Ok(()),
        "http" if url.host_str().is_some_and(|h| h == "localhost" || h.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())) => {
            Ok(())
        }
        _ => Err(format!("{s:?} must be https:// (http:// only on loopback): the token would cross the network in clear")),
    }
}

/// `clusters:` validated.
pub fn clusters(
    defs: &[At<ClusterDef>],
    local: &[String],
    base: &Path,
    file: &SourceFile,
    sink: &mut SecretSink<'_>,
    errors: &mut Vec<ConfigError>,
) -> Vec<ClusterSpec> {
    let mut out: Vec<ClusterSpec> = Vec::new();
    if defs.len() > MAX_CLUSTERS {
        errors.push(ConfigError::new(file.pos(&defs[MAX_CLUSTERS].referenced), "clusters", format!("at most {MAX_CLUSTERS} clusters")));
    }
    for (i, d) in defs.iter().enumerate().take(MAX_CLUSTERS) {
        let pos = file.pos(&d.referenced);
        let key = format!("clusters[{i}]");
        let c = &d.value;
        let (name, server) = (c.name.clone().unwrap_or_default(), c.server.clone().unwrap_or_default());
        let mut fail = |msg: String| errors.push(ConfigError::new(pos.clone(), key.clone(), msg));
        if name.is_empty() && server.is_empty() {
            fail("needs name (spec.destination.name) or server (spec.destination.server)".into());
            continue;
        }
        let label = if name.is_empty() { server.clone() } else { name.clone() };
        if out.iter().any(|o| (!name.is_empty() && o.name == name) || (!server.is_empty() && o.server == server) || o.label == label) {
            fail(format!("{label:?} is configured twice"));
        }
        if local.iter().any(|l| *l == name || *l == server) {
            fail(format!("{label:?} is the cluster driftwatch runs in (attribution.destinations)"));
        }
        let auth = match (&c.kubeconfig, &c.token, &c.argocd_secret) {
            (None, None, Some(secret)) => {
                if c.ca_file.is_some() {
                    fail("caFile goes with token; Argo CD's cluster Secret carries its own CA".into());
                }
                ClusterAuth::ArgocdSecret { namespace: c.argocd_namespace.clone().unwrap_or_else(|| "argocd".into()), name: secret.clone() }
            }
            (Some(k), None, None) => {
                if c.ca_file.is_some() {
                    fail("caFile goes with token; a kubeconfig carries its own CA".into());
                }
                let path = file_exists(base, k, &format!("{key}.kubeconfig"), pos.clone(), errors);
                ClusterAuth::Kubeconfig { path, context: c.context.clone() }
            }
            (None, Some(t), None) => {
                if server.is_empty() {
                    fail("token needs server (the API server's URL)".into());
                } else if let Err(e) = server_url(&server) {
                    fail(e.0);
                }
                let ca_file = c.ca_file.as_deref().map(|p| file_exists(base, p, &format!("{key}.caFile"), pos.clone(), errors));
                match sink.token(&format!("{key}.token"), t, pos.clone(), errors) {
                    Some(token) => ClusterAuth::Token { token, ca_file },
                    None => continue,
                }
            }
            _ => {
                fail("needs exactly one of kubeconfig, token or argocdSecret".into());
                continue;
            }
        };
        let audit = spoke_audit(c, &key, pos.clone(), sink, errors);
        out.push(ClusterSpec { label, name, server, auth, audit });
    }
    out
}

/// A spoke's `auditToken` and `auditIdentities`, validated.
fn spoke_audit(
    c: &ClusterDef,
    key: &str,
    pos: Option<crate::source::Pos>,
    sink: &mut SecretSink<'_>,
    errors: &mut Vec<ConfigError>,
) -> Option<SpokeAudit> {
    let Some(t) = &c.audit_token else {
        if c.audit_identities.is_some() {
            errors.push(ConfigError::new(pos, format!("{key}.auditIdentities"), "goes with auditToken (this cluster's audit feed)"));
        }
        return None;
    };
    let token = sink.token(&format!("{key}.auditToken"), t, pos.clone(), errors)?;
    let identities = match &c.audit_identities {
        Some(ids) if ids.is_empty() || ids.iter().any(|i| i.trim().is_empty()) => {
            errors.push(ConfigError::new(pos, format!("{key}.auditIdentities"), "must list identities (none empty)"));
            return None;
        }
        Some(ids) => ids.clone(),
        None => DEFAULT_SPOKE_IDENTITIES.iter().map(|s| s.to_string()).collect(),
    };
    Some(SpokeAudit { token, identities })
}

/// `argocd:` validated.
pub fn argocd(
    def: &At<ArgocdDef>,
    base: &Path,
    file: &SourceFile,
    sink: &mut SecretSink<'_>,
    errors: &mut Vec<ConfigError>,
) -> Option<ArgocdApi> {
    let pos = file.pos(&def.referenced);
    if let Err(e) = server_url(&def.value.server) {
        errors.push(ConfigError::new(pos.clone(), "argocd.server", e.0));
    }
    let ca_file = def.value.ca_file.as_deref().map(|p| file_exists(base, p, "argocd.caFile", pos.clone(), errors));
    let token = sink.token("argocd.token", &def.value.token, pos, errors)?;
    Some(ArgocdApi { server: def.value.server.trim_end_matches('/').to_string(), token, ca_file })
}

/// `diff:` validated.
pub fn diff(def: &DiffDef, file: &SourceFile, errors: &mut Vec<ConfigError>) -> DiffSettings {
    let mut out = DiffSettings { enabled: def.enabled.unwrap_or(true), ..DiffSettings::default() };
    for (key, slot, value, min, max) in [
        ("diff.maxFields", &mut out.limits.max_fields, &def.max_fields, 1, 1000),
        ("diff.maxValueChars", &mut out.limits.max_value_chars, &def.max_value_chars, 8, 10_000),
    ] {
        if let Some(v) = value.as_ref().and_then(|v| in_range(file, key, v, min, max, errors)) {
            *slot = v;
        }
    }
    if let Some(m) = &def.mask {
        match crate::drift::mask::Masker::with_patterns(&m.value) {
            Ok(masker) => out.mask = masker,
            Err(e) => errors.push(ConfigError::new(file.pos(&m.referenced), "diff.mask", e)),
        }
    }
    out
}

/// Why a server URL is refused: not https:// off loopback.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct NotHttps(pub String);

impl From<NotHttps> for String {
    fn from(e: NotHttps) -> String {
        e.0
    }
}
