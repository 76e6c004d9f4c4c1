//! Writes to the Application itself outside `spec` (`operation`, notification
//! annotations, `status`): attempts like any other write, and a sync's initiator from
//! the audit input.
