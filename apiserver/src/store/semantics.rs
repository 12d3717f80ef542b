//! kube-apiserver's write rules over one object, as pure functions: what the garbage collector's
//! finalizers a deletion sets ([`Propagation`]), preconditions, the server-set freshness stamp and
//! what counts as no change. Nothing here touches the store.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use numaresources_api::nrt::NodeResourceTopology;

use super::{StoreError, Stored};

/// The server-set annotation holding when the object last changed (see its definition).
pub use numaresources_api::nrt::well_known::ANNOTATION_LAST_CHANGE as LAST_CHANGE_ANNOTATION;

/// The garbage collector's finalizer for an `Orphan` deletion: it removes the dependents' owner
/// references, then this finalizer, and the object goes.
pub const ORPHAN_FINALIZER: &str = "orphan";
/// The garbage collector's finalizer for a `Foreground` deletion: it deletes the dependents
/// (those with `blockOwnerDeletion` first), then removes this finalizer.
pub const FOREGROUND_FINALIZER: &str = "foregroundDeletion";

/// What a deletion does with the object's dependents: DeleteOptions' `propagationPolicy`, or
/// the deprecated `orphanDependents` (true is `Orphan`, false `Background`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Propagation {
    /// Neither option given: a garbage-collector finalizer the object carries already decides;
    /// without one, `Background` (kube-apiserver's default for custom resources).
    #[default]
    Default,
    /// The object goes now (unless other finalizers hold it); the collector deletes the
    /// dependents afterwards.
    Background,
    /// The object stays, with [`FOREGROUND_FINALIZER`], until its dependents are gone.
    Foreground,
    /// The object stays, with [`ORPHAN_FINALIZER`], until its dependents no longer name it.
    Orphan,
}

impl Propagation {
    /// The object's finalizers once this deletion sets the garbage collector's: the other
    /// finalizers as they are, then at most one of [`ORPHAN_FINALIZER`] and
    /// [`FOREGROUND_FINALIZER`] (kube-apiserver's `deletionFinalizersForGarbageCollection`).
    pub fn finalizers(self, current: &[String]) -> Vec<String> {
        let policy = match self {
            // The first collector finalizer the object carries wins, as in kube-apiserver.
            Self::Default => match current.iter().find(|f| is_collector_finalizer(f)).map(String::as_str) {
                Some(ORPHAN_FINALIZER) => Self::Orphan,
                Some(_) => Self::Foreground,
                None => Self::Background,
            },
            other => other,
        };
        let mut out: Vec<String> = current.iter().filter(|f| !is_collector_finalizer(f)).cloned().collect();
        match policy {
            Self::Orphan => out.push(ORPHAN_FINALIZER.to_owned()),
            Self::Foreground => out.push(FOREGROUND_FINALIZER.to_owned()),
            Self::Default | Self::Background => {}
        }
        out
    }
}

fn is_collector_finalizer(finalizer: &str) -> bool {
    finalizer == ORPHAN_FINALIZER || finalizer == FOREGROUND_FINALIZER
}

/// Whether two finalizer lists hold the same names (kube-apiserver compares them as sets).
pub(super) fn same_set(a: &[String], b: &[String]) -> bool {
    a.iter().all(|f| b.contains(f)) && b.iter().all(|f| a.contains(f))
}

/// Preconditions a write must meet.
#[derive(Debug, Default, Clone)]
pub struct Preconditions {
    /// The object's current resourceVersion must be this.
    pub resource_version: Option<String>,
    /// The object's uid must be this.
    pub uid: Option<String>,
}

pub(super) fn check_preconditions(current: &Stored, preconditions: &Preconditions) -> Result<(), StoreError> {
    if let Some(rv) = preconditions.resource_version.as_deref()
        && rv != current.revision.to_string()
    {
        return Err(StoreError::Conflict(format!(
            "Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {}",
            current.revision
        )));
    }
    if let Some(uid) = preconditions.uid.as_deref() {
        let object = current.object()?;
        let current_uid = object.metadata.uid.as_deref().unwrap_or_default();
        if uid != current_uid {
            return Err(StoreError::Conflict(format!(
                "Precondition failed: UID in precondition: {uid}, UID in object meta: {current_uid}"
            )));
        }
    }
    Ok(())
}

/// Same topology and same user-owned metadata: the write would change nothing. The server-set
/// freshness annotation is not the user's and does not count.
pub(super) fn unchanged(current: &NodeResourceTopology, next: &NodeResourceTopology) -> bool {
    let (a, b): (&ObjectMeta, &ObjectMeta) = (&current.metadata, &next.metadata);
    current.same_topology(next)
        && a.labels.as_ref().filter(|m| !m.is_empty()) == b.labels.as_ref().filter(|m| !m.is_empty())
        && user_annotations(a).eq(user_annotations(b))
        && a.owner_references.as_deref().unwrap_or_default() == b.owner_references.as_deref().unwrap_or_default()
        && finalizers(a) == finalizers(b)
        && b.deletion_timestamp.is_none() == a.deletion_timestamp.is_none()
}

fn user_annotations(meta: &ObjectMeta) -> impl Iterator<Item = (&String, &String)> {
    meta.annotations.iter().flatten().filter(|(key, _)| *key != LAST_CHANGE_ANNOTATION)
}

/// Records `now` as the object's last change.
pub(super) fn stamp_last_change(meta: &mut ObjectMeta, now: Timestamp) {
    meta.annotations.get_or_insert_default().insert(LAST_CHANGE_ANNOTATION.to_owned(), now.to_string());
}

pub(super) fn finalizers(meta: &ObjectMeta) -> &[String] {
    meta.finalizers.as_deref().unwrap_or_default()
}

/// Now, at the second precision Kubernetes timestamps have.
pub(super) fn now() -> Timestamp {
    Timestamp::from_second(Timestamp::now().as_second()).unwrap_or(Timestamp::UNIX_EPOCH)
}

pub(super) fn unix_seconds(time: Timestamp) -> u64 {
    u64::try_from(time.as_second()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    #[test]
    fn propagation_sets_the_collectors_finalizers_as_kube_apiserver_does() {
        let names = |list: &[&str]| list.iter().map(|f| (*f).to_owned()).collect::<Vec<_>>();
        let rows: [(Propagation, &[&str], &[&str]); 9] = [
            (Propagation::Default, &[], &[]),
            (Propagation::Default, &["a"], &["a"]),
            (Propagation::Default, &["orphan", "a"], &["a", "orphan"]),
            (Propagation::Default, &["foregroundDeletion", "orphan"], &["foregroundDeletion"]),
            (Propagation::Background, &["orphan", "a"], &["a"]),
            (Propagation::Orphan, &[], &["orphan"]),
            (Propagation::Orphan, &["a", "foregroundDeletion"], &["a", "orphan"]),
            (Propagation::Foreground, &["orphan"], &["foregroundDeletion"]),
            (Propagation::Foreground, &["a"], &["a", "foregroundDeletion"]),
        ];
        for (propagation, current, want) in rows {
            assert_eq!(propagation.finalizers(&names(current)), names(want), "{propagation:?} {current:?}");
        }
    }

    fn object(labels: &[(&str, &str)], annotations: &[(&str, &str)]) -> NodeResourceTopology {
        let mut object = NodeResourceTopology::new("worker-0");
        let map = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
        };
        object.metadata.labels = Some(map(labels)).filter(|m| !m.is_empty());
        object.metadata.annotations = Some(map(annotations)).filter(|m| !m.is_empty());
        object
    }

    #[test]
    fn only_what_a_user_owns_makes_a_change() {
        let base = object(&[("a", "1")], &[("note", "x")]);
        // The server's own freshness stamp is not the user's: a stale copy is no change.
        let stamped = object(&[("a", "1")], &[("note", "x"), (LAST_CHANGE_ANNOTATION, "2026-01-01T00:00:00Z")]);
        assert!(unchanged(&base, &stamped));
        assert!(!unchanged(&base, &object(&[("a", "2")], &[("note", "x")])), "a label");
        assert!(!unchanged(&base, &object(&[("a", "1")], &[("note", "y")])), "an annotation");
        // An empty map and none are the same.
        assert!(unchanged(&object(&[], &[]), &NodeResourceTopology::new("worker-0")));
        let mut marked = base.clone();
        marked.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now()));
        assert!(!unchanged(&base, &marked), "marked for deletion");
        let mut finalized = base.clone();
        finalized.metadata.finalizers = Some(vec!["example.com/keep".to_owned()]);
        assert!(!unchanged(&base, &finalized), "a finalizer");
    }

    #[test]
    fn the_last_change_stamp_is_at_the_second() {
        let mut meta = ObjectMeta::default();
        let at = now();
        stamp_last_change(&mut meta, at);
        let stamped: Timestamp = meta.annotations.unwrap()[LAST_CHANGE_ANNOTATION].parse().unwrap();
        assert_eq!(stamped, at);
        assert_eq!(at.subsec_nanosecond(), 0);
    }
}
