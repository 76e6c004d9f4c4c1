//! A tenant's annotations and the values it chooses: bounded before they are
//! expanded, and one Application's bad input fails that Application, never the daemon or
//! the store.
