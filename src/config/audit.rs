//! `audit:` validated into [`AuditSettings`]: the listener's address, its TLS (with a
//! client CA and pinned names), the token, the log file, the bounds, the time bounds of
//! events; a listener only an authenticated API server can use.

use std::path::PathBuf;

use super::clusters::SecretSink;
use super::sections::Ctx;
use super::{AuditDef, relative_to};
use crate::source::{ConfigError, in_range};

pub use crate::tls::ServerTls;

/// The audit input, validated.
#[derive(Debug, Clone)]
pub struct AuditSettings {
    pub listen: Option<std::net::SocketAddr>,
    pub tls: Option<ServerTls>,
    pub token: Option<crate::secret::Secret>,
    pub file: Option<PathBuf>,
    pub argocd_identities: ArgoIdentities,
    pub max_body_bytes: usize,
    pub window: chrono::Duration,
    pub queue: usize,
    /// The credential rules of `diff:` (what a request set is masked by them too).
    pub mask: crate::drift::mask::Masker,
    /// How far from now an event may be dated.
    pub times: crate::drift::audit::TimeBounds,
    /// The spokes whose API servers post their own batches (`clusters[].auditToken`).
    pub spokes: Vec<SpokeFeed>,
}

/// A spoke's audit feed: its label, the token its API server posts with, and whose
/// writes there are the engines' (one list for every engine's units there).
#[derive(Debug, Clone, PartialEq)]
pub struct SpokeFeed {
    pub cluster: String,
    pub token: crate::secret::Secret,
    pub identities: ArgoIdentities,
}

/// `audit` with the spokes' feeds of `clusters`: each needs the listener, and a token
/// of its own (the token is what tells a batch's cluster).
pub fn with_spokes(
    audit: AuditSettings,
    clusters: &[super::clusters::ClusterSpec],
    defs: &[crate::source::At<super::clusters::ClusterDef>],
    file: &crate::source::SourceFile,
    errors: &mut Vec<ConfigError>,
) -> AuditSettings {
    let mut spokes: Vec<SpokeFeed> = Vec::new();
    for c in clusters {
        let Some(a) = &c.audit else { continue };
        let i = defs.iter().position(|d| d.value.name.as_deref().or(d.value.server.as_deref()) == Some(c.label.as_str()));
        let pos = i.and_then(|i| defs.get(i)).and_then(|d| file.pos(&d.referenced));
        let key = format!("clusters[{}].auditToken", i.unwrap_or_default());
        let refuse = |why: &str, errors: &mut Vec<ConfigError>| errors.push(ConfigError::new(pos.clone(), key.clone(), why.to_string()));
        if audit.listen.is_none() {
            refuse("needs audit.listen: the spoke's API server posts its batches there", errors);
            continue;
        }
        // Without the hub's token, a client certificate alone says "the hub": a
        // spoke's API server, which holds one too, could post as the hub.
        if audit.token.is_none() {
            refuse(
                "needs audit.token: with spokes' feeds the hub's API server is told by its own token, not by a client certificate alone",
                errors,
            );
            continue;
        }
        // Matched by either spelling of its destination (name, server), so neither
        // escapes the feed; its label is a key of the audit index.
        let def = i.and_then(|i| defs.get(i)).map(|d| &d.value);
        if def.is_none_or(|d| d.name.as_deref().unwrap_or_default().is_empty() || d.server.as_deref().unwrap_or_default().is_empty()) {
            refuse("needs both name and server: an Application may name its destination either way", errors);
            continue;
        }
        if c.label == "in-cluster" || c.label.chars().any(char::is_control) {
            refuse("the cluster's name may not be in-cluster (the hub's) nor hold control characters", errors);
            continue;
        }
        let taken = |t: &crate::secret::Secret| t.expose() == a.token.expose();
        if audit.token.as_ref().is_some_and(taken) || spokes.iter().any(|s| taken(&s.token)) {
            refuse("is another cluster's audit token too: a batch's cluster is told by its token alone", errors);
            continue;
        }
        let ids = a.identities.clone();
        let identities = ArgoIdentities { controllers: ids.clone(), api: Vec::new(), flux: ids.clone(), fleet: ids };
        spokes.push(SpokeFeed { cluster: c.label.clone(), token: a.token.clone(), identities });
    }
    AuditSettings { spokes, ..audit }
}

/// Argo CD's identities, as the API server authenticates them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ArgoIdentities {
    /// Whose every write is desired state (`audit.argocdIdentities`: the application
    /// controller, the ApplicationSet controller).
    pub controllers: Vec<String>,
    /// Argo CD's API server (`audit.argocdApiIdentities`): it writes for whoever
    /// signed in to Argo CD, so only what starts or asks for a sync of an Application
    /// (its `operation`, a refresh) is Argo CD's own; anything else it writes — a
    /// resource patched through `argocd app patch-resource`, an Application's spec
    /// through `argocd app set` — is an attempt named by its identity.
    pub api: Vec<String>,
    /// Flux's controllers (`audit.fluxIdentities`): desired state only on objects a
    /// Flux unit manages; anywhere else, their writes are attempts like anyone's.
    pub flux: Vec<String>,
    /// Fleet's agents (`audit.fleetIdentities`): the same, for Fleet bundles.
    pub fleet: Vec<String>,
}

impl ArgoIdentities {
    /// The namespaces Flux's controllers run in (of their ServiceAccounts in
    /// `audit.fluxIdentities`): a Flux unit there is the platform's, which may manage
    /// objects anywhere.
    pub fn flux_namespaces(&self) -> Vec<&str> {
        self.flux
            .iter()
            .filter_map(|i| i.strip_prefix("system:serviceaccount:"))
            .filter_map(|r| r.split_once(':').map(|(ns, _)| ns))
            .collect()
    }

    /// Whether `username` is the controller of `engine`, whose writes of the objects a
    /// unit of that engine manages are its desired state.
    pub fn engine_controller(&self, engine: crate::unit::Engine, username: &str) -> bool {
        use crate::unit::Engine;
        let list = match engine {
            Engine::ArgoCd => &self.controllers,
            Engine::FluxKustomization | Engine::FluxHelmRelease => &self.flux,
            Engine::Fleet => &self.fleet,
        };
        list.iter().any(|i| i == username)
    }

    pub fn controller(&self, username: &str) -> bool {
        self.controllers.iter().any(|i| i == username)
    }

    pub fn api(&self, username: &str) -> bool {
        self.api.iter().any(|i| i == username)
    }
}

/// The identity Argo CD's application controller writes with.
pub const ARGOCD_CONTROLLER_IDENTITY: &str = "system:serviceaccount:argocd:argocd-application-controller";

/// The identities Flux's controllers write with, as its install manifests make them.
pub const FLUX_IDENTITIES: [&str; 3] = [
    "system:serviceaccount:flux-system:kustomize-controller",
    "system:serviceaccount:flux-system:helm-controller",
    "system:serviceaccount:flux-system:source-controller",
];

/// The identities Fleet writes with: its agent (downstream clusters, and Fleet's own
/// `local` cluster), and on the manager its controller and gitjob, which write the
/// Bundles and BundleDeployments from Git. (An agent's registration account, in a
/// BundleDeployment's own namespace, writes that BundleDeployment's status.)
pub const FLEET_IDENTITIES: [&str; 4] = [
    "system:serviceaccount:cattle-fleet-system:fleet-agent",
    "system:serviceaccount:cattle-fleet-local-system:fleet-agent",
    "system:serviceaccount:cattle-fleet-system:fleet-controller",
    "system:serviceaccount:cattle-fleet-system:gitjob",
];

impl Default for AuditSettings {
    fn default() -> Self {
        AuditSettings {
            listen: None,
            tls: None,
            token: None,
            file: None,
            argocd_identities: ArgoIdentities {
                controllers: vec![ARGOCD_CONTROLLER_IDENTITY.into()],
                api: Vec::new(),
                flux: FLUX_IDENTITIES.map(String::from).to_vec(),
                fleet: FLEET_IDENTITIES.map(String::from).to_vec(),
            },
            max_body_bytes: 16 << 20,
            window: chrono::Duration::minutes(10),
            queue: 10_000,
            mask: crate::drift::mask::Masker::default(),
            times: crate::drift::audit::TimeBounds { max_age: chrono::Duration::hours(1), max_ahead: chrono::Duration::minutes(5) },
            spokes: Vec::new(),
        }
    }
}

impl AuditSettings {
    /// Whether any audit input is configured.
    pub fn enabled(&self) -> bool {
        self.listen.is_some() || self.file.is_some()
    }
}

/// The engines' identities as configured, each list replacing its default.
fn identities(def: &AuditDef, ids: &mut ArgoIdentities) {
    for (given, list) in [
        (&def.argocd_identities, &mut ids.controllers),
        (&def.argocd_api_identities, &mut ids.api),
        (&def.flux_identities, &mut ids.flux),
        (&def.fleet_identities, &mut ids.fleet),
    ] {
        if let Some(given) = given {
            list.clone_from(given);
        }
    }
}

/// `audit:` validated: addresses parsed, values in range, the token a secret
/// reference, and a listener that only an authenticated API server can use.
pub(super) fn settings(def: &AuditDef, ctx: &mut Ctx<'_>, sink: &mut SecretSink<'_>) -> AuditSettings {
    let (base, file) = (ctx.base, ctx.file);
    let errors = &mut *ctx.errors;
    let mut out = AuditSettings::default();
    if let Some(l) = &def.listen {
        match l.value.parse::<std::net::SocketAddr>() {
            Ok(a) => out.listen = Some(a),
            Err(_) => {
                errors.push(ConfigError::new(file.pos(&l.referenced), "audit.listen", format!("{:?} is not an address:port", l.value)))
            }
        }
    }
    out.tls = def.tls.as_ref().map(|t| ServerTls {
        cert: relative_to(base, &t.cert_file),
        key: relative_to(base, &t.key_file),
        client_ca: t.client_ca_file.as_deref().map(|c| relative_to(base, c)),
        client_names: t.client_names.as_ref().map(|n| n.value.clone()).unwrap_or_default(),
    });
    if let Some(names) = def.tls.as_ref().and_then(|t| t.client_names.as_ref()) {
        let (pos, key) = (file.pos(&names.referenced), "audit.tls.clientNames");
        if def.tls.as_ref().is_some_and(|t| t.client_ca_file.is_none()) {
            errors.push(ConfigError::new(pos.clone(), key, "needs audit.tls.clientCAFile (no client certificate is asked for)"));
        }
        if names.value.is_empty() {
            errors.push(ConfigError::new(pos.clone(), key, "is empty: name the API server's client certificate"));
        }
        for n in &names.value {
            if rustls::pki_types::ServerName::try_from(n.as_str()).is_err() {
                errors.push(ConfigError::new(pos.clone(), key, format!("{n:?} is not a DNS name or an IP address")));
            }
        }
    }
    out.file = def.file.as_deref().map(|f| relative_to(base, f));
    identities(def, &mut out.argocd_identities);
    // Checked as every token is: a `$key` reference to a set, non-empty secret.
    out.token = def.token.as_ref().and_then(|t| sink.token("audit.token", &t.value, file.pos(&t.referenced), errors));
    let listen_pos = def.listen.as_ref().and_then(|l| file.pos(&l.referenced));
    if let Some(addr) = out.listen {
        let client_ca = def.tls.as_ref().is_some_and(|t| t.client_ca_file.is_some());
        let pinned = def.tls.as_ref().is_some_and(|t| t.client_names.as_ref().is_some_and(|n| !n.value.is_empty()));
        if def.token.is_none() && !client_ca {
            errors.push(ConfigError::new(
                listen_pos.clone(),
                "audit.listen",
                "needs audit.token or audit.tls.clientCAFile: an unauthenticated caller must not be able to create alerts",
            ));
        } else if def.token.is_none() && !pinned {
            errors.push(ConfigError::new(
                listen_pos.clone(),
                "audit.listen",
                "needs audit.token or audit.tls.clientNames besides audit.tls.clientCAFile: any certificate the CA signed \
                 (a tenant's, from a shared issuer) would be let in",
            ));
        }
        if def.tls.is_none() && !addr.ip().is_loopback() {
            errors.push(ConfigError::new(
                listen_pos,
                "audit.listen",
                "needs audit.tls unless it listens on loopback (the token would cross the network in clear)",
            ));
        }
    }
    for (key, slot, value, min, max) in [
        ("audit.maxBodyBytes", &mut out.max_body_bytes, &def.max_body_bytes, 1024, 256 << 20),
        ("audit.queue", &mut out.queue, &def.queue, 100, 1_000_000),
    ] {
        if let Some(v) = value.as_ref().and_then(|v| in_range(file, key, v, min, max, errors)) {
            *slot = v;
        }
    }
    if let Some(w) = &def.window {
        match chrono::Duration::from_std(w.value.0) {
            Ok(d) if d >= chrono::Duration::minutes(1) && d <= chrono::Duration::hours(24) => out.window = d,
            _ => errors.push(ConfigError::new(file.pos(&w.referenced), "audit.window", "is out of range (1m to 24h)")),
        }
    }
    let secs = chrono::Duration::seconds;
    for (key, slot, value, min, max, range) in [
        ("audit.maxEventAge", &mut out.times.max_age, &def.max_event_age, secs(300), secs(86_400), "5m to 24h"),
        ("audit.maxEventAhead", &mut out.times.max_ahead, &def.max_event_ahead, secs(1), secs(3_600), "1s to 1h"),
    ] {
        if let Some(v) = value {
            match chrono::Duration::from_std(v.value.0) {
                Ok(d) if d >= min && d <= max => *slot = d,
                _ => errors.push(ConfigError::new(file.pos(&v.referenced), key, format!("is out of range ({range})"))),
            }
        }
    }
    out
}
