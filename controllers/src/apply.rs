//! Server-side apply under our one field manager, with the owner reference set.
//!
//! Every reconcile applies the full desired state. Applying an unchanged object is a no-op on
//! the API server (no new resourceVersion, no watch event), so a second reconcile changes
//! nothing; a changed field is changed, and a field we stop rendering is removed because we
//! own it. `force` takes ownership of fields someone edited by hand: the spec wins (use the
//! pause annotation to edit operands by hand).

use std::fmt::Debug;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::{ClusterResourceScope, NamespaceResourceScope};
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::{Api, Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::context::{Error, Result, is_not_found};
use crate::names::FIELD_MANAGER;

/// Applies objects owned by one controller object.
#[derive(Clone)]
pub struct Applier {
    client: Client,
    owner: Option<OwnerReference>,
}

impl Debug for Applier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Applier").field("owner", &self.owner).finish_non_exhaustive()
    }
}

impl Applier {
    /// Applies with `owner` as the controller owner reference.
    pub fn new(client: Client, owner: Option<OwnerReference>) -> Self {
        Self { client, owner }
    }

    /// Applies a namespaced object; returns what the API server holds afterwards.
    pub async fn namespaced<K>(&self, obj: K) -> Result<K>
    where
        K: Resource<Scope = NamespaceResourceScope, DynamicType = ()> + Serialize + DeserializeOwned + Clone + Debug,
    {
        let namespace = obj.namespace().unwrap_or_default();
        self.apply(Api::namespaced(self.client.clone(), &namespace), obj).await
    }

    /// Applies a cluster-scoped object; returns what the API server holds afterwards.
    pub async fn cluster<K>(&self, obj: K) -> Result<K>
    where
        K: Resource<Scope = ClusterResourceScope, DynamicType = ()> + Serialize + DeserializeOwned + Clone + Debug,
    {
        self.apply(Api::all(self.client.clone()), obj).await
    }

    async fn apply<K>(&self, api: Api<K>, mut obj: K) -> Result<K>
    where
        K: Resource<DynamicType = ()> + Serialize + DeserializeOwned + Clone + Debug,
    {
        if let Some(owner) = &self.owner {
            obj.meta_mut().owner_references = Some(vec![owner.clone()]);
        }
        let name = obj.name_any();
        let params = PatchParams::apply(FIELD_MANAGER).force();
        api.patch(&name, &params, &Patch::Apply(&obj))
            .await
            .map_err(|e| Error::kube(format!("apply {} {}", K::kind(&()), describe(&obj)), e))
    }
}

fn describe<K: Resource>(obj: &K) -> String {
    match obj.meta().namespace.as_deref() {
        Some(ns) => format!("{ns}/{}", obj.name_any()),
        None => obj.name_any(),
    }
}

/// GET that answers `None` for 404.
pub async fn get_opt<K>(api: &Api<K>, name: &str) -> Result<Option<K>>
where
    K: Resource<DynamicType = ()> + DeserializeOwned + Clone + Debug,
{
    api.get_opt(name).await.map_err(|e| Error::kube(format!("get {} {name}", K::kind(&())), e))
}

/// DELETE that treats 404 as done. Returns whether something was deleted.
pub async fn delete<K>(api: &Api<K>, name: &str) -> Result<bool>
where
    K: Resource<DynamicType = ()> + DeserializeOwned + Clone + Debug,
{
    match api.delete(name, &DeleteParams::background()).await {
        Ok(_) => Ok(true),
        Err(e) if is_not_found(&e) => Ok(false),
        Err(e) => Err(Error::kube(format!("delete {} {name}", K::kind(&())), e)),
    }
}

/// What [`delete_controlled`] found and did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Removal {
    /// Nothing of ours was there (absent, or someone else's): nothing was deleted.
    NothingOurs,
    /// Ours, deleted, and a GET answers 404 now.
    Deleted,
    /// Ours and deleted, but still there (finalizers hold it).
    Pending,
}

/// Deletes `name` if `owner_uid` controls it (never someone else's) and says what happened, so
/// a caller announces a deletion only when there was one.
pub async fn delete_controlled<K>(api: &Api<K>, name: &str, owner_uid: &str) -> Result<Removal>
where
    K: Resource<DynamicType = ()> + DeserializeOwned + Clone + Debug,
{
    match get_opt(api, name).await? {
        None => Ok(Removal::NothingOurs),
        Some(existing) if !controlled_by(&existing, owner_uid) => Ok(Removal::NothingOurs),
        Some(_) => {
            delete(api, name).await?;
            Ok(if get_opt(api, name).await?.is_none() { Removal::Deleted } else { Removal::Pending })
        }
    }
}

/// True when `obj` has `owner_uid` as its controller.
pub fn controlled_by<K: Resource>(obj: &K, owner_uid: &str) -> bool {
    obj.owner_references().iter().any(|r| r.controller == Some(true) && r.uid == owner_uid)
}
