//! The canonical form of a topology and equality on it.
//!
//! Every NRT event makes kube-scheduler requeue pods, so the API server drops writes that do not
//! change the topology. Producers list zones, resources, costs and attributes in whatever order
//! they like; the canonical form sorts each list by name (natural order, so `node-2` comes before
//! `node-10`), attributes by name then value, and leaves `topologyPolicies` alone (its order
//! is meaningful: the scheduler reads the first entry).

use std::cmp::Ordering;

use super::{AttributeInfo, CostInfo, NodeResourceTopology, ResourceInfo, Zone};

impl NodeResourceTopology {
    /// Puts zones, resources, costs and attributes in canonical order, in place.
    pub fn canonicalize(&mut self) {
        sort_attributes(&mut self.attributes);
        self.zones.sort_by(|a, b| natural_cmp(&a.name, &b.name));
        for zone in &mut self.zones {
            zone.resources.sort_by(|a, b| natural_cmp(&a.name, &b.name));
            zone.costs.sort_by(cost_cmp);
            sort_attributes(&mut zone.attributes);
        }
    }

    /// This object in canonical order.
    pub fn canonical(mut self) -> Self {
        self.canonicalize();
        self
    }

    /// True when the two describe the same topology: equal zones, resources (by quantity value),
    /// costs, attributes and topology policies once put in canonical order. Metadata is not
    /// compared.
    pub fn same_topology(&self, other: &Self) -> bool {
        self.topology_policies == other.topology_policies
            && same_attributes(&self.attributes, &other.attributes)
            && same_sorted(&self.zones, &other.zones, |x, y| natural_cmp(&x.name, &y.name), same_zone)
    }
}

fn same_zone(a: &Zone, b: &Zone) -> bool {
    a.name == b.name
        && a.zone_type == b.zone_type
        && a.parent == b.parent
        && same_attributes(&a.attributes, &b.attributes)
        && same_sorted(&a.resources, &b.resources, |x: &ResourceInfo, y| natural_cmp(&x.name, &y.name), |x, y| x == y)
        && same_sorted(&a.costs, &b.costs, cost_cmp, |x, y| x == y)
}

fn same_attributes(a: &[AttributeInfo], b: &[AttributeInfo]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let (mut a, mut b): (Vec<_>, Vec<_>) = (a.iter().collect(), b.iter().collect());
    a.sort_by(|x, y| attribute_cmp(x, y));
    b.sort_by(|x, y| attribute_cmp(x, y));
    a == b
}

/// Compares two lists as if both were sorted by `order` (the order `canonicalize` uses, so two
/// costs of one name in either order compare alike), without copying them.
fn same_sorted<T>(a: &[T], b: &[T], order: impl Fn(&T, &T) -> Ordering, same: impl Fn(&T, &T) -> bool) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let (mut a, mut b): (Vec<&T>, Vec<&T>) = (a.iter().collect(), b.iter().collect());
    a.sort_by(|x, y| order(x, y));
    b.sort_by(|x, y| order(x, y));
    a.iter().zip(&b).all(|(x, y)| same(x, y))
}

fn cost_cmp(a: &CostInfo, b: &CostInfo) -> Ordering {
    natural_cmp(&a.name, &b.name).then(a.value.cmp(&b.value))
}

fn sort_attributes(attributes: &mut [AttributeInfo]) {
    attributes.sort_by(attribute_cmp);
}

fn attribute_cmp(a: &AttributeInfo, b: &AttributeInfo) -> Ordering {
    natural_cmp(&a.name, &b.name).then_with(|| a.value.cmp(&b.value))
}

/// Orders names with embedded numbers by value: `node-2` < `node-10`, `a` < `b`.
/// Equal only when the strings are equal, so sorting by it is deterministic.
pub(crate) fn natural_cmp(a: &str, b: &str) -> Ordering {
    let (mut x, mut y) = (a.as_bytes(), b.as_bytes());
    loop {
        match (x.first(), y.first()) {
            (None, None) => return a.cmp(b),
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some(p), Some(q)) if p.is_ascii_digit() && q.is_ascii_digit() => {
                let (dx, rx) = split_digits(x);
                let (dy, ry) = split_digits(y);
                let (tx, ty) = (trim_zeros(dx), trim_zeros(dy));
                let order = tx.len().cmp(&ty.len()).then_with(|| tx.cmp(ty));
                if order != Ordering::Equal {
                    return order;
                }
                (x, y) = (rx, ry);
            }
            (Some(p), Some(q)) => {
                if p != q {
                    return p.cmp(q);
                }
                (x, y) = (&x[1..], &y[1..]);
            }
        }
    }
}

fn split_digits(s: &[u8]) -> (&[u8], &[u8]) {
    let n = s.iter().take_while(|b| b.is_ascii_digit()).count();
    s.split_at(n)
}

fn trim_zeros(s: &[u8]) -> &[u8] {
    let n = s.iter().take_while(|b| **b == b'0').count();
    &s[n..]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quantity::Quantity;

    fn resource(name: &str, amount: &str) -> ResourceInfo {
        let q = Quantity::parse(amount).unwrap();
        ResourceInfo { name: name.into(), capacity: q, allocatable: q, available: q }
    }

    fn zone(name: &str, resources: Vec<ResourceInfo>) -> Zone {
        Zone {
            name: name.into(),
            zone_type: "Node".into(),
            resources,
            costs: vec![CostInfo { name: "node-10".into(), value: 20 }, CostInfo { name: "node-2".into(), value: 10 }],
            ..Zone::default()
        }
    }

    fn sample() -> NodeResourceTopology {
        let mut nrt = NodeResourceTopology::new("worker-0");
        nrt.attributes = vec![
            AttributeInfo::new("topologyManagerScope", "container"),
            AttributeInfo::new("topologyManagerPolicy", "single-numa-node"),
        ];
        nrt.zones = vec![
            zone("node-10", vec![resource("memory", "1Gi"), resource("cpu", "4")]),
            zone("node-2", vec![resource("cpu", "4"), resource("memory", "1Gi")]),
        ];
        nrt
    }

    #[test]
    fn canonical_order_sorts_every_list_by_name_naturally() {
        let nrt = sample().canonical();
        let zones: Vec<&str> = nrt.zones.iter().map(|z| z.name.as_str()).collect();
        assert_eq!(zones, ["node-2", "node-10"]);
        let resources: Vec<&str> = nrt.zones[1].resources.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(resources, ["cpu", "memory"]);
        let costs: Vec<&str> = nrt.zones[0].costs.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(costs, ["node-2", "node-10"]);
        assert_eq!(nrt.attributes[0].name, "topologyManagerPolicy");
    }

    #[test]
    fn two_costs_of_one_name_in_either_order_are_the_same_topology() {
        // Found by the round-trip property test: canonical order sorts such costs by value, and
        // the comparison must use that order too, not the name alone.
        let mut a = sample();
        a.zones[0].costs = vec![CostInfo { name: "i".into(), value: 197 }, CostInfo { name: "i".into(), value: 0 }];
        let b = a.clone().canonical();
        assert!(b.same_topology(&a));
        assert!(a.same_topology(&b));
    }

    #[test]
    fn reordering_or_respelling_quantities_is_the_same_topology() {
        let a = sample();
        let mut b = sample().canonical();
        b.zones[0].resources[1].capacity = Quantity::parse("1073741824").unwrap();
        b.metadata.resource_version = Some("42".into());
        assert!(a.same_topology(&b));
        assert!(b.same_topology(&a));
    }

    #[test]
    fn any_real_change_is_a_different_topology() {
        let base = sample();
        let changes: [fn(&mut NodeResourceTopology); 9] = [
            |n| n.zones[0].resources[0].available = Quantity::from_i64(1),
            |n| n.zones[0].resources.pop().map(drop).unwrap_or(()),
            |n| n.zones[1].costs[0].value = 11,
            |n| n.zones[1].zone_type = "Socket".into(),
            |n| n.zones[1].parent = "socket-0".into(),
            |n| n.zones[0].attributes.push(AttributeInfo::new("x", "y")),
            |n| n.attributes[0].value = "pod".into(),
            |n| n.topology_policies.push("SingleNUMANodeContainerLevel".into()),
            |n| n.zones[0].name = "node-3".into(),
        ];
        for (i, change) in changes.iter().enumerate() {
            let mut changed = sample();
            change(&mut changed);
            assert!(!base.same_topology(&changed), "change {i} went unnoticed");
        }
    }

    #[test]
    fn natural_order() {
        let mut names = ["node-10", "node-2", "node-1", "cpu", "node-02", "a10b", "a9b"];
        names.sort_by(|a, b| natural_cmp(a, b));
        assert_eq!(names, ["a9b", "a10b", "cpu", "node-1", "node-02", "node-2", "node-10"]);
    }
}
