//! The extender's decisions over what it knows: each node's NRT, the pods bound to each node, and
//! the pods it bound itself that the node's NRT does not count yet (its holds). No I/O: the
//! server feeds it watch events and asks it questions.
//!
//! A hold is released only when the node's NRT shows the pod: its pods fingerprint equals the
//! fingerprint of the pods bound to the node (the held pod among them). An NRT without a
//! fingerprint releases a held pod once it has changed after the pod started running. A pod
//! deleted or finished is released at once. Nothing is released on a timer.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use compact_str::CompactString;
use smallvec::SmallVec;

use k8s_openapi::api::core::v1::Pod;
use numaresources_api::fingerprint::{Fingerprint, FingerprintPod, Method};
use numaresources_api::fit::kubelet::{self, Ask, Placement, PolicyOptions, Refusal};
use numaresources_api::fit::{PodRequests, Resources, has_exclusive_resources};
use numaresources_api::nrt::NodeResourceTopology;
use numaresources_api::nrt::well_known::{ATTR_PODS_FINGERPRINT, ATTR_PODS_FINGERPRINT_METHOD};
use numaresources_api::operator::ScoringStrategyType;

use crate::protocol::{ExtenderFilterResult, HostPriority, MAX_EXTENDER_PRIORITY};
use crate::score;

/// A filter's scores: the pod's UID, and each node it passed (with a view) in order.
type FilterMemo = (String, Vec<(CompactString, i64)>);

/// A pod bound to a node, as the fingerprint and the holds need it.
#[derive(Debug, Clone)]
struct BoundPod {
    namespace: String,
    name: String,
    running: bool,
    pod: Arc<Pod>,
}

/// A pod the extender bound that the node's NRT may not count yet.
#[derive(Debug, Clone)]
pub struct Hold {
    /// The pod's UID.
    pub uid: String,
    /// `namespace/name`, for logs.
    pub pod: String,
    /// What it asks.
    pub requests: PodRequests,
    /// The NRT's resourceVersion when the pod was first seen running (NRTs without a
    /// fingerprint: a later version counts it).
    running_at_version: Option<String>,
}

/// What the extender knows.
#[derive(Debug, Default)]
pub struct Engine {
    nrts: HashMap<String, Arc<NodeResourceTopology>>,
    /// node → uid → pod.
    bound: HashMap<String, BTreeMap<String, BoundPod>>,
    /// uid → node, for pods that move or go.
    node_of: HashMap<String, String>,
    /// node → the pods it holds there, in binding order.
    holds: HashMap<String, Vec<Hold>>,
    /// node → its NRT less its holds, read for the kubelet's rules: what the verbs ask, kept
    /// up to date on every NRT and hold change rather than rebuilt per request. Looked up once
    /// per candidate per verb, mostly from memory no cache holds: a fast hasher, and the name
    /// (inline up to 24 bytes) and the view in the table's own slot, so a lookup reads one
    /// place rather than chasing a pointer to the name and another to the view.
    views: foldhash::HashMap<CompactString, kubelet::Node>,
    options: PolicyOptions,
    strategy: Option<ScoringStrategyType>,
    /// The last filter's scores of the pod (its UID), in the order of the nodes it passed, for
    /// the prioritize call kube-scheduler makes right after it with those nodes: each node is
    /// scored while the filter has it in the cache, and prioritize reads none (a score read off
    /// a view that changed meanwhile is a preference, not a decision).
    last_filter: std::sync::Mutex<Option<FilterMemo>>,
}

impl Engine {
    /// An engine that scores with `strategy` (LeastAllocated when None).
    pub fn new(options: PolicyOptions, strategy: Option<ScoringStrategyType>) -> Self {
        Self { options, strategy, ..Self::default() }
    }

    /// An NRT was created or changed.
    pub fn nrt_changed(&mut self, nrt: NodeResourceTopology) {
        let node = nrt.metadata.name.clone().unwrap_or_default();
        self.nrts.insert(node.clone(), Arc::new(nrt));
        self.release_covered(&node);
        self.refresh(&node);
    }

    /// Every NRT, after a (re)list: what is not listed is gone.
    pub fn replace_nrts(&mut self, nrts: Vec<NodeResourceTopology>) {
        self.nrts.clear();
        self.views.clear();
        for nrt in nrts {
            self.nrt_changed(nrt);
        }
    }

    /// Every bound pod, after a (re)list: what is not listed is gone (and its hold released).
    pub fn replace_pods(&mut self, pods: Vec<Arc<Pod>>) {
        let listed: BTreeSet<String> = pods.iter().filter_map(|p| p.metadata.uid.clone()).collect();
        let gone: Vec<String> = self.node_of.keys().filter(|uid| !listed.contains(*uid)).cloned().collect();
        for uid in gone {
            self.pod_deleted(&uid);
        }
        for pod in pods {
            self.pod_changed(pod);
        }
    }

    /// An NRT was deleted: the node is not NUMA-aware any more (its pods pass unchecked).
    pub fn nrt_deleted(&mut self, node: &str) {
        self.nrts.remove(node);
        self.views.remove(node);
    }

    /// A pod was created or changed. Pods not bound to a node and finished pods are not counted.
    pub fn pod_changed(&mut self, pod: Arc<Pod>) {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let node = pod.spec.as_ref().and_then(|s| s.node_name.clone()).filter(|n| !n.is_empty());
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        let finished = matches!(phase, Some("Succeeded" | "Failed")) || pod.metadata.deletion_timestamp.is_some();
        self.forget_pod(&uid, !finished);
        let (Some(node), false) = (node, finished) else { return };
        let entry = BoundPod {
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            name: pod.metadata.name.clone().unwrap_or_default(),
            running: phase == Some("Running"),
            pod,
        };
        if entry.running {
            let version = self.nrts.get(&node).and_then(|nrt| nrt.metadata.resource_version.clone());
            for hold in self.holds.get_mut(&node).into_iter().flatten().filter(|h| h.uid == uid) {
                hold.running_at_version.get_or_insert(version.clone().unwrap_or_default());
            }
        }
        self.bound.entry(node.clone()).or_default().insert(uid.clone(), entry);
        self.node_of.insert(uid, node.clone());
        self.release_covered(&node);
    }

    /// A pod was deleted.
    pub fn pod_deleted(&mut self, uid: &str) {
        self.forget_pod(uid, false);
    }

    /// Forgets where `uid` was bound; its hold too unless `keep_hold` (the pod is still there).
    fn forget_pod(&mut self, uid: &str, keep_hold: bool) {
        if let Some(node) = self.node_of.remove(uid) {
            if let Some(pods) = self.bound.get_mut(&node) {
                pods.remove(uid);
            }
            if !keep_hold {
                self.release(&node, uid);
            }
        }
        if !keep_hold {
            let held: Vec<String> =
                self.holds.iter().filter(|(_, h)| h.iter().any(|h| h.uid == uid)).map(|(n, _)| n.clone()).collect();
            for node in held {
                self.release(&node, uid);
            }
        }
    }

    fn release(&mut self, node: &str, uid: &str) {
        if let Some(holds) = self.holds.get_mut(node) {
            let before = holds.len();
            holds.retain(|h| h.uid != uid);
            if holds.len() != before {
                self.refresh(node);
            }
        }
    }

    /// Recomputes `node`'s view: its NRT, then each hold reserved in binding order.
    fn refresh(&mut self, node: &str) {
        let Some(nrt) = self.nrts.get(node) else {
            self.views.remove(node);
            return;
        };
        let mut view = kubelet::Node::of(nrt);
        for hold in self.holds.get(node).into_iter().flatten() {
            view = view.reserve(&hold.requests, &self.options).1;
        }
        self.views.insert(CompactString::from(node), view);
    }

    /// The extender bound `pod` to `node`: held against it until the NRT shows it.
    pub fn bound(&mut self, node: &str, pod: &Pod) {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let name = format!(
            "{}/{}",
            pod.metadata.namespace.as_deref().unwrap_or_default(),
            pod.metadata.name.as_deref().unwrap_or_default()
        );
        let holds = self.holds.entry(node.to_owned()).or_default();
        holds.retain(|h| h.uid != uid);
        holds.push(Hold { uid, pod: name, requests: PodRequests::from_pod(pod), running_at_version: None });
        self.refresh(node);
    }

    /// The bind verb's decision, made with the holds as they are now: kube-scheduler binds
    /// asynchronously, so the filter that passed `node` for this pod may have run before
    /// another pod's bind took the room. If the pod still fits it is held there at once (the
    /// next bind counts it); if not, the kubelet's reason, and the pod is not held.
    pub fn hold_if_it_fits(&mut self, node: &str, pod: &Pod) -> Result<(), Refusal> {
        if let Some(view) = self.views.get(node) {
            let requests = PodRequests::from_pod(pod);
            view.place(&Ask::of(&requests), &self.options)?;
        }
        self.bound(node, pod);
        Ok(())
    }

    /// A binding failed: the pod is not on `node` after all.
    pub fn unbound(&mut self, node: &str, uid: &str) {
        self.release(node, uid);
    }

    /// The pods held against `node`.
    pub fn holds(&self, node: &str) -> &[Hold] {
        self.holds.get(node).map(Vec::as_slice).unwrap_or_default()
    }

    /// Releases the holds on `node` its NRT now counts.
    fn release_covered(&mut self, node: &str) {
        let Some(nrt) = self.nrts.get(node).cloned() else { return };
        let Some(holds) = self.holds.get(node).filter(|h| !h.is_empty()) else { return };
        let bound = self.bound.get(node);
        let expected = nrt.attribute(ATTR_PODS_FINGERPRINT).filter(|f| !f.is_empty());
        let covered: BTreeSet<String> = match expected {
            Some(expected) => {
                let computed = fingerprint_of(&nrt, bound.map(|b| b.values()).into_iter().flatten());
                if computed.check(expected).is_err() {
                    return;
                }
                // The NRT counts every pod bound there that we know of: those held are covered.
                holds.iter().filter(|h| bound.is_some_and(|b| b.contains_key(&h.uid))).map(|h| h.uid.clone()).collect()
            }
            None => {
                let version = nrt.metadata.resource_version.clone().unwrap_or_default();
                holds
                    .iter()
                    .filter(|h| h.running_at_version.as_ref().is_some_and(|at| *at != version))
                    .map(|h| h.uid.clone())
                    .collect()
            }
        };
        if let Some(holds) = self.holds.get_mut(node) {
            holds.retain(|h| !covered.contains(&h.uid));
        }
        if !covered.is_empty() {
            self.refresh(node);
        }
    }

    /// After a restart, once the NRTs and pods are read: holds every pod `scheduler` placed that
    /// its node's NRT does not count yet. An NRT whose fingerprint matches the node's pods counts
    /// them all; otherwise the pods bound after the NRT last changed are held.
    pub fn rebuild_holds(&mut self, scheduler: &str) {
        let nodes: Vec<String> = self.bound.keys().cloned().collect();
        for node in nodes {
            let Some(nrt) = self.nrts.get(&node).cloned() else { continue };
            let pods: Vec<BoundPod> = self.bound.get(&node).map(|b| b.values().cloned().collect()).unwrap_or_default();
            if let Some(expected) = nrt.attribute(ATTR_PODS_FINGERPRINT).filter(|f| !f.is_empty())
                && fingerprint_of(&nrt, pods.iter()).check(expected).is_ok()
            {
                continue;
            }
            let changed = last_change(&nrt);
            for pod in pods.iter().filter(|p| {
                p.pod.spec.as_ref().and_then(|s| s.scheduler_name.as_deref()) == Some(scheduler)
                    && !p.running
                    && created(&p.pod).is_none_or(|at| changed.is_none_or(|changed| at >= changed))
            }) {
                self.bound(&node, &pod.pod);
            }
        }
    }

    /// The node's NRT less what the holds take, as an NRT (None: the node has no NRT): the view
    /// the verbs decide on, written back.
    pub fn view(&self, node: &str) -> Option<NodeResourceTopology> {
        Some(self.views.get(node)?.written_into(self.nrts.get(node)?))
    }

    /// The filter verb: each candidate the kubelet would admit the pod on passes; the others
    /// fail with the kubelet's reason. A node without an NRT passes (nothing says it aligns).
    pub fn filter(&self, pod: &Pod, candidates: Vec<String>) -> ExtenderFilterResult {
        let requests = PodRequests::from_pod(pod);
        let ask = Ask::of(&requests);
        let effective = requests.effective();
        // Nodes in the same state refuse in the same words: each text is written once.
        let mut said: foldhash::HashMap<Refusal, Arc<str>> = foldhash::HashMap::default();
        let mut decided = Vec::with_capacity(candidates.len());
        for batch in candidates.chunks(TOUCHED_TOGETHER) {
            let views: SmallVec<[_; TOUCHED_TOGETHER]> =
                batch.iter().map(|node| self.views.get_key_value(node.as_str())).collect();
            std::hint::black_box(views.iter().flatten().fold(0, |mixed, (_, view)| mixed ^ view.touch()));
            decided.extend(views.into_iter().map(|found| {
                let Some((name, view)) = found else { return Decision::NoView };
                match view.place(&ask, &self.options) {
                    Ok(placement) => Decision::Passes(name, self.score(&placement, view, &effective)),
                    Err(refusal) => {
                        let unresolvable = matches!(refusal, Refusal::TooManyNumaNodes { .. });
                        let text = said
                            .entry(refusal)
                            .or_insert_with_key(|refusal| Arc::from(format!("numa: {refusal}")))
                            .clone();
                        Decision::Refused { text, unresolvable }
                    }
                }
            }));
        }
        let mut passing = Vec::with_capacity(candidates.len());
        let mut placed = Vec::with_capacity(candidates.len());
        // Gathered in candidate order and built into maps at once (sorted, then laid out in one
        // pass): far cheaper than a tree insert per refusing node.
        let mut failed = Vec::new();
        let mut unresolvable = Vec::new();
        for (node, decision) in candidates.into_iter().zip(decided) {
            match decision {
                Decision::NoView => passing.push(node),
                Decision::Passes(name, score) => {
                    placed.push((name.clone(), score));
                    passing.push(node);
                }
                Decision::Refused { text, unresolvable: true } => unresolvable.push((node, text)),
                Decision::Refused { text, unresolvable: false } => failed.push((node, text)),
            }
        }
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        *self.last_filter.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some((uid, placed));
        ExtenderFilterResult {
            nodes: None,
            node_names: Some(passing),
            failed_nodes: Some(failed.into_iter().collect()),
            failed_and_unresolvable_nodes: Some(unresolvable.into_iter().collect()),
            error: String::new(),
        }
    }

    /// The prioritize verb: each candidate scored over the NUMA nodes the kubelet would align the
    /// pod on (0..=10); a node without an NRT, or where the kubelet aligns nothing, scores 0.
    pub fn prioritize(&self, pod: &Pod, candidates: Vec<String>) -> Vec<HostPriority> {
        let requests = PodRequests::from_pod(pod);
        let ask = Ask::of(&requests);
        let effective = requests.effective();
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        let memo = self.last_filter.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
        let remembered =
            memo.as_ref().filter(|(of, _)| of == uid && !uid.is_empty()).map(|(_, placed)| placed.as_slice());
        let mut remembered = Remembered::new(remembered.unwrap_or_default());
        let scores = candidates
            .into_iter()
            .map(|node| {
                let score = remembered.find(&node).unwrap_or_else(|| self.score_anew(&node, &ask, &effective));
                HostPriority { host: node, score }
            })
            .collect();
        if let Some(memo) = memo.filter(|(of, _)| of == uid) {
            // Kept for a prioritize that comes again for this pod.
            *self.last_filter.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(memo);
        }
        scores
    }

    /// A node's score read off its view now (0: no view, or the pod does not fit there).
    fn score_anew(&self, node: &str, ask: &Ask<'_>, effective: &Resources) -> i64 {
        let Some(view) = self.views.get(node) else { return 0 };
        view.place(ask, &self.options).map_or(0, |placement| self.score(&placement, view, effective))
    }

    /// A placement's score on the extender's scale.
    fn score(&self, placement: &Placement, view: &kubelet::Node, effective: &Resources) -> i64 {
        score::of(placement, view, effective, self.strategy.as_ref()).clamp(0, MAX_EXTENDER_PRIORITY)
    }
}

/// Candidates looked up and touched before any of them is decided: enough for the processor to
/// wait for their memory together, few enough that it is still in the cache when decided.
const TOUCHED_TOGETHER: usize = 16;

/// What the filter decided for one candidate.
enum Decision<'a> {
    /// No NRT: nothing says the node aligns, so it passes.
    NoView,
    /// The kubelet admits the pod: the node's name and its score.
    Passes(&'a CompactString, i64),
    /// The kubelet's reason; `unresolvable` when no preemption helps.
    Refused { text: Arc<str>, unresolvable: bool },
}

/// The filter's scores, found for prioritize's candidates: those are the nodes the filter
/// passed, in its order, less any that another filter dropped, so one walk finds them all; a
/// candidate out of order turns the rest into a map (never a walk per candidate).
struct Remembered<'a> {
    in_order: std::slice::Iter<'a, (CompactString, i64)>,
    by_name: Option<foldhash::HashMap<&'a str, i64>>,
}

impl<'a> Remembered<'a> {
    fn new(scored: &'a [(CompactString, i64)]) -> Self {
        Self { in_order: scored.iter(), by_name: None }
    }

    fn find(&mut self, node: &str) -> Option<i64> {
        if let Some(by_name) = &self.by_name {
            return by_name.get(node).copied();
        }
        if let Some(at) = self.in_order.clone().position(|(name, _)| name == node) {
            return self.in_order.nth(at).map(|(_, score)| *score);
        }
        let by_name = self.in_order.as_slice().iter().map(|(name, score)| (name.as_str(), *score)).collect();
        self.by_name = Some(by_name);
        None
    }
}

/// A bound pod as the fingerprint selection sees it, from its spec.
struct Selected<'a> {
    pod: &'a BoundPod,
    exclusive: bool,
}

impl FingerprintPod for Selected<'_> {
    fn namespace(&self) -> &str {
        &self.pod.namespace
    }

    fn name(&self) -> &str {
        &self.pod.name
    }

    fn has_exclusive_resources(&self) -> bool {
        self.exclusive
    }
}

/// The fingerprint of `pods` by the NRT's method (`all` when it names none, as the scheduler's
/// Autodetect reads it).
fn fingerprint_of<'a>(nrt: &NodeResourceTopology, pods: impl Iterator<Item = &'a BoundPod>) -> Fingerprint {
    let method = nrt.attribute(ATTR_PODS_FINGERPRINT_METHOD).and_then(|m| m.parse().ok()).unwrap_or(Method::All);
    let listed: BTreeSet<String> = nrt.zones.iter().flat_map(|z| &z.resources).map(|r| r.name.to_string()).collect();
    let selected: Vec<Selected<'_>> = pods
        .map(|pod| Selected {
            pod,
            exclusive: has_exclusive_resources(&pod.pod, PodRequests::from_pod(&pod.pod).qos, &listed),
        })
        .collect();
    Fingerprint::from_pods(method, selected.iter())
}

/// When the NRT last changed (its server-set annotation), in Unix seconds.
fn last_change(nrt: &NodeResourceTopology) -> Option<i64> {
    let text = nrt.metadata.annotations.as_ref()?.get(numaresources_api::nrt::well_known::ANNOTATION_LAST_CHANGE)?;
    text.parse::<k8s_openapi::jiff::Timestamp>().ok().map(|t| t.as_second())
}

/// When the pod was created, in Unix seconds.
fn created(pod: &Pod) -> Option<i64> {
    pod.metadata.creation_timestamp.as_ref().map(|t| t.0.as_second())
}

#[cfg(test)]
mod tests;
