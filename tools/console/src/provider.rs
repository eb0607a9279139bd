//! Signing in through the deployment's OpenID provider (`[console.oidc]`).
//!
//! `/console/oidc/start` sends the browser to the provider with a fresh
//! state, nonce and PKCE challenge, keeping them in a short-lived cookie
//! of its own (so the replica the browser comes back to can finish the
//! sign-in: nothing is kept on the server meanwhile).
//! `/console/oidc/callback` checks and trades what the provider sent back
//! (`airlock_oauth::SignIn`) and signs the person in as the identity and
//! role their ID token gives them.

use std::{collections::HashMap, net::SocketAddr, sync::Arc};

use airlock_oauth::{Pending, SignIn, SignInError, SignInSettings};
use axum::{
    extract::{ConnectInfo, Query, State},
    http::{header, HeaderMap, HeaderValue, StatusCode},
    response::{IntoResponse, Response},
    Extension,
};

use crate::{
    config::{secret_from_file, OidcConfig, DEFAULT_IDENTITY_PREFIX},
    page, pages, see_other,
    sessions::{self, Proof},
    Console, LOGIN_COOKIE, LOGIN_SECS,
};

/// The provider's sign-in, from `[console.oidc]`; the secret read from its
/// file now (a missing or empty file stops the server from starting).
pub(crate) fn sign_in(o: &OidcConfig) -> Result<SignIn, String> {
    let secret = secret_from_file(&o.client_secret_file, "client_secret_file")?;
    let algorithms = o
        .algorithms
        .clone()
        .unwrap_or_else(|| vec!["RS256".into(), "ES256".into()])
        .iter()
        .map(|a| {
            a.parse::<airlock_oauth::Algorithm>().map_err(|_| {
                format!("algorithms: `{a}` is not a JWS algorithm (RS256, ES256, ...)")
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    SignIn::new(SignInSettings {
        issuer: o.issuer.clone(),
        client_id: o.client_id.clone(),
        client_secret: secret,
        redirect_uri: o.redirect_uri.clone(),
        identity_claim: o.identity_claim.clone(),
        identity_prefix: format!(
            "{}:",
            o.identity_prefix
                .as_deref()
                .unwrap_or(DEFAULT_IDENTITY_PREFIX)
        ),
        groups_claim: o.groups_claim.clone(),
        algorithms,
        scopes: o.scopes.clone().unwrap_or_else(|| vec!["email".into()]),
        leeway_secs: 30,
        ca_file: o.ca_file.clone(),
    })
}

fn login_cookie(value: &str, max_age: u64) -> String {
    format!("{LOGIN_COOKIE}={value}; Path=/; HttpOnly; Secure; SameSite=Lax; Max-Age={max_age}")
}

fn pending_in(headers: &HeaderMap) -> Option<Pending> {
    sessions::the_one_cookie(
        headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok()),
        LOGIN_COOKIE,
    )
    .and_then(Pending::from_cookie)
}

pub(crate) async fn oidc_start(State(c): State<Arc<Console>>) -> Response {
    let Some(provider) = &c.provider else {
        return crate::nowhere().await;
    };
    match provider.begin().await {
        Ok((url, pending)) => {
            let mut r = see_other(&url);
            if let Ok(v) = HeaderValue::from_str(&login_cookie(&pending.to_cookie(), LOGIN_SECS)) {
                r.headers_mut().insert(header::SET_COOKIE, v);
            }
            r
        }
        Err(e) => refused(&c, e),
    }
}

pub(crate) async fn oidc_callback(
    State(c): State<Arc<Console>>,
    peer: Option<Extension<ConnectInfo<SocketAddr>>>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    let Some(provider) = &c.provider else {
        return crate::nowhere().await;
    };
    // Each finish may cost a request to the provider: counted against the
    // client's failed sign-ins, given back when it signs someone in.
    let address = match c.keys.try_sign_in(peer.map(|p| (p.0).0), &headers) {
        Ok(address) => address,
        Err(wait) => {
            let mut r = page(
                StatusCode::TOO_MANY_REQUESTS,
                c.login_page(Some(&format!(
                    "Too many failed sign-ins from this address; try again in {wait} s."
                ))),
            );
            r.headers_mut().insert(header::RETRY_AFTER, wait.into());
            return r;
        }
    };
    let pending = pending_in(&headers);
    let person = match provider
        .finish(
            pending.as_ref(),
            query.get("state").map(String::as_str),
            query.get("code").map(String::as_str),
            query.get("error").map(String::as_str),
        )
        .await
    {
        Ok(p) => p,
        Err(e) => return refused(&c, e),
    };
    if let Some(a) = &address {
        c.keys.sign_in_passed(a);
    }
    let groups = c.config.groups_that_matter(&person.groups);
    let Some(role) = c.config.role_with_groups(&person.identity, &groups) else {
        tracing::warn!(identity = %person.identity, "a console sign-in through the provider by an identity [console] gives no role");
        return page(
            StatusCode::FORBIDDEN,
            c.login_page(Some(&format!(
                "{} has no role in the console: an operator adds the identity to [console] approvers or auditors, or one of its groups to [console.oidc] approver_groups or auditor_groups.",
                airlock_catalog::visible::visible(&person.identity)
            ))),
        );
    };
    let now = c.gateway.now_ms();
    let lasts = c.config.provider_session_ms();
    let proof = Proof::Provider { groups };
    let id = match c
        .sessions
        .open(&person.identity, role, &proof, now, now + lasts)
    {
        Ok(id) => id,
        Err(e) => {
            tracing::error!(error = %e, "the console could not keep a sign-in");
            return page(
                StatusCode::SERVICE_UNAVAILABLE,
                c.login_page(Some(
                    "Signing in is not possible just now; try again shortly.",
                )),
            );
        }
    };
    tracing::info!(identity = %person.identity, role = role.as_str(), "console sign-in through the provider");
    let mut r = (StatusCode::OK, pages::signed_in(&person.identity)).into_response();
    for cookie in [sessions::set_cookie(&id, lasts / 1000), login_cookie("", 0)] {
        if let Ok(v) = HeaderValue::from_str(&cookie) {
            r.headers_mut().append(header::SET_COOKIE, v);
        }
    }
    r
}

fn refused(c: &Console, e: SignInError) -> Response {
    let status = match &e {
        SignInError::Unavailable(why) | SignInError::Exchange(why) | SignInError::IdToken(why) => {
            tracing::warn!(error = %e, detail = %why, "a console sign-in through the provider failed");
            match e {
                SignInError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
                _ => StatusCode::UNAUTHORIZED,
            }
        }
        SignInError::NotStarted | SignInError::Provider(_) => StatusCode::UNAUTHORIZED,
        SignInError::Busy => StatusCode::SERVICE_UNAVAILABLE,
    };
    let busy = matches!(e, SignInError::Busy | SignInError::Unavailable(_));
    let mut r = page(status, c.login_page(Some(&e.to_string())));
    // A pending sign-in that failed is used up; one that met a busy or
    // unreachable provider may be tried again.
    if !busy {
        if let Ok(v) = HeaderValue::from_str(&login_cookie("", 0)) {
            r.headers_mut().append(header::SET_COOKIE, v);
        }
    }
    r
}
