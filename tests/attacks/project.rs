//! What an Application may reach: Argo CD's admission rules (`sourceNamespaces`, one
//! of destination name or server, cluster-scoped kinds by discovery and
//! `clusterResourceWhitelist`) decide what is read and indexed.
