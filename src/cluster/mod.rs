//! Everything that talks to Kubernetes: the client ([`client`]), the list/watch of
//! Applications and AppProjects turned into plain `Change`s ([`watch`]), the background
//! reads of drifted resources' live objects ([`live`]) and leader election on a Lease
//! ([`lease`]), and the calls of `driftwatch break-glass` ([`break_glass`]). No kube
//! type leaves this folder (`tests/layers.rs` checks that none is named outside it).

pub mod argocd;
pub mod break_glass;
pub mod client;
pub mod lease;
pub mod live;
pub mod shards;
pub mod watch;
