//! `driftwatch import`: an Argo CD notifications configuration turned into driftwatch's.
pub mod expr;
pub mod gotmpl;
