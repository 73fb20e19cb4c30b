//! Groups: the policies that must be decided by the same objects, because some route
//! stacks them (a stack is all or nothing only inside one object).

use std::collections::BTreeMap;

use super::policies::{KeyKind, PolicyEntry};
use super::Route;

/// Policies that must be decided by the same objects, because some route stacks them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Group {
    /// Object names are `<name>#<shard>`.
    pub name: String,
    /// How many objects the group's keys are spread over (1 when its policies count by
    /// different keys: then one object must see every key to stay all-or-nothing).
    pub shards: u32,
    /// One object per key instead of shards: the naive design, which only the load test
    /// asks for (`BENCH_OBJECT_PER_KEY`, see [`super::Config::objects_per_key`]); never
    /// set by a config.
    pub object_per_key: bool,
}

/// Puts each policy in its group (union of the stacks that share a policy), names the
/// groups and sizes their shards (`default_shards` unless a member asks; 1 when the members
/// count by different keys or globally); sets every route's group.
pub(super) fn assign(
    policies: &mut [PolicyEntry],
    shard_wish: &[Option<u32>],
    routes: &mut [Route],
    default_shards: u32,
) -> Vec<Group> {
    let mut parent: Vec<usize> = (0..policies.len()).collect();
    fn find(p: &mut [usize], i: usize) -> usize {
        let mut r = i;
        while p[r] != r {
            r = p[r];
        }
        p[i] = r;
        r
    }
    for r in routes.iter() {
        for w in r.policies.windows(2) {
            let (a, b) = (find(&mut parent, w[0]), find(&mut parent, w[1]));
            if a != b {
                parent[a.max(b)] = a.min(b);
            }
        }
    }
    let mut count = 0;
    let mut root_group: BTreeMap<usize, usize> = BTreeMap::new();
    for (i, policy) in policies.iter_mut().enumerate() {
        let root = find(&mut parent, i);
        policy.group = *root_group.entry(root).or_insert_with(|| {
            count += 1;
            count - 1
        });
    }
    let groups = (0..count)
        .map(|g| {
            let members: Vec<usize> = (0..policies.len())
                .filter(|&i| policies[i].group == g)
                .collect();
            let first = &policies[members[0]];
            let same_key = members.iter().all(|&i| policies[i].key == first.key);
            Group {
                name: members
                    .iter()
                    .map(|&i| policies[i].name.as_str())
                    .collect::<Vec<_>>()
                    .join("+"),
                shards: if !same_key || first.key == KeyKind::Global {
                    1
                } else {
                    members
                        .iter()
                        .filter_map(|&i| shard_wish[i])
                        .max()
                        .unwrap_or(default_shards)
                },
                object_per_key: false,
            }
        })
        .collect();
    for r in routes.iter_mut() {
        r.group = r.policies.first().map(|&k| policies[k].group);
    }
    groups
}

/// Whether every policy of `group` counts by the same key (one object per key is then
/// still all or nothing).
pub(super) fn one_key(policies: &[PolicyEntry], group: usize) -> bool {
    let mut keys = policies.iter().filter(|p| p.group == group).map(|p| p.key);
    let first = keys.next();
    keys.all(|k| Some(k) == first)
}
