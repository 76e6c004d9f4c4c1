//! Everything that talks to Kubernetes: the client ([`client`]), the list/watch of
//! Applications and AppProjects turned into plain `Change`s ([`watch`]), the background
//! reads of drifted resources' live objects ([`live`]) and leader election on a Lease
//! ([`lease`]). No kube type leaves this folder.

pub mod argocd;
pub mod client;
pub mod lease;
pub mod live;
pub mod watch;
