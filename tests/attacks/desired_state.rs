//! Desired state the writer controls: Argo CD's field manager names and the live
//! object's own last-applied annotation never make a security field Git's.
