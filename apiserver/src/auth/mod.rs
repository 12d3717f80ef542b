//! Delegated authentication and authorization, as k8s.io/apiserver does it for extension API
//! servers: identities from the front proxy's request headers, client certificates or
//! TokenReview; decisions from SubjectAccessReview; health paths open to everyone;
//! `system:masters` never asks. An exporter may write only its own node's object (see
//! [`node_restriction`] for who counts as one and how its node is found).

pub(crate) mod authn;
mod delegated;
pub mod issuer_keys;
pub mod jwt;
pub(crate) mod node_restriction;
mod standalone;

use std::sync::Arc;

use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use http::header::AUTHORIZATION;
use numaresources_api::nrt::{GROUP, PLURAL};
use numaresources_runtime::PeerInfo;

use crate::request_info::Attributes;
pub use crate::request_info::always_allowed;
pub(crate) use authn::UserInfo;
pub use authn::{AuthenticationConfig, RequestHeaderConfig};
pub use delegated::{CacheLifetimes, Delegated};
pub(crate) use node_restriction::Binding;
pub use node_restriction::NodeRestriction;
pub use standalone::{Standalone, TokenFileError};

use crate::AppState;
use crate::status::ApiError;

/// How requests are authenticated and authorized.
#[derive(Debug, Clone, Default)]
pub enum Auth {
    /// Everyone may do everything: only for the loopback-bound `local` mode and tests.
    #[default]
    Disabled,
    /// Delegated to kube-apiserver.
    Delegated(Arc<Delegated>),
    /// Static tokens and client certificates, with the simple authorizer of [`Standalone`].
    Standalone(Arc<Standalone>),
}

/// The name a node-bound identity may write, for the create handler to check against the body.
#[derive(Debug, Clone)]
pub(crate) struct NodeScope(pub String);

/// Who an authorized request comes from, for a follower that forwards it to the leader. The
/// identity is the review cache's own (shared, not copied per request); the node found through
/// the token's pod travels beside it, so the leader binds the write to the same node.
#[derive(Debug, Clone)]
pub(crate) struct Authenticated {
    pub user: Arc<UserInfo>,
    pub node_through_pod: Option<String>,
}

/// The middleware: authenticate, strip identity headers, authorize, then run the handler.
///
/// It runs on every request, so it borrows what it can: the URI and the bearer token are cheap
/// clones of what hyper parsed, and a token's identity is shared with the review cache.
pub async fn check(state: &AppState, mut request: Request, next: impl AsyncFnOnce(Request) -> Response) -> Response {
    let uri = request.uri().clone();
    let path = uri.path();
    let peer = request.extensions().get::<PeerInfo>().cloned();
    let chain = peer.as_ref().map_or(&[][..], PeerInfo::client_chain);
    let authorization = request.headers().get(AUTHORIZATION).cloned();
    let token = authorization.as_ref().and_then(bearer);
    let user: Arc<UserInfo> = match &state.auth {
        Auth::Disabled => return next(request).await,
        Auth::Standalone(standalone) => match standalone.authenticate(chain, request.headers(), token) {
            _ if always_allowed(path) => return next(request).await,
            Ok(user) => user.unwrap_or_else(|| Arc::new(UserInfo::anonymous())),
            Err(_) => return ApiError::unauthorized("Unauthorized").into_response(),
        },
        Auth::Delegated(delegated) => {
            let Some(config) = delegated.config() else {
                if always_allowed(path) {
                    return next(request).await;
                }
                return ApiError::unavailable("the authentication configuration is not loaded yet", 1).into_response();
            };
            let from_connection = authn::from_connection(&config, chain, request.headers());
            authn::strip_identity_headers(&config.request_header, request.headers_mut());
            if always_allowed(path) {
                return next(request).await;
            }
            match (from_connection, token) {
                (Some(user), _) => Arc::new(user),
                (None, Some(token)) => match delegated.token_review(token).await {
                    Ok(Some(user)) => user,
                    Ok(None) => return ApiError::unauthorized("Unauthorized").into_response(),
                    Err(error) => {
                        tracing::warn!("{error}");
                        return ApiError::unauthorized("Unauthorized").into_response();
                    }
                },
                (None, None) => Arc::new(UserInfo::anonymous()),
            }
        }
    };
    let attributes = Attributes::of(request.method(), path, uri.query());
    // The node found through the token's pod, recorded on the identity once authorized so a
    // write forwarded to the leader stays bound to it there.
    let mut placed_through_pod = None;
    // An exporter's own object, written or read, is decided without a review of its own.
    let binding = match &attributes {
        _ if attributes.is_write() => node_binding(&state.auth, &user),
        Attributes::Resource { verb: "get", name: Some(_) } => node_binding(&state.auth, &user),
        _ => Binding::Unbound,
    };
    if attributes.is_write() {
        match &binding {
            Binding::Unbound => {}
            Binding::Node { node, through_pod, .. } => {
                match &attributes {
                    Attributes::Resource { name: Some(name), .. } if name != node => {
                        return forbidden_for_node(node, name).into_response();
                    }
                    Attributes::Resource { verb: "deletecollection", .. } => {
                        return forbidden_for_node(node, "*").into_response();
                    }
                    _ => {}
                }
                if *through_pod {
                    placed_through_pod = Some(node.clone());
                }
                request.extensions_mut().insert(NodeScope(node.clone()));
            }
            Binding::Refused(reason) => return forbidden_unplaced(&attributes, reason).into_response(),
            Binding::Unknown => {
                return ApiError::unavailable(
                    "the node restriction cannot place this exporter until the exporter pods are listed; retry shortly",
                    1,
                )
                .into_response();
            }
        }
    }
    let exporter_node = match &binding {
        Binding::Node { node, live_pod: true, .. } => Some(node.as_str()),
        _ => None,
    };
    let allowed = match &state.auth {
        _ if user.groups.iter().any(|g| g == "system:masters") => true,
        Auth::Delegated(delegated) => match delegated.authorize_bound(&user, &attributes, exporter_node).await {
            Ok(allowed) => allowed,
            Err(error) => {
                tracing::error!("{error}");
                return ApiError::unavailable("authorization is unavailable; retry shortly", 1).into_response();
            }
        },
        Auth::Standalone(_) => Standalone::authorize(&user, &attributes),
        Auth::Disabled => true,
    };
    if !allowed {
        return forbidden(&user, &attributes).into_response();
    }
    tracing::trace!(user = %user.name, ?attributes, "authorized");
    request.extensions_mut().insert(Authenticated { user, node_through_pod: placed_through_pod });
    next(request).await
}

/// The node restriction of the mode: delegated mode's (exporters, placed by token or pod);
/// elsewhere identities carry no pod-bound tokens, and a named node binds as it says.
fn node_binding(auth: &Auth, user: &UserInfo) -> Binding {
    match auth {
        Auth::Delegated(delegated) => delegated.node_restriction().binding(user),
        Auth::Standalone(_) | Auth::Disabled => match user.node_name() {
            Some(node) => Binding::Node { node: node.to_owned(), through_pod: false, live_pod: false },
            None => Binding::Unbound,
        },
    }
}

fn bearer(value: &http::HeaderValue) -> Option<&str> {
    let value = value.to_str().ok()?;
    let token = value.strip_prefix("Bearer ").or_else(|| value.strip_prefix("bearer "))?.trim();
    (!token.is_empty()).then_some(token)
}

/// kube-apiserver's wording for a denied request.
fn forbidden(user: &UserInfo, attributes: &Attributes) -> ApiError {
    match attributes {
        Attributes::Resource { verb, name } => {
            let object =
                name.as_deref().map_or_else(|| format!("{PLURAL}.{GROUP}"), |n| format!("{PLURAL}.{GROUP} \"{n}\""));
            ApiError::forbidden(format!(
                "{object} is forbidden: User \"{}\" cannot {verb} resource \"{PLURAL}\" in API group \"{GROUP}\" at the cluster scope",
                user.name
            ))
        }
        Attributes::NonResource { verb, path } => {
            ApiError::forbidden(format!("forbidden: User \"{}\" cannot {verb} path \"{path}\"", user.name))
        }
    }
}

/// A node-bound identity writing another node's object.
pub(crate) fn forbidden_for_node(node: &str, name: &str) -> ApiError {
    ApiError::forbidden(format!(
        "{PLURAL}.{GROUP} \"{name}\" is forbidden: node restriction: the caller is bound to node \"{node}\" and may write only the NodeResourceTopology named \"{node}\""
    ))
}

/// An exporter whose node cannot be told (or whose pod is gone) writing.
fn forbidden_unplaced(attributes: &Attributes, reason: &str) -> ApiError {
    let object = match attributes {
        Attributes::Resource { name: Some(name), .. } => format!("{PLURAL}.{GROUP} \"{name}\""),
        _ => format!("{PLURAL}.{GROUP}"),
    };
    ApiError::forbidden(format!(
        "{object} is forbidden: node restriction: an exporter may write only its own node's NodeResourceTopology, and {reason}"
    ))
}
