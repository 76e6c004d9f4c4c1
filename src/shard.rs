//! Which shard an Application belongs to: its destination cluster, Argo CD's own unit
//! of sharding, hashed onto `0..shards` by jump consistent hashing (Lamping and Veach,
//! "A Fast, Minimal Memory, Consistent Hash Algorithm", 2014). Going from `n` shards to
//! `n + 1` moves only the clusters the new shard takes, about `1/(n+1)` of them; no
//! cluster moves between two old shards. Ten lines of arithmetic, written here rather
//! than taken from a crate: the ones published are unmaintained or wrap the same lines.
//!
//! The cluster's hash is the first eight bytes of its SHA-256: stable across builds,
//! processes and machines (the standard library's hasher is seeded per process, and
//! every replica must agree).

use serde_json::Value;
use sha2::Digest;

/// The most shards a configuration may ask for (`sharding.shards`).
pub const MAX_SHARDS: u32 = 256;

/// The cluster an Application (its whole object) deploys to: `spec.destination.server`,
/// else `name:` and `spec.destination.name`. An Application with neither (Argo CD
/// refuses it) counts as the cluster `""`: it still has exactly one shard.
pub fn destination_cluster(object: &Value) -> String {
    let field = |f: &str| object.pointer(&format!("/spec/destination/{f}")).and_then(Value::as_str).filter(|s| !s.is_empty());
    match (field("server"), field("name")) {
        (Some(server), _) => server.trim_end_matches('/').to_string(),
        (None, Some(name)) => format!("name:{name}"),
        (None, None) => String::new(),
    }
}

/// The shard of `cluster` among `shards` (at least one): `0..shards`.
pub fn of_cluster(cluster: &str, shards: u32) -> u32 {
    let digest = sha2::Sha256::digest(cluster.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    jump(u64::from_be_bytes(first), shards.max(1))
}

/// The shard of an Application (its whole object) among `shards`.
pub fn of_app(object: &Value, shards: u32) -> u32 {
    of_cluster(&destination_cluster(object), shards)
}

/// Jump consistent hash: the bucket of `key` among `buckets` (at least one).
fn jump(mut key: u64, buckets: u32) -> u32 {
    let (mut b, mut j): (i64, i64) = (-1, 0);
    while j < i64::from(buckets) {
        b = j;
        key = key.wrapping_mul(2_862_933_555_777_941_757).wrapping_add(1);
        // (b + 1) * 2^31 / ((key >> 33) + 1), in floating point as the paper does.
        j = ((b + 1) as f64 * ((1u64 << 31) as f64 / ((key >> 33) + 1) as f64)) as i64;
    }
    u32::try_from(b).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clusters(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("https://cluster-{i}.example:6443")).collect()
    }

    #[test]
    fn growing_by_one_shard_moves_only_what_the_new_shard_takes() {
        let all = clusters(10_000);
        for n in [1u32, 3, 4, 8, 16] {
            let mut moved = 0;
            for c in &all {
                let (before, after) = (of_cluster(c, n), of_cluster(c, n + 1));
                if before != after {
                    // Never between two old shards: only onto the new one.
                    assert_eq!(after, n, "{c} moved from {before} to {after}");
                    moved += 1;
                }
            }
            // About 1/(n+1) of them: within a fifth of that share.
            let share = all.len() as f64 / f64::from(n + 1);
            assert!((moved as f64 - share).abs() < share / 5.0, "{n} -> {}: {moved} moved, about {share} expected", n + 1);
        }
    }

    #[test]
    fn shards_are_filled_evenly_and_every_replica_agrees() {
        let all = clusters(4_000);
        let mut counts = [0usize; 4];
        for c in &all {
            counts[of_cluster(c, 4) as usize] += 1;
        }
        for n in counts {
            assert!((800..1_200).contains(&n), "{counts:?}");
        }
        // Fixed values: a change of hash would move every cluster between replicas of
        // two versions during a rolling update.
        let fixed: Vec<u32> = ["https://kubernetes.default.svc", "name:in-cluster", "", "https://cluster-7.example:6443"]
            .iter()
            .map(|c| of_cluster(c, 16))
            .collect();
        assert_eq!(fixed, [1, 6, 5, 15]);
        assert_eq!(of_cluster("anything", 1), 0);
        assert_eq!(of_cluster("anything", 0), 0);
    }

    #[test]
    fn the_destination_is_the_server_else_the_name() {
        let app = |d: Value| serde_json::json!({"spec": {"destination": d}});
        assert_eq!(destination_cluster(&app(serde_json::json!({"server": "https://a:6443/", "name": "a"}))), "https://a:6443");
        assert_eq!(destination_cluster(&app(serde_json::json!({"server": "", "name": "prod"}))), "name:prod");
        assert_eq!(destination_cluster(&app(serde_json::json!({"namespace": "x"}))), "");
        assert_eq!(destination_cluster(&serde_json::json!({"spec": 3})), "");
        assert!(of_app(&app(serde_json::json!({"name": "prod"})), 7) < 7);
    }
}
