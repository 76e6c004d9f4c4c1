//! Break-glass exceptions: a closed one never comes back, and the two-person rule
//! holds for identities without a UID and for machine identities.
