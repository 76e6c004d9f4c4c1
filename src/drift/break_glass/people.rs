//! The two-person rule: whether two audited writes were made by two people, and
//! whether an identity is a person at all. The API server authenticates an identity as
//! a username, a UID and groups; a UID is empty for client certificates and, by
//! default, for OIDC, so a second account of the same person (`alice` with a token,
//! `alice-admin@corp` with a certificate) differs from the first only by name. Names
//! that look like one person's are therefore taken as one person, and only members of
//! `breakGlass.approvers.groups` may approve at all.

use super::{Settings, Write};

/// Groups the API server gives machine identities, never people: ServiceAccounts
/// (`system:serviceaccounts`, `system:serviceaccounts:<namespace>`) and kubelets.
const SERVICE_ACCOUNT_GROUP: &str = "system:serviceaccounts";
const NODE_GROUP: &str = "system:nodes";
/// Usernames with this prefix are the API server's own or its components'
/// (`system:kube-controller-manager`, `system:node:<name>`, `system:anonymous`).
const SYSTEM_PREFIX: &str = "system:";
const SERVICE_ACCOUNT_PREFIX: &str = "system:serviceaccount:";
/// Cloud service accounts that are always machines, whatever the configuration says:
/// Google's (`ci@project.iam.gserviceaccount.com`, `123-compute@developer.gserviceaccount.com`).
pub const BUILT_IN_MACHINE_USERS: &[&str] = &["*.gserviceaccount.com"];
/// Characters that join a person's name to a suffix naming a second account
/// (`alice-admin`, `alice.ops`, `alice+break-glass`).
const SUFFIX_JOINERS: [char; 4] = ['-', '_', '.', '+'];

/// Whether `name` matches `pattern`, where `*` stands for any run of characters
/// (possibly empty) and everything else for itself. Linear in the lengths: both come
/// from bounded inputs (a configuration pattern, a username of at most 256 characters).
pub fn glob(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    let (mut pi, mut ni) = (0, 0);
    // The last `*` seen and the position in `name` it was tried at.
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ni));
            pi += 1;
        } else if pi < p.len() && p[pi] == n[ni] {
            pi += 1;
            ni += 1;
        } else if let Some((sp, sn)) = star {
            pi = sp + 1;
            ni = sn + 1;
            star = Some((sp, sn + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

/// The part of a username that names the person: without a provider prefix
/// (`oidc:`), a URL issuer (`https://issuer#`), or a mail domain, in lower case.
fn stem(username: &str) -> String {
    let tail = username.rsplit(['#', ':']).next().unwrap_or(username);
    tail.split('@').next().unwrap_or(tail).trim().to_lowercase()
}

/// Whether two usernames look like one person's two accounts: the same stem, or one
/// stem followed by a joiner and a suffix (`alice` and `alice-admin@corp.example`).
/// This refuses some pairs of different people (`al` and `al.smith`); they find a
/// third person, which is the safe side of a two-person rule.
pub fn look_alike(a: &str, b: &str) -> bool {
    let (a, b) = (stem(a), stem(b));
    if a.is_empty() || b.is_empty() {
        return a == b;
    }
    let prefixed = |long: &str, short: &str| long.strip_prefix(short).is_some_and(|rest| rest.starts_with(SUFFIX_JOINERS));
    a == b || prefixed(&a, &b) || prefixed(&b, &a)
}

/// Why a username alone is no person (`None`: it may be one), as it follows "opened
/// by" or "approved by". Used on the names the annotation holds too, so that it
/// applies without the audit input.
pub fn machine_name(username: &str, s: &Settings) -> Option<String> {
    if username.starts_with(SERVICE_ACCOUNT_PREFIX) {
        return (!s.service_account_approvers).then(|| format!("the ServiceAccount {username}: {NO_TOKEN}"));
    }
    if username.starts_with(SYSTEM_PREFIX) {
        return Some(format!("{username}, a Kubernetes system identity: no person"));
    }
    let pattern = BUILT_IN_MACHINE_USERS.iter().map(|p| p.to_string()).chain(s.machine_users.iter().cloned()).find(|p| glob(p, username));
    pattern.map(|p| format!("{username}, a machine identity (it matches {p:?}; breakGlass.approvers.refuseUsers): no person"))
}

const NO_TOKEN: &str = "a token is no second person (breakGlass.approvers.serviceAccounts allows it)";

/// Why an audited identity is no person (`None`: it may be one): a ServiceAccount by
/// name or group (unless allowed), a node, a system identity, a member of one of
/// `breakGlass.approvers.refuseGroups`, or a name matching `refuseUsers`.
pub fn machine(w: &Write, s: &Settings) -> Option<String> {
    let u = &w.username;
    let in_service_accounts =
        w.groups.iter().any(|g| g == SERVICE_ACCOUNT_GROUP || g.strip_prefix(SERVICE_ACCOUNT_GROUP).is_some_and(|r| r.starts_with(':')));
    if in_service_accounts && !u.starts_with(SERVICE_ACCOUNT_PREFIX) && !s.service_account_approvers {
        return Some(format!("{u}, in the group {SERVICE_ACCOUNT_GROUP}: {NO_TOKEN}"));
    }
    if let Some(why) = machine_name(u, s) {
        return Some(why);
    }
    if w.groups.iter().any(|g| g == NODE_GROUP) {
        return Some(format!("{u}, in the group {NODE_GROUP}: a node is no person"));
    }
    let refused = w.groups.iter().find(|g| s.machine_groups.contains(g));
    refused.map(|g| format!("{u}, in the group {g} (breakGlass.approvers.refuseGroups): a machine is no person"))
}

/// The two-person rule on the audited writes that opened and approved an exception:
/// two people (neither the same name nor the same non-empty UID, nor names alike),
/// neither a machine, and the approver in one of `breakGlass.approvers.groups`.
/// `Err` is the refusal.
pub fn two_people(opening: &Write, approval: &Write, s: &Settings) -> Result<(), NotTwoPeople> {
    two_people_text(opening, approval, s).map_err(NotTwoPeople)
}

/// [`two_people`], its refusal as text.
fn two_people_text(opening: &Write, approval: &Write, s: &Settings) -> Result<(), String> {
    let (o, a) = (&opening.username, &approval.username);
    if !approval.uid.is_empty() && approval.uid == opening.uid {
        return Err(format!("{o} and {a} are one identity (UID {}): a second person must approve", approval.uid));
    }
    if o == a || look_alike(o, a) {
        return Err(format!("{o} and {a} look like one person's two accounts: a second person must approve"));
    }
    for (w, role) in [(opening, "opened"), (approval, "approved")] {
        if let Some(why) = machine(w, s) {
            return Err(format!("{role} by {why}"));
        }
    }
    if s.approver_groups.is_empty() {
        return Err("breakGlass.approvers.groups is empty: no one may approve".into());
    }
    if !approval.groups.iter().any(|g| s.approver_groups.contains(g)) {
        return Err(format!("approved by {a}, who is in none of breakGlass.approvers.groups"));
    }
    Ok(())
}

/// Why the two-person rule refused an exception.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct NotTwoPeople(pub String);

impl From<NotTwoPeople> for String {
    fn from(e: NotTwoPeople) -> String {
        e.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob_matches_stars_and_literals() {
        assert!(glob("*.gserviceaccount.com", "ci@proj.iam.gserviceaccount.com"));
        assert!(glob("*", ""));
        assert!(glob("a*b*c", "a-b-x-c"));
        assert!(!glob("*.gserviceaccount.com", "alice@example.com"));
        assert!(!glob("robot-*", "alice"));
        assert!(glob("robot-*", "robot-7"));
    }

    #[test]
    fn names_alike_are_one_person() {
        for (a, b) in
            [("alice", "alice-admin@corp.example"), ("alice", "Alice@corp.example"), ("oidc:alice", "alice.ops"), ("alice", "alice")]
        {
            assert!(look_alike(a, b), "{a} {b}");
        }
        for (a, b) in [("alice", "bob"), ("alice", "alicia"), ("al", "alice"), ("", "bob")] {
            assert!(!look_alike(a, b), "{a} {b}");
        }
    }
}
