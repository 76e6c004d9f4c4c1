//! The process's exit codes, shared by every command (the daemon included).

/// Success.
pub const OK: i32 = 0;
/// Check found errors, or a replay had failed deliveries.
pub const FAILED: i32 = 1;
/// Bad input (a file that is not an Application, an unknown trigger...).
pub const BAD_INPUT: i32 = 2;
/// `import` converted what it could; some items need a hand.
pub const NEEDS_HAND: i32 = 3;
