//! The audit input's identity of a write: a harmless write first, a reused
//! `Audit-ID`, another person's refusal earlier — each security-class write still
//! pages on its own.
