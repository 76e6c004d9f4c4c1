//! Drift intelligence, pure: what kind of thing drifted ([`classes`]), who changed it
//! ([`attribution`], from `managedFields`) and the drift episode it belongs to
//! ([`episode`]).

pub mod attribution;
pub mod classes;
pub mod episode;
