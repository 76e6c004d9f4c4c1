//! The smaller sections of `driftwatch.yaml` validated one by one, each into the
//! settings the runtime keeps: subscriptions and default triggers (the router),
//! `resourceClasses`, `routes`, `history`, `breakGlass`, `attribution`, `state`,
//! `limits`, `operations`.

use super::{
    At, AttributionDef, AuditSettings, BreakGlassDef, ClassMap, ClassRule, ConfigError, ConfigFile, Destination, GlobalSubscription,
    HistoryDef, LimitsDef, OperationsDef, Path, PostgresDef, Retention, RouteDef, RouteTree, Selector, ServerTls, ShardingDef, SourceFile,
    StateDef, StateSettings, clusters, in_range, relative_to,
};

/// The most episodes `history.maxEpisodes` may keep: ten million, a few GB of state.
const MAX_HISTORY_EPISODES: usize = 10_000_000;
/// The most dedup keys `state.maxKeysPerApp` may keep per Application.
const MAX_KEYS_PER_APP: usize = 100_000;

/// Attribution settings, validated.
#[derive(Debug, Clone)]
pub struct AttributionSettings {
    pub ignore_managers: Vec<String>,
    pub enabled: bool,
    pub concurrency: usize,
    pub ttl: std::time::Duration,
    pub destinations: Vec<String>,
    pub read_secrets: bool,
    /// `attribution.argocdNamespace`: Argo CD's control-plane namespace.
    pub argocd_namespace: String,
}

impl Default for AttributionSettings {
    fn default() -> Self {
        AttributionSettings {
            ignore_managers: Vec::new(),
            enabled: true,
            concurrency: 4,
            ttl: std::time::Duration::from_secs(60),
            destinations: vec!["https://kubernetes.default.svc".into(), "in-cluster".into()],
            read_secrets: false,
            argocd_namespace: "argocd".into(),
        }
    }
}

/// What a section's validation reads and where its errors go.
pub(super) struct Ctx<'a> {
    pub file: &'a SourceFile,
    /// The configuration file's directory: relative paths are resolved against it.
    pub base: &'a Path,
    pub errors: &'a mut Vec<ConfigError>,
}

impl Ctx<'_> {
    /// `v` when it lies in `min..=max`, else an error naming `key` at its position.
    fn in_range(&mut self, key: &str, v: &At<usize>, min: usize, max: usize) -> Option<usize> {
        in_range(self.file, key, v, min, max, self.errors)
    }
}

/// `limits:`: what one Application's annotations may subscribe.
pub(super) fn limits(def: &LimitsDef, ctx: &mut Ctx<'_>) -> crate::route::Limits {
    let mut limits = crate::route::Limits::default();
    for (value, key, max, slot) in [
        (&def.max_triggers_per_app, "limits.maxTriggersPerApp", 1_000, &mut limits.max_triggers),
        (&def.max_recipients_per_app, "limits.maxRecipientsPerApp", 10_000, &mut limits.max_recipients),
    ] {
        if let Some(v) = value.as_ref().and_then(|v| ctx.in_range(key, v, 1, max)) {
            *slot = v;
        }
    }
    limits
}

/// `operations:`, validated.
pub(super) struct Operations {
    pub token: Option<crate::secret::Secret>,
    pub open: bool,
    pub tls: Option<ServerTls>,
}

/// `operations:`: the token a secret reference (checked as every token is), TLS files.
pub(super) fn operations(def: &OperationsDef, ctx: &mut Ctx<'_>, sink: &mut clusters::SecretSink<'_>) -> Operations {
    let token = def.token.as_ref().and_then(|t| sink.token("operations.token", &t.value, ctx.file.pos(&t.referenced), ctx.errors));
    let tls = def.tls.as_ref().map(|t| ServerTls {
        cert: relative_to(ctx.base, &t.cert_file),
        key: relative_to(ctx.base, &t.key_file),
        client_ca: None,
        client_names: Vec::new(),
    });
    Operations { token, open: def.open.unwrap_or(false), tls }
}

/// `subscriptions:` (their selectors, triggers and recipients known) and the
/// `defaultTriggers` lists (their triggers known).
pub(super) fn subscriptions(cfg: &ConfigFile, known: &crate::route::tree::Known<'_>, ctx: &mut Ctx<'_>) -> Vec<GlobalSubscription> {
    let mut global = Vec::new();
    for (i, spanned) in cfg.subscriptions.iter().enumerate() {
        let (s, pos) = (&spanned.value, ctx.file.pos(&spanned.referenced));
        let selector = match &s.selector {
            None => Selector::default(),
            Some(sel) => Selector::parse(&sel.value).unwrap_or_else(|e| {
                ctx.errors.push(ConfigError::new(ctx.file.pos(&sel.referenced), format!("subscriptions[{i}].selector"), e.to_string()));
                Selector::default()
            }),
        };
        for t in s.triggers.iter().filter(|t| !(known.trigger)(t)) {
            ctx.errors.push(ConfigError::new(pos.clone(), format!("subscriptions[{i}].triggers"), format!("trigger {t:?} does not exist")));
        }
        let recipients: Vec<Destination> = s.recipients.iter().map(|r| Destination::parse(r)).collect();
        for d in recipients.iter().filter(|d| !(known.service)(&d.service)) {
            ctx.errors.push(ConfigError::new(
                pos.clone(),
                format!("subscriptions[{i}].recipients"),
                format!("service {:?} is not configured", d.service),
            ));
        }
        let units = crate::route::UnitFilter {
            engines: s.engine.values(),
            kinds: s.kind.values(),
            namespaces: s.namespace.values(),
            names: s.name.values(),
        };
        for e in units.engines.iter().filter(|e| !crate::route::UnitFilter::ENGINES.contains(&e.as_str())) {
            ctx.errors.push(ConfigError::new(
                pos.clone(),
                format!("subscriptions[{i}].engine"),
                format!("{e:?} is not one of argocd, flux, fleet"),
            ));
        }
        let kinds: Vec<&str> = crate::unit::Engine::ALL.iter().map(|(e, ..)| e.kind()).collect();
        for k in units.kinds.iter().filter(|k| !kinds.contains(&k.as_str())) {
            ctx.errors.push(ConfigError::new(
                pos.clone(),
                format!("subscriptions[{i}].kind"),
                format!("{k:?} is not one of {}", kinds.join(", ")),
            ));
        }
        global.push(GlobalSubscription { recipients, triggers: s.triggers.clone(), selector, units });
    }
    let default_lists = cfg
        .default_triggers
        .iter()
        .map(|l| ("defaultTriggers".to_string(), l))
        .chain(cfg.default_triggers_by_service.iter().map(|(s, l)| (format!("defaultTriggers.{s}"), l)));
    for (key, list) in default_lists {
        for t in list.value.iter().filter(|t| !(known.trigger)(t)) {
            ctx.errors.push(ConfigError::new(ctx.file.pos(&list.referenced), key.clone(), format!("trigger {t:?} does not exist")));
        }
    }
    global
}

/// `resourceClasses:` on top of the built-in class map.
pub(super) fn classes(def: Option<&At<Vec<ClassRule>>>, ctx: &mut Ctx<'_>) -> ClassMap {
    match def {
        Some(rules) => ClassMap::with_rules(&rules.value).unwrap_or_else(|e| {
            ctx.errors.push(ConfigError::new(ctx.file.pos(&rules.referenced), "resourceClasses", e.to_string()));
            ClassMap::default()
        }),
        None => ClassMap::default(),
    }
}

/// `routes:`: the route tree, every trigger, service and template it names known.
pub(super) fn routes(def: Option<&At<Vec<At<RouteDef>>>>, known: &crate::route::tree::Known<'_>, ctx: &mut Ctx<'_>) -> RouteTree {
    let Some(defs) = def else { return RouteTree::default() };
    RouteTree::build(&defs.value, known).unwrap_or_else(|errs| {
        let file = ctx.file;
        ctx.errors.extend(errs.into_iter().map(|(key, msg, at)| {
            ConfigError::new(at.as_ref().and_then(|l| file.pos(l)).or_else(|| file.pos(&defs.referenced)), key, msg)
        }));
        RouteTree::default()
    })
}

/// `history:`: how much drift history is kept.
pub(super) fn retention(def: &HistoryDef, ctx: &mut Ctx<'_>) -> Retention {
    let defaults = Retention::default();
    Retention {
        max_episodes: def
            .max_episodes
            .as_ref()
            .and_then(|v| ctx.in_range("history.maxEpisodes", v, 1, MAX_HISTORY_EPISODES))
            .unwrap_or(defaults.max_episodes),
        max_age: def.max_age.and_then(|d| chrono::Duration::from_std(d.0).ok()).unwrap_or(defaults.max_age),
    }
}

/// Groups `breakGlass.approvers.groups` may not name: every identity is in the first
/// two, and only machines in the others.
const NOT_APPROVERS: [&str; 4] = ["system:authenticated", "system:unauthenticated", "system:serviceaccounts", "system:nodes"];

/// The first route (depth first) that matches `breakGlass: true`: (its path, where it
/// is written).
fn break_glass_route(defs: &[At<RouteDef>], path: &str) -> Option<(String, Option<serde_saphyr::Location>)> {
    defs.iter().enumerate().find_map(|(i, r)| {
        let here = format!("{path}[{i}]");
        match r.value.matcher.break_glass {
            Some(true) => {
                let name = r.value.name.as_deref().map(|n| format!(" ({n})")).unwrap_or_default();
                Some((format!("{here}{name}"), Some(r.referenced)))
            }
            _ => break_glass_route(&r.value.routes, &format!("{here}.routes")),
        }
    })
}

/// `breakGlass:`; `audited` when the audit input is on (writes are then verified).
/// Break-glass routes without `approvers.groups` are refused: anyone the audit log
/// shows could otherwise approve, a second account of the opener or a robot among
/// them (review N11).
pub(super) fn break_glass(
    def: &BreakGlassDef,
    routes: Option<&At<Vec<At<RouteDef>>>>,
    audited: bool,
    ctx: &mut Ctx<'_>,
) -> crate::drift::break_glass::Settings {
    let approvers = def.approvers.clone().unwrap_or_default();
    let mut settings = crate::drift::break_glass::Settings {
        require_verified: def.require_verified.unwrap_or(false),
        audited,
        approver_groups: approvers.groups.into_iter().filter(|g| !g.trim().is_empty()).collect(),
        service_account_approvers: approvers.service_accounts.unwrap_or(false),
        machine_groups: approvers.refuse_groups,
        machine_users: approvers.refuse_users,
        ..Default::default()
    };
    // Groups every identity, or only machines, are in: as approvers they are no rule.
    for g in settings.approver_groups.iter().filter(|g| NOT_APPROVERS.contains(&g.as_str()) || g.starts_with("system:serviceaccounts:")) {
        ctx.errors.push(ConfigError::new(
            ctx.file.pos_at_start(),
            "breakGlass.approvers.groups",
            format!("{g} is not a group of people who may approve: name the group of your incident commanders"),
        ));
    }
    if settings.approver_groups.is_empty()
        && let Some((route, at)) = routes.and_then(|r| break_glass_route(&r.value, "routes"))
    {
        ctx.errors.push(ConfigError::new(
            at.and_then(|l| ctx.file.pos(&l)).or_else(|| ctx.file.pos_at_start()),
            "breakGlass.approvers.groups",
            format!(
                "is empty, but {route} matches breakGlass: true: set the groups whose members may approve an exception \
                 (breakGlass.approvers.groups), or the second person could be anyone, the opener's other account too"
            ),
        ));
    }
    if let Some(v) = &def.max_for {
        match chrono::Duration::from_std(v.value.0).ok().filter(|d| (chrono::Duration::minutes(1)..=chrono::Duration::days(30)).contains(d))
        {
            Some(d) => settings.max_for = d,
            None => ctx.errors.push(ConfigError::new(
                ctx.file.pos(&v.referenced),
                "breakGlass.maxFor",
                format!(
                    "{} is out of range (1m to 30d)",
                    crate::duration::format(chrono::Duration::from_std(v.value.0).unwrap_or(chrono::Duration::MAX))
                ),
            )),
        }
    }
    settings
}

/// `attribution:`: reading the live objects of drifted resources.
pub(super) fn attribution(def: &AttributionDef, ctx: &mut Ctx<'_>) -> AttributionSettings {
    let defaults = AttributionSettings::default();
    AttributionSettings {
        ttl: def.ttl.map_or(defaults.ttl, |d| d.0),
        ignore_managers: def.ignore_managers.clone(),
        enabled: def.enabled.unwrap_or(true),
        concurrency: def
            .concurrency
            .as_ref()
            .and_then(|v| ctx.in_range("attribution.concurrency", v, 1, 64))
            .unwrap_or(defaults.concurrency),
        destinations: def.destinations.clone().unwrap_or(defaults.destinations),
        read_secrets: def.read_secrets.unwrap_or(defaults.read_secrets),
        argocd_namespace: match &def.argocd_namespace {
            Some(ns) if !is_dns_label(&ns.value) => {
                ctx.errors.push(ConfigError::new(
                    ctx.file.pos(&ns.referenced),
                    "attribution.argocdNamespace",
                    format!("{:?} is not a namespace name (a DNS label: lowercase letters, digits and '-', at most 63)", ns.value),
                ));
                defaults.argocd_namespace
            }
            Some(ns) => ns.value.clone(),
            None => defaults.argocd_namespace,
        },
    }
}

/// A Kubernetes namespace name: an RFC 1123 label.
fn is_dns_label(s: &str) -> bool {
    (1..=63).contains(&s.len())
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// `state:`: where the store is (a file, or PostgreSQL), and its bound on keys per
/// Application.
pub(super) fn state(def: &StateDef, ctx: &mut Ctx<'_>, sink: &mut clusters::SecretSink<'_>) -> StateSettings {
    let postgres = def.postgres.as_ref().and_then(|pg| {
        if def.path.is_some() {
            ctx.errors.push(ConfigError::new(
                ctx.file.pos(&pg.referenced),
                "state.postgres",
                "and state.path both set: the state is in one of them",
            ));
        }
        postgres(&pg.value, ctx, sink)
    });
    StateSettings {
        path: def.path.as_deref().map(|p| relative_to(ctx.base, p)),
        max_keys_per_app: def.max_keys_per_app.as_ref().and_then(|v| ctx.in_range("state.maxKeysPerApp", v, 1, MAX_KEYS_PER_APP)),
        postgres,
    }
}

/// `sharding:`: how many shards (1 without). More than one needs the state in
/// PostgreSQL (each shard's state is a schema of its own there); the audit input with
/// it is the listener (the audit inbox hands each batch to every shard), not a file.
pub(super) fn sharding(def: Option<&At<ShardingDef>>, state: &StateSettings, audit: &AuditSettings, ctx: &mut Ctx<'_>) -> u32 {
    let Some(def) = def else { return 1 };
    let Some(shards) = def.value.shards.as_ref().and_then(|v| ctx.in_range("sharding.shards", v, 1, crate::shard::MAX_SHARDS as usize))
    else {
        return 1;
    };
    let pos = ctx.file.pos(&def.referenced);
    match &state.postgres {
        None if shards > 1 => ctx.errors.push(ConfigError::new(
            pos.clone(),
            "sharding.shards",
            "needs the state in PostgreSQL (state.postgres): each shard keeps its state in a schema of its own",
        )),
        // PostgreSQL cuts longer names to 63 bytes: two shards would share a schema.
        Some(pg) if shards > 1 && pg.for_shard(crate::shard::MAX_SHARDS - 1).schema.len() > 63 => ctx.errors.push(ConfigError::new(
            pos.clone(),
            "sharding.shards",
            format!("state.postgres.schema {:?} is too long for shards: at most 53 bytes, so that <schema>_shard_<n> fits", pg.schema),
        )),
        _ => {}
    }
    // With shards, batches reach whichever replica the Service picks and go to every
    // shard's leader through the audit inbox (`audit::inbox`); a log file is one node's.
    if shards > 1 && audit.file.is_some() {
        ctx.errors.push(ConfigError::new(
            pos,
            "sharding.shards",
            "and audit.file: both set: an audit log file is one node's, and each replica would read its own; \
             with shards, take the API server's batches through audit.listen (every replica takes them)",
        ));
    }
    u32::try_from(shards).unwrap_or(1)
}

/// Whether `s` is a PostgreSQL identifier driftwatch accepts for its schema: lower
/// case letters, digits and `_`, not starting with a digit, at most 63 bytes.
fn schema_name(s: &str) -> bool {
    (1..=63).contains(&s.len())
        && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        && !s.starts_with(|c: char| c.is_ascii_digit())
        && !s.starts_with("pg_")
}

/// `state.postgres:`, validated: the URL a secret reference, every bound in range.
fn postgres(def: &PostgresDef, ctx: &mut Ctx<'_>, sink: &mut clusters::SecretSink<'_>) -> Option<crate::state::PgOptions> {
    let url = sink.token("state.postgres.url", &def.url.value, ctx.file.pos(&def.url.referenced), ctx.errors);
    let schema = match &def.schema {
        Some(s) if !schema_name(&s.value) => {
            ctx.errors.push(ConfigError::new(
                ctx.file.pos(&s.referenced),
                "state.postgres.schema",
                format!("{:?} is not a schema name driftwatch takes (lower case letters, digits and _, not starting with a digit or pg_, up to 63)", s.value),
            ));
            None
        }
        Some(s) => Some(s.value.clone()),
        None => Some("driftwatch".to_string()),
    };
    let max_connections = def.max_connections.as_ref().map_or(Some(8), |v| ctx.in_range("state.postgres.maxConnections", v, 1, 64));
    let connect_timeout = match &def.connect_timeout {
        None => Some(std::time::Duration::from_secs(10)),
        Some(v) if (std::time::Duration::from_secs(1)..=std::time::Duration::from_secs(300)).contains(&v.value.0) => Some(v.value.0),
        Some(v) => {
            ctx.errors.push(ConfigError::new(ctx.file.pos(&v.referenced), "state.postgres.connectTimeout", "is out of range (1s to 5m)"));
            None
        }
    };
    let ca_file = def.ca_file.as_deref().map(|f| relative_to(ctx.base, f));
    if let Some(f) = ca_file.as_ref().filter(|f| !f.is_file()) {
        ctx.errors.push(ConfigError::new(
            ctx.file.pos(&def.url.referenced),
            "state.postgres.caFile",
            format!("{} does not exist or is not a file", f.display()),
        ));
    }
    Some(crate::state::PgOptions {
        url: url?,
        schema: schema?,
        max_connections: u32::try_from(max_connections?).unwrap_or(8),
        connect_timeout: connect_timeout?,
        ca_file,
    })
}
