//! The checks of the cluster-wide links: the APIService, the API server replicas, the scheduler,
//! the pod webhook, the certificates.
use std::time::{Duration, SystemTime};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::DynamicObject;

use numaresources_api::operator::scheduler_image::{self, SchedulerImageKind};
use serde_json::Value;

use super::{API_SERVICE, Check, Read, SchedulerConfig, Status};
use crate::numa::style;

pub(super) fn replicas(read: &Read<(Option<Deployment>, Option<Lease>)>) -> Check {
    const NAME: &str = "API server replicas";
    let (deployment, lease) = match read {
        Err(error) => return Check::skip(NAME, format!("cannot read the API server Deployment or its Lease: {error}")),
        Ok((None, _)) => return Check::skip(NAME, "no API server Deployment here (installed another way?)"),
        Ok((Some(deployment), lease)) => (deployment, lease),
    };
    let replicas = deployment.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    if replicas <= 1 {
        return Check::ok(NAME, "one replica (no replication)");
    }
    let holder =
        lease.as_ref().and_then(|l| l.spec.as_ref()).and_then(|s| s.holder_identity.clone()).filter(|h| !h.is_empty());
    let Some(holder) = holder else {
        return Check::problem(
            NAME,
            Status::Fail,
            format!("{replicas} replicas and no leader: writes are refused until one is elected"),
            "check the API server pods' logs for the election (kubectl logs -l app.kubernetes.io/name=numaresources-apiserver)",
        );
    };
    let annotations = lease.as_ref().and_then(|l| l.metadata.annotations.as_ref());
    let in_sync = annotations
        .and_then(|a| a.get(numaresources_apiserver::replication::IN_SYNC_ANNOTATION))
        .map_or(0, |list| list.split(',').filter(|id| !id.is_empty()).count());
    let followers = usize::try_from(replicas - 1).unwrap_or(0);
    let lag = annotations.and_then(|a| a.get(numaresources_apiserver::replication::FOLLOWER_LAG_ANNOTATION));
    let lag =
        lag.filter(|l| !l.is_empty()).map(|l| format!(" (revisions not yet acknowledged: {})", l.replace(',', ", ")));
    let lag = lag.unwrap_or_default();
    if in_sync >= followers {
        return Check::ok(NAME, format!("leader {holder}, {in_sync} of {followers} followers in sync{lag}"));
    }
    Check::problem(
        NAME,
        Status::Warn,
        format!(
            "leader {holder}, {in_sync} of {followers} followers in sync: a leader lost now leaves fewer replicas \
             holding every acknowledged write{}{lag}",
            if in_sync == 0 { " (none: the leader acknowledges writes alone)" } else { "" }
        ),
        "check the followers' readiness and logs; a follower joins once it has caught up with the leader",
    )
}

pub(super) fn pod_webhook(read: &Read<Option<(bool, bool)>>) -> Check {
    const NAME: &str = "pod routing";
    match read {
        Err(error) => Check::skip(NAME, format!("cannot read the NUMAResourcesScheduler or the pod webhook: {error}")),
        Ok(None) => Check::skip(NAME, "no NUMAResourcesScheduler"),
        Ok(Some((false, _))) => Check::ok(NAME, "pods name the NUMA-aware scheduler themselves (podRouting off)"),
        Ok(Some((true, true))) => Check::ok(NAME, "podRouting routes pods and the pod webhook is registered"),
        Ok(Some((true, false))) => Check::problem(
            NAME,
            Status::Fail,
            "podRouting routes pods but the pod webhook is not registered: pods keep the default scheduler",
            "check the controllers' logs and the NUMAResourcesScheduler's conditions",
        ),
    }
}

/// A certificate expiring within this is a warning.
const EXPIRY_WARNING: Duration = Duration::from_secs(7 * 24 * 3600);

pub(super) fn certificates(read: &[(&'static str, Read<Option<String>>)], now: SystemTime) -> Check {
    const NAME: &str = "certificates";
    let mut problems = Vec::new();
    let mut checked = 0;
    for (secret, pem) in read {
        let Ok(Some(pem)) = pem else { continue };
        let Some(not_after) = numaresources_runtime::tls::rotation::not_after(pem) else { continue };
        checked += 1;
        match not_after.duration_since(now) {
            Err(_) => problems.push((Status::Fail, format!("{secret} expired"))),
            Ok(left) if left < EXPIRY_WARNING => {
                problems.push((Status::Warn, format!("{secret} expires in {}", style::age(left.as_secs()))));
            }
            Ok(_) => {}
        }
    }
    if checked == 0 {
        let refused = read.iter().find_map(|(secret, pem)| pem.as_ref().err().map(|e| format!("{secret}: {e}")));
        return Check::skip(
            NAME,
            match refused {
                Some(refused) => format!("no certificate the controllers keep could be read ({refused})"),
                None => "none of the Secrets the controllers keep exists (another issuer?)".to_owned(),
            },
        );
    }
    if problems.is_empty() {
        return Check::ok(NAME, format!("{checked} certificates, none expiring within a week"));
    }
    let status = if problems.iter().any(|(s, _)| *s == Status::Fail) { Status::Fail } else { Status::Warn };
    Check::problem(
        NAME,
        status,
        problems.into_iter().map(|(_, p)| p).collect::<Vec<_>>().join(", "),
        "the controllers renew their own certificates before expiry: check their logs, or the issuer that manages these Secrets",
    )
}

pub(super) fn api_service(read: &Read<Option<DynamicObject>>) -> Check {
    const NAME: &str = "APIService";
    let service = match read {
        Err(error) => return Check::skip(NAME, format!("cannot get APIService {API_SERVICE}: {error}")),
        Ok(None) => {
            return Check::problem(
                NAME,
                Status::Fail,
                format!(
                    "APIService {API_SERVICE} does not exist: kube-apiserver serves no NRTs, and the scheduler places pods blindly"
                ),
                "install the NRT API server (manifests/default) or create a NUMAResourcesOperator",
            );
        }
        Ok(Some(service)) => service,
    };
    let conditions = service.data.pointer("/status/conditions").and_then(|c| c.as_array()).cloned().unwrap_or_default();
    let available = conditions.iter().find(|c| c["type"] == "Available");
    match available {
        Some(condition) if condition["status"] == "True" => Check::ok(NAME, format!("{API_SERVICE} is Available")),
        Some(condition) => Check::problem(
            NAME,
            Status::Fail,
            format!(
                "{API_SERVICE} is not Available ({}: {}): NRT reads fail, and the scheduler places pods blindly",
                condition["reason"].as_str().unwrap_or("no reason"),
                condition["message"].as_str().unwrap_or("no message")
            ),
            "check the numaresources-apiserver pods and their Service (kubectl get pods,endpoints -l app.kubernetes.io/name=numaresources-apiserver -A)",
        ),
        None => Check::problem(
            NAME,
            Status::Warn,
            format!("{API_SERVICE} has no Available condition yet"),
            "wait a few seconds for kube-apiserver's availability check, then run doctor again",
        ),
    }
}

pub(super) fn scheduler(read: &Read<Option<Deployment>>) -> Check {
    const NAME: &str = "scheduler";
    let deployment = match read {
        Err(error) => return Check::skip(NAME, format!("cannot get the scheduler Deployment: {error}")),
        Ok(None) => {
            return Check::problem(
                NAME,
                Status::Fail,
                "no NUMA-aware scheduler Deployment: pods routed to it stay Pending",
                "create a NUMAResourcesScheduler (manifests/samples)",
            );
        }
        Ok(Some(deployment)) => deployment,
    };
    let conditions = deployment.status.as_ref().and_then(|s| s.conditions.as_ref());
    let available = conditions.into_iter().flatten().find(|c| c.type_ == "Available");
    match available {
        Some(condition) if condition.status == "True" => Check::ok(NAME, "the NUMA-aware scheduler is Available"),
        _ => Check::problem(
            NAME,
            Status::Fail,
            "the NUMA-aware scheduler Deployment is not Available: pods routed to it stay Pending",
            "check its pods and their logs (kubectl -n <namespace> logs deployment/numaresources-scheduler)",
        ),
    }
}

/// The fix of a scheduler configuration that is not what the controllers render.
const RENDERED_BY_CONTROLLERS: &str =
    "check the controllers' logs: they render the configuration from the NUMAResourcesScheduler";

/// The `urlPrefix` of the extender stanza that calls our extender's filter, if any.
fn our_extender(config: Option<&Value>) -> Option<String> {
    let extenders = config?["extenders"].as_array()?;
    extenders.iter().find_map(|e| {
        (e["filterVerb"] == numaresources_api::extender::FILTER_VERB && e["nodeCacheCapable"] == true)
            .then(|| e["urlPrefix"].as_str().map(str::to_owned))
            .flatten()
    })
}

/// The scheduler's image (what it can decode) and its configuration: a profile with the name
/// pods use, reading NRTs through NodeResourceTopologyMatch.
pub(super) fn scheduler_configuration(
    deployment: &Read<Option<Deployment>>,
    config: &Read<Option<SchedulerConfig>>,
) -> Check {
    const NAME: &str = "scheduler configuration";
    let Ok(Some(deployment)) = deployment else { return Check::skip(NAME, "no scheduler Deployment read") };
    let config = match config {
        Err(error) => return Check::skip(NAME, format!("cannot read the scheduler's configuration: {error}")),
        Ok(None) => return Check::skip(NAME, "no NUMAResourcesScheduler"),
        Ok(Some(config)) => config,
    };
    let image = deployment
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .and_then(|s| s.containers.first())
        .and_then(|c| c.image.clone())
        .unwrap_or_default();
    let Some(yaml) = &config.config else {
        return Check::problem(
            NAME,
            Status::Fail,
            format!("no ConfigMap {}: the scheduler cannot start", numaresources_controllers::names::SCHEDULER_CONFIG),
            "check the controllers' logs and the NUMAResourcesScheduler's conditions",
        );
    };
    let name = &config.scheduler_name;
    let parsed: Option<Value> = serde_norway::from_str(yaml).ok();
    let profiles = parsed.as_ref().and_then(|c| c["profiles"].as_array().cloned()).unwrap_or_default();
    let Some(profile) = profiles.iter().find(|p| p["schedulerName"] == name.as_str()) else {
        return Check::problem(
            NAME,
            Status::Fail,
            format!("no profile of the scheduler's configuration is named {name:?}: pods naming it stay Pending"),
            RENDERED_BY_CONTROLLERS,
        );
    };
    if let Some(extender) = our_extender(parsed.as_ref()) {
        let containers =
            deployment.spec.as_ref().and_then(|s| s.template.spec.as_ref()).map(|s| s.containers.as_slice());
        let runs_it = containers
            .unwrap_or_default()
            .iter()
            .any(|c| c.args.as_ref().and_then(|a| a.first()).is_some_and(|a| a == "scheduler-extender"));
        if !runs_it {
            return Check::problem(
                NAME,
                Status::Fail,
                format!(
                    "kube-scheduler calls the extender at {extender}, but no container of its pod runs it: every pod fails to schedule"
                ),
                "check the controllers' logs: they render the extender beside kube-scheduler for engine Extender",
            );
        }
        return Check::ok(
            NAME,
            format!(
                "{image}; profile {name:?} is filtered, scored and bound by the numaresources extender ({extender})"
            ),
        );
    }
    // kube-scheduler's rule: a point's own list overrides multiPoint, and `*` disables every
    // default and multiPoint plugin at that point.
    let listed = |point: &str, list: &str| {
        profile["plugins"][point][list].as_array().is_some_and(|plugins| {
            plugins.iter().any(|p| p["name"] == "NodeResourceTopologyMatch" || (list == "disabled" && p["name"] == "*"))
        })
    };
    let runs =
        |point: &str| listed(point, "enabled") || (listed("multiPoint", "enabled") && !listed(point, "disabled"));
    if !runs("filter") || !runs("score") {
        return Check::problem(
            NAME,
            Status::Fail,
            format!(
                "profile {name:?} does not run NodeResourceTopologyMatch as a filter and a score: it places pods \
                 without reading NRTs"
            ),
            RENDERED_BY_CONTROLLERS,
        );
    }
    let known = scheduler_image::identify(&image);
    if known.kind == SchedulerImageKind::Unknown {
        return Check::problem(
            NAME,
            Status::Warn,
            format!(
                "image {image} is not one whose capabilities are known: it gets only the configuration every \
                 supported image decodes (no KNIDebug, no preemptionMode)"
            ),
            "use a scheduler-plugins release v0.33 or v0.34, or the OpenShift build, for the full configuration",
        );
    }
    Check::ok(
        NAME,
        format!(
            "{image} ({}); profile {name:?} reads NRTs through kube-apiserver with NodeResourceTopologyMatch",
            known.kind
        ),
    )
}
