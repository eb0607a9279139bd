//! A real OpenID provider (oidc-provider on Node): client-credentials tokens
//! are ES256 JWTs for the requested resource with the right issuer, subject
//! and per-client claims, a wrong secret is refused, discovery and the key
//! set agree with the token, and nothing listens after drop.

use std::net::{Ipv4Addr, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use airlock_testkit::{OidcClient, TempOidcProvider};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use serde_json::Value;

const RESOURCE: &str = "http://127.0.0.1:1/mcp";

fn accepts_tcp(port: u16) -> bool {
    TcpStream::connect_timeout(&(Ipv4Addr::LOCALHOST, port).into(), Duration::from_secs(2)).is_ok()
}

/// The JWT's header and payload, unverified.
fn decode(jwt: &str) -> (Value, Value) {
    let parts: Vec<&str> = jwt.split('.').collect();
    assert_eq!(parts.len(), 3, "not a signed JWT: {jwt}");
    let part = |text: &str| -> Value {
        let bytes = URL_SAFE_NO_PAD
            .decode(text)
            .unwrap_or_else(|e| panic!("bad base64url in {jwt}: {e}"));
        serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("bad JSON in {jwt}: {e}"))
    };
    (part(parts[0]), part(parts[1]))
}

#[test]
fn client_credentials_tokens_carry_the_right_claims() {
    let packages = match TempOidcProvider::install_packages() {
        Ok(packages) => packages,
        // As for the other npm-based tests (mcp-clients/README.md).
        Err(e) if e.contains("npm is not on PATH") => {
            eprintln!("SKIPPED: {e}");
            return;
        }
        Err(e) => panic!("{e}"),
    };
    let ops = OidcClient::new("ops-bot", "ops secret/+:=")
        .with_groups(&["ops"])
        .with_email("ops@example.test");
    let plain = OidcClient::new("plain-bot", "plain-secret");

    let started = Instant::now();
    let provider = TempOidcProvider::start(&packages, &[ops, plain]).unwrap();
    eprintln!("oidc-provider started in {:?}", started.elapsed());
    let port = provider.port();
    let issuer = provider.issuer();
    assert_eq!(issuer, format!("http://127.0.0.1:{port}"));
    assert!(accepts_tcp(port));

    // Discovery names the same issuer and the key set the tokens use.
    let discovery: Value =
        serde_json::from_str(&provider.get("/.well-known/openid-configuration").unwrap()).unwrap();
    assert_eq!(discovery["issuer"], issuer.as_str());
    assert_eq!(discovery["jwks_uri"], provider.jwks_url().as_str());
    assert_eq!(discovery["token_endpoint"], provider.token_url().as_str());
    assert!(
        discovery["grant_types_supported"]
            .as_array()
            .unwrap()
            .contains(&Value::from("client_credentials")),
        "{discovery}"
    );
    assert_eq!(
        provider.discovery_url(),
        format!("{issuer}/.well-known/openid-configuration")
    );
    let jwks: Value = serde_json::from_str(&provider.get("/jwks").unwrap()).unwrap();
    let keys = jwks["keys"].as_array().unwrap();
    assert_eq!(keys.len(), 1, "{jwks}");
    assert_eq!(keys[0]["kty"], "EC");
    assert_eq!(keys[0]["crv"], "P-256");
    assert_eq!(keys[0]["alg"], "ES256");
    assert!(
        keys[0].get("d").is_none(),
        "the key set leaks the private key"
    );

    let token = provider.token("ops-bot", RESOURCE).unwrap();
    let (header, payload) = decode(&token);
    eprintln!("header {header}\npayload {payload}");
    assert_eq!(header["alg"], "ES256");
    assert_eq!(header["typ"], "at+jwt");
    assert_eq!(header["kid"], keys[0]["kid"]);
    assert_eq!(payload["iss"], issuer.as_str());
    let aud_ok = match &payload["aud"] {
        Value::String(aud) => aud == RESOURCE,
        Value::Array(auds) => auds.contains(&Value::from(RESOURCE)),
        _ => false,
    };
    assert!(aud_ok, "aud is not {RESOURCE}: {payload}");
    assert_eq!(payload["sub"], "ops-bot");
    assert_eq!(payload["client_id"], "ops-bot");
    assert_eq!(payload["scope"], "mcp");
    assert_eq!(payload["groups"], serde_json::json!(["ops"]));
    assert_eq!(payload["email"], "ops@example.test");
    let iat = payload["iat"].as_u64().unwrap();
    let exp = payload["exp"].as_u64().unwrap();
    assert!(exp > iat, "{payload}");
    assert_eq!(exp - iat, 300);

    let token = provider.token("plain-bot", RESOURCE).unwrap();
    let (header, payload) = decode(&token);
    assert_eq!(header["alg"], "ES256");
    assert_eq!(payload["sub"], "plain-bot");
    assert_eq!(payload["aud"], RESOURCE);
    assert!(payload.get("groups").is_none(), "{payload}");
    assert!(payload.get("email").is_none(), "{payload}");

    let err = provider
        .token_with_secret("plain-bot", "wrong", RESOURCE)
        .unwrap_err();
    assert!(
        err.contains("401") && err.contains("invalid_client"),
        "{err}"
    );
    let err = provider.token("nobody", RESOURCE).unwrap_err();
    assert!(err.contains("nobody"), "{err}");
    assert!(
        provider.log().contains("invalid_client"),
        "{}",
        provider.log()
    );

    drop(provider);
    assert!(!accepts_tcp(port), "the provider still listens after drop");
}

#[test]
fn missing_packages_fail_clearly() {
    let err = match TempOidcProvider::start(
        Path::new("/nonexistent/mcp-clients"),
        &[OidcClient::new("a", "b")],
    ) {
        Ok(_) => panic!("started without packages"),
        Err(err) => err,
    };
    assert!(err.contains("install.sh"), "{err}");
}
