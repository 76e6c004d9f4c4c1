//! The registry of destination kinds: the one list of kinds (`model::destination_kinds`,
//! a line per kind naming its folder, the type that implements [`Kind`] there and its
//! name) expanded into the folders and their dispatch. Services (parsing, building),
//! encoders, default limits and the import mapping are looked up here and nowhere
//! else; adding a kind is its folder plus its line in that list.

use std::sync::Arc;

use serde_json::Value;

use super::env::Env;
use super::kind::{self, BuildError, Kind, Limits, SettingsError};
use super::worker::Deliverer;
use crate::model::DestinationKind;
use crate::template::Encoder;

macro_rules! registry {
    ($($(#[$doc:meta])* $module:ident :: $kind:ident = $name:literal),* $(,)?) => {
        $(pub mod $module;)*

        /// The kind-specific configuration of one named service.
        #[derive(Debug, Clone, PartialEq)]
        pub enum ServiceConfig {
            $($kind(<$module::$kind as Kind>::Config)),*
        }

        impl ServiceConfig {
            /// The settings of a service of `kind` (the common keys removed), read and
            /// checked by the kind.
            pub fn parse(kind: DestinationKind, v: Value) -> Result<ServiceConfig, SettingsError> {
                $(if kind == <$module::$kind as Kind>::KIND {
                    return kind::config::<$module::$kind>(v).map(ServiceConfig::$kind);
                })*
                Err(SettingsError::Unregistered(kind.as_str()))
            }

            pub fn kind(&self) -> DestinationKind {
                match self {
                    $(ServiceConfig::$kind(_) => <$module::$kind as Kind>::KIND),*
                }
            }

            /// Every string setting that may reference a `$secret`.
            pub fn strings(&self) -> Vec<&str> {
                match self {
                    $(ServiceConfig::$kind(c) => <$module::$kind as Kind>::secrets(c)),*
                }
            }

            /// The service's client.
            pub fn client(&self, name: &str, env: &Env) -> Result<Arc<dyn Deliverer>, BuildError> {
                match self {
                    $(ServiceConfig::$kind(c) => <$module::$kind as Kind>::client(name, c, env)),*
                }
            }
        }

        /// `kind`'s default rate limit and concurrency.
        pub fn limits(kind: DestinationKind) -> Limits {
            $(if kind == <$module::$kind as Kind>::KIND {
                return <$module::$kind as Kind>::LIMITS;
            })*
            <console::Console as Kind>::LIMITS
        }

        /// `kind`'s encoder.
        pub fn encoder(kind: DestinationKind) -> Encoder {
            $(if kind == <$module::$kind as Kind>::KIND {
                return <$module::$kind as Kind>::ENCODE;
            })*
            <console::Console as Kind>::ENCODE
        }

        /// The kind Argo CD calls `argo_name` (`pagerdutyv2`), and how its settings
        /// become driftwatch's.
        pub fn argo_service(argo_name: &str) -> Option<(DestinationKind, kind::ArgoService, fn(&serde_json::Map<String, Value>) -> Option<kind::Imported>)> {
            $(if let Some(a) = <$module::$kind as Kind>::ARGO && a.name == argo_name {
                return Some((<$module::$kind as Kind>::KIND, a, <$module::$kind as Kind>::import));
            })*
            None
        }

        /// The registered kinds, in registry order.
        pub const REGISTERED: &[DestinationKind] = &[$(<$module::$kind as Kind>::KIND),*];

        /// Argo CD's name of each registered kind Argo CD has.
        pub const ARGO_NAMES: &[Option<&str>] = &[$(match <$module::$kind as Kind>::ARGO { Some(a) => Some(a.name), None => None }),*];

        /// The folders registered, by name.
        pub const FOLDERS: &[&str] = &[$(stringify!($module)),*];
    };
}

crate::model::destination_kinds!(registry);

/// `kind`'s delivery settings before a service overrides them.
pub fn default_settings(kind: DestinationKind) -> super::outcome::DeliverySettings {
    kind::default_settings(limits(kind))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every folder here is a registered kind, every kind driftwatch names is
    /// registered once, and each is registered under its own name.
    #[test]
    fn every_kind_folder_is_registered_and_every_kind_once() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/deliver/kinds");
        let mut folders: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.is_dir())
            .map(|p| p.file_name().unwrap().to_string_lossy().to_string())
            .collect();
        folders.sort();
        let mut registered: Vec<String> = FOLDERS.iter().map(|f| f.to_string()).collect();
        registered.sort();
        assert_eq!(folders, registered, "a folder of src/deliver/kinds that the registry does not list, or the reverse");
        let mut kinds = REGISTERED.to_vec();
        kinds.sort_by_key(|k| k.as_str());
        kinds.dedup();
        assert_eq!(kinds.len(), REGISTERED.len(), "a kind registered twice");
        let mut all = DestinationKind::ALL.to_vec();
        all.sort_by_key(|k| k.as_str());
        assert_eq!(kinds, all, "model::DestinationKind and the registry disagree");
        for (folder, kind) in FOLDERS.iter().zip(REGISTERED) {
            assert_eq!(folder.replace('_', "-"), kind.as_str(), "the folder is named after its kind");
        }
    }

    /// Every template section and field a kind's encoder reads is one a template can
    /// have: a section the schema does not define could never be written, so what the
    /// encoder reads there would silently be nothing.
    #[test]
    fn every_template_section_a_kind_reads_exists() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/deliver/kinds");
        let mut read = 0;
        for folder in FOLDERS {
            let Ok(text) = std::fs::read_to_string(dir.join(folder).join("payload.rs")) else { continue };
            for call in ["message_and_section(\"", "copy_section(\"", "text(\"", "json(\"", "severity_of(\""] {
                for (i, _) in text.match_indices(call) {
                    let rest = &text[i + call.len()..];
                    let lit = &rest[..rest.find('"').unwrap_or(0)];
                    let section = lit.split('.').next().unwrap_or_default();
                    let whole = call.starts_with("message_and_section") || call.starts_with("copy_section");
                    if whole || lit.contains('.') {
                        read += 1;
                        assert!(
                            crate::template::has_section(section),
                            "{folder}/payload.rs reads template section {section:?}, which no template can have"
                        );
                        if !whole && !matches!(section, "webhook" | "alertmanager" | "github") {
                            assert!(
                                crate::template::has_field(lit),
                                "{folder}/payload.rs reads template field {lit:?}, which no template can have"
                            );
                        }
                    }
                }
            }
        }
        assert!(read > 20, "the scan found only {read} reads: it is not reading the encoders");
    }

    /// Each Argo CD service type maps to one kind, and back: `driftwatch import` finds
    /// every kind that declares one by that name, with its own kind and mapping.
    #[test]
    fn argo_cd_names_map_to_one_kind_each() {
        let names: Vec<&str> = ARGO_NAMES.iter().flatten().copied().collect();
        let mut unique = names.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), names.len(), "two kinds claim one Argo CD name: {names:?}");
        for (name, kind) in ARGO_NAMES.iter().zip(REGISTERED) {
            match name {
                Some(n) => {
                    let (found, argo, convert) = argo_service(n).unwrap_or_else(|| panic!("{n}"));
                    assert_eq!((found, argo.name), (*kind, *n));
                    assert!(convert(&serde_json::Map::new()).is_some(), "{n}: a mapping that converts");
                }
                None => {
                    assert!(matches!(kind.as_str(), "console" | "splunk" | "signed-webhook" | "syslog"), "{kind:?} has no Argo CD mapping")
                }
            }
        }
        assert!(argo_service("pagerduty").is_none(), "Argo CD's pagerduty (v1) is not driftwatch's pagerduty (Events v2)");
    }
}
