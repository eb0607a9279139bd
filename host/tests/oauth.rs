//! `airlock serve --http` as an OAuth resource server, judged from the
//! outside: tokens signed by a test key and served through a loopback
//! OpenID discovery document and JWKS (an issuer this test runs, so it can
//! rotate keys, count fetches, go slow or go away), and tokens from a
//! real OpenID provider (the npm `oidc-provider`, by client credentials).

mod common;

use std::{
    net::TcpListener,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc, Mutex,
    },
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use axum::{extract::State, routing::get, Router};
use base64::{engine::general_purpose::URL_SAFE_NO_PAD as B64, Engine};
use common::{enroll, Server, ENROLLMENT};
use jsonwebtoken::{jwk::Jwk, Algorithm, EncodingKey, Header};
use rmcp::model::ReadResourceRequestParams;
use serde_json::{json, Value};

/// A signing key of the test issuer.
struct Key {
    kid: String,
    encoding: EncodingKey,
    jwk: Value,
}

impl Key {
    fn new(kid: &str) -> Key {
        let pair = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap();
        let encoding = EncodingKey::from_ec_pem(pair.serialize_pem().as_bytes()).unwrap();
        let mut jwk = Jwk::from_encoding_key(&encoding, Algorithm::ES256).unwrap();
        jwk.common.key_id = Some(kid.into());
        Key {
            kid: kid.into(),
            encoding,
            jwk: serde_json::to_value(jwk).unwrap(),
        }
    }
}

/// What the test issuer serves, and how often its keys were fetched.
#[derive(Default)]
struct IssuerState {
    issuer: Mutex<String>,
    keys: Mutex<Vec<Value>>,
    fetches: AtomicUsize,
    /// Answers the key set only after this long.
    slow: Mutex<Option<Duration>>,
}

/// An OpenID issuer on loopback: discovery and JWKS, nothing else.
struct Issuer {
    url: String,
    state: Arc<IssuerState>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Drop for Issuer {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

async fn discovery(State(s): State<Arc<IssuerState>>) -> axum::response::Response {
    let issuer = s.issuer.lock().unwrap().clone();
    axum::response::IntoResponse::into_response((
        [("content-type", "application/json")],
        json!({"issuer": issuer, "jwks_uri": format!("{issuer}/jwks")}).to_string(),
    ))
}

async fn jwks(State(s): State<Arc<IssuerState>>) -> axum::response::Response {
    s.fetches.fetch_add(1, Ordering::SeqCst);
    let slow = *s.slow.lock().unwrap();
    if let Some(d) = slow {
        tokio::time::sleep(d).await;
    }
    let keys = s.keys.lock().unwrap().clone();
    axum::response::IntoResponse::into_response((
        [("content-type", "application/json")],
        json!({ "keys": keys }).to_string(),
    ))
}

impl Issuer {
    async fn start(keys: &[&Key]) -> Issuer {
        let state = Arc::new(IssuerState::default());
        *state.keys.lock().unwrap() = keys.iter().map(|k| k.jwk.clone()).collect();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        *state.issuer.lock().unwrap() = url.clone();
        let app = Router::new()
            .route("/.well-known/openid-configuration", get(discovery))
            .route("/jwks", get(jwks))
            .with_state(state.clone());
        let (stop, stopped) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = stopped.await;
                })
                .await
                .unwrap();
        });
        Issuer {
            url,
            state,
            stop: Some(stop),
        }
    }

    fn fetches(&self) -> usize {
        self.state.fetches.load(Ordering::SeqCst)
    }

    fn publish(&self, key: &Key) {
        self.state.keys.lock().unwrap().push(key.jwk.clone());
    }
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// A free loopback port: the resource URL must name the port before the
/// server starts.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `airlock serve --http` on the simulated cluster with `[oauth]` trusting
/// `issuer` (plus `extra` TOML in its `[[oauth.issuers]]`), `bob` enrolled
/// with a bearer key; returns the server and bob's key.
async fn serve(issuer: &str, scopes: &str, extra: &str) -> (Server, String) {
    let port = free_port();
    let dir = tempfile::tempdir().unwrap();
    let bob = enroll(&dir.path().join(ENROLLMENT), "bob");
    let config = dir.path().join("airlock.toml");
    std::fs::write(
        &config,
        format!(
            "[identities.\"sso:pinned@example.test\"]\nmode = \"ro\"\n\
             [oauth]\nresource = \"http://127.0.0.1:{port}/mcp\"\nscopes = [{scopes}]\n\
             [[oauth.issuers]]\nissuer = \"{issuer}\"\n{extra}"
        ),
    )
    .unwrap();
    let args: Vec<std::ffi::OsString> = vec![
        "--config".into(),
        config.into(),
        "serve".into(),
        "--http".into(),
        format!("127.0.0.1:{port}").into(),
        "--enrollment".into(),
        dir.path().join(ENROLLMENT).into(),
    ];
    let server = tokio::task::spawn_blocking(move || Server::spawn(dir, &args))
        .await
        .unwrap();
    (server, bob)
}

fn claims(issuer: &str, server: &Server, sub: &str) -> Value {
    json!({
        "iss": issuer,
        "aud": server.url,
        "sub": sub,
        "iat": now(),
        "exp": now() + 300,
        "scope": "mcp",
    })
}

fn sign(key: &Key, claims: &Value) -> String {
    let mut header = Header::new(Algorithm::ES256);
    header.kid = Some(key.kid.clone());
    header.typ = Some("at+jwt".into());
    jsonwebtoken::encode(&header, claims, &key.encoding).unwrap()
}

/// A JWT with this header and claims and this signature, made by hand.
fn forge(header: &Value, claims: &Value, signature: &[u8]) -> String {
    format!(
        "{}.{}.{}",
        B64.encode(header.to_string()),
        B64.encode(claims.to_string()),
        B64.encode(signature)
    )
}

struct Answer {
    status: u16,
    challenge: String,
    text: String,
    took: Duration,
}

/// `initialize` with `Authorization: Bearer <bearer>`.
async fn initialize(server: &Server, bearer: &str) -> Answer {
    initialize_at(&server.url, bearer).await
}

async fn initialize_at(url: &str, bearer: &str) -> Answer {
    let started = Instant::now();
    let r = reqwest::Client::new()
        .post(url)
        .header("authorization", format!("Bearer {bearer}"))
        .header("accept", "application/json, text/event-stream")
        .header("content-type", "application/json")
        .body(
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "oauth-test", "version": "1"}}})
            .to_string(),
        )
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let challenge = r
        .headers()
        .get("www-authenticate")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    let text = r.text().await.unwrap();
    Answer {
        status,
        challenge,
        text,
        took: started.elapsed(),
    }
}

/// The identity resource (`airlock://identity`) as the token's holder.
async fn whoami(server: &Server, bearer: &str) -> Value {
    let client = server.connect(bearer).await;
    let r = client
        .read_resource(ReadResourceRequestParams::new("airlock://identity"))
        .await
        .unwrap();
    let text = match &r.contents[0] {
        rmcp::model::ResourceContents::TextResourceContents { text, .. } => text.clone(),
        other => panic!("{other:?}"),
    };
    let _ = client.cancel().await;
    serde_json::from_str(&text).unwrap()
}

fn assert_refused(a: &Answer, status: u16, says: &str) {
    assert_eq!(a.status, status, "{}", a.text);
    assert!(a.text.contains(says), "expected `{says}` in: {}", a.text);
    assert!(
        a.challenge.contains("error=\"invalid_token\"")
            || a.challenge.contains("error=\"insufficient_scope\""),
        "{}",
        a.challenge
    );
    assert!(
        a.challenge.contains("resource_metadata=\""),
        "{}",
        a.challenge
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn good_tokens_get_in_as_their_subject_and_hostile_ones_are_refused() {
    let k1 = Key::new("k1");
    let issuer = Issuer::start(&[&k1]).await;
    let (server, bob) = serve(
        &issuer.url,
        "\"mcp\"",
        "groups = { ops = \"operator\", admins = \"rw\" }\ndefault_mode = \"ro\"\n",
    )
    .await;
    let iss = issuer.url.clone();

    // No credential: 401 pointing to the metadata, which is served
    // without one and names the issuer.
    let none = initialize(&server, "").await;
    assert_eq!(none.status, 401);
    let metadata_url = format!("{}/.well-known/oauth-protected-resource/mcp", server.base());
    assert!(
        none.challenge
            .contains(&format!("resource_metadata=\"{metadata_url}\"")),
        "{}",
        none.challenge
    );
    assert!(
        none.challenge.contains("scope=\"mcp\""),
        "{}",
        none.challenge
    );
    for url in [
        metadata_url.clone(),
        format!("{}/.well-known/oauth-protected-resource", server.base()),
    ] {
        let doc: Value = reqwest::get(&url).await.unwrap().json().await.unwrap();
        assert_eq!(doc["resource"], server.url.as_str(), "{doc}");
        assert_eq!(doc["authorization_servers"], json!([iss]), "{doc}");
        assert_eq!(doc["scopes_supported"], json!(["mcp"]), "{doc}");
    }

    // A good token: in, as its subject; its groups decide the mode.
    let good = sign(&k1, &claims(&iss, &server, "carol"));
    let ok = initialize(&server, &good).await;
    assert_eq!(ok.status, 200, "{}", ok.text);
    let me = whoami(&server, &good).await;
    assert_eq!(
        (me["identity"].as_str(), me["mode"].as_str()),
        (Some("sso:carol"), Some("ro"))
    );
    let mut c = claims(&iss, &server, "dave");
    c["groups"] = json!(["staff", "ops"]);
    let me = whoami(&server, &sign(&k1, &c)).await;
    assert_eq!(
        (me["identity"].as_str(), me["mode"].as_str()),
        (Some("sso:dave"), Some("operator"))
    );
    // An operator's [identities] entry wins over the groups.
    let mut c = claims(&iss, &server, "pinned@example.test");
    c["groups"] = json!(["admins"]);
    assert_eq!(whoami(&server, &sign(&k1, &c)).await["mode"], "ro");
    // Bearer keys keep working beside tokens.
    assert_eq!(initialize(&server, &bob).await.status, 200);
    assert_refused(&initialize(&server, "alk_0000").await, 401, "not enrolled");

    // Within the leeway (30 s) an expired token still holds; past it not.
    let mut c = claims(&iss, &server, "carol");
    c["exp"] = json!(now() - 10);
    assert_eq!(initialize(&server, &sign(&k1, &c)).await.status, 200);
    c["exp"] = json!(now() - 120);
    assert_refused(&initialize(&server, &sign(&k1, &c)).await, 401, "expired");
    let mut c = claims(&iss, &server, "carol");
    c["nbf"] = json!(now() + 120);
    assert_refused(
        &initialize(&server, &sign(&k1, &c)).await,
        401,
        "not valid yet",
    );
    // For another resource.
    let mut c = claims(&iss, &server, "carol");
    c["aud"] = json!("http://127.0.0.1:1/mcp");
    assert_refused(&initialize(&server, &sign(&k1, &c)).await, 401, "audience");
    // From an issuer not configured, though signed with a known key.
    let mut c = claims(&iss, &server, "carol");
    c["iss"] = json!("http://127.0.0.1:1");
    assert_refused(&initialize(&server, &sign(&k1, &c)).await, 401, "issuer");
    // No exp at all.
    let mut c = claims(&iss, &server, "carol");
    c.as_object_mut().unwrap().remove("exp");
    assert_refused(&initialize(&server, &sign(&k1, &c)).await, 401, "exp");
    // Without the scope: 403 insufficient_scope.
    let mut c = claims(&iss, &server, "carol");
    c["scope"] = json!("openid");
    let a = initialize(&server, &sign(&k1, &c)).await;
    assert_refused(&a, 403, "scope mcp");
    assert!(
        a.challenge.contains("insufficient_scope"),
        "{}",
        a.challenge
    );
    // An ID token (typ JWT) is not an access token.
    let mut h = Header::new(Algorithm::ES256);
    h.kid = Some("k1".into());
    h.typ = Some("JWT".into());
    let id_token = jsonwebtoken::encode(&h, &claims(&iss, &server, "carol"), &k1.encoding).unwrap();
    assert_refused(
        &initialize(&server, &id_token).await,
        401,
        "not an access token",
    );

    // Forgeries.
    let c = claims(&iss, &server, "mallory");
    let none_alg = forge(&json!({"alg": "none", "typ": "at+jwt"}), &c, b"");
    assert_refused(&initialize(&server, &none_alg).await, 401, "well-formed");
    // HS256 keyed with the issuer's public key (the classic confusion).
    let public = serde_json::to_vec(&k1.jwk).unwrap();
    let mut h = Header::new(Algorithm::HS256);
    h.kid = Some("k1".into());
    h.typ = Some("at+jwt".into());
    let hs = jsonwebtoken::encode(&h, &c, &EncodingKey::from_secret(&public).unwrap()).unwrap();
    assert_refused(&initialize(&server, &hs).await, 401, "HS256");
    // ES256 with kid k1 but signed by another key.
    let stranger = Key::new("k1");
    assert_refused(
        &initialize(&server, &sign(&stranger, &c)).await,
        401,
        "signature",
    );
    // A valid token with its payload swapped (privilege escalation).
    let parts: Vec<&str> = good.split('.').collect();
    let mut escalated = claims(&iss, &server, "carol");
    escalated["groups"] = json!(["admins"]);
    let swapped = format!(
        "{}.{}.{}",
        parts[0],
        B64.encode(escalated.to_string()),
        parts[2]
    );
    assert_refused(&initialize(&server, &swapped).await, 401, "signature");
    // A huge token is refused unread.
    let huge = format!("{}.{}.{}", "a".repeat(6000), "b".repeat(6000), "c");
    let a = initialize(&server, &huge).await;
    assert_refused(&a, 401, "longer than 8 KiB");

    // Nothing above made the server fetch the keys again: only unknown
    // key ids do.
    assert_eq!(issuer.fetches(), 1, "fetched once, at start");
    // The provider rotates: a token signed with the new key gets in after
    // one fetch.
    let k2 = Key::new("k2");
    issuer.publish(&k2);
    let rotated = sign(&k2, &claims(&iss, &server, "carol"));
    assert_eq!(initialize(&server, &rotated).await.status, 200);
    assert_eq!(issuer.fetches(), 2);
    assert_eq!(initialize(&server, &rotated).await.status, 200);
    assert_eq!(issuer.fetches(), 2, "the new key is kept");
    // Made-up key ids right after that fetch: refused without fetching
    // (the cooldown), however many.
    for i in 0..20 {
        let fake = Key::new(&format!("made-up-{i}"));
        assert_refused(
            &initialize(&server, &sign(&fake, &claims(&iss, &server, "m"))).await,
            401,
            "publishes no signing key",
        );
    }
    assert_eq!(
        issuer.fetches(),
        2,
        "unknown kids cannot make us hammer the provider"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unknown_key_id_is_fetched_for_once_then_refused() {
    let k1 = Key::new("k1");
    let issuer = Issuer::start(&[&k1]).await;
    let (server, _) = serve(&issuer.url, "", "").await;
    assert_eq!(issuer.fetches(), 1);
    // Tokens of identities with no mode: refused unless [identities]
    // names them.
    let stranger = sign(&k1, &claims(&issuer.url, &server, "stranger"));
    let a = initialize(&server, &stranger).await;
    assert_eq!(a.status, 403, "{}", a.text);
    assert!(
        a.text.contains("identity sso:stranger has no mode"),
        "{}",
        a.text
    );
    let pinned = sign(&k1, &claims(&issuer.url, &server, "pinned@example.test"));
    assert_eq!(initialize(&server, &pinned).await.status, 200);
    let fake = Key::new("k9");
    let token = sign(&fake, &claims(&issuer.url, &server, "m"));
    assert_refused(
        &initialize(&server, &token).await,
        401,
        "publishes no signing key k9",
    );
    assert_eq!(issuer.fetches(), 2, "one fetch for the unknown kid");
    assert_refused(
        &initialize(&server, &token).await,
        401,
        "publishes no signing key k9",
    );
    assert_eq!(issuer.fetches(), 2, "and not another one right after");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_issuer_that_is_down_or_slow_costs_a_bounded_wait_and_keys_still_work() {
    // Down from the start: nothing listens at the issuer's address.
    let gone = format!("http://127.0.0.1:{}", free_port());
    let (server, bob) = serve(&gone, "", "").await;
    // Said at start, before the server said where it serves.
    assert!(
        server
            .said("cannot fetch the issuer's signing keys")
            .is_some(),
        "the provider being down is logged at start"
    );
    let k1 = Key::new("k1");
    let mut c = claims(&gone, &server, "carol");
    c["iss"] = json!(gone);
    let a = initialize(&server, &sign(&k1, &c)).await;
    assert_eq!(a.status, 503, "{}", a.text);
    assert!(a.text.contains("cannot be fetched right now"), "{}", a.text);
    assert!(!a.text.contains(&sign(&k1, &c)), "no token in the answer");
    assert_eq!(
        initialize(&server, &bob).await.status,
        200,
        "bearer keys are not held up"
    );

    // Slow: the key set answers after 20 s; a token with an unknown key
    // waits at most the fetch bound (3 s), then is refused, and requests
    // with keys go on meanwhile.
    let issuer = Issuer::start(&[&k1]).await;
    let (server, bob) = serve(&issuer.url, "", "default_mode = \"ro\"\n").await;
    *issuer.state.slow.lock().unwrap() = Some(Duration::from_secs(20));
    let k2 = Key::new("k2");
    let token = sign(&k2, &claims(&issuer.url, &server, "carol"));
    let waiting = {
        let url = server.url.clone();
        tokio::spawn(async move { initialize_at(&url, &token).await })
    };
    let key_answer = initialize(&server, &bob).await;
    assert_eq!(key_answer.status, 200);
    let a = waiting.await.unwrap();
    assert_eq!(a.status, 401, "{}", a.text);
    assert!(a.took < Duration::from_secs(10), "waited {:?}", a.took);
    assert!(
        key_answer.took < a.took,
        "the key request did not wait for the fetch"
    );
    // The keys fetched at start are kept: k1 still gets in.
    let good = sign(&k1, &claims(&issuer.url, &server, "carol"));
    assert_eq!(initialize(&server, &good).await.status, 200);
}

/// The whole way with a real OpenID provider: client-credentials tokens
/// for this server's resource get in as their client, with the mode their
/// groups map to, and run a script; a client no group maps is refused,
/// and a token for another resource is not for us.
#[tokio::test(flavor = "multi_thread")]
async fn tokens_from_a_real_openid_provider_run_scripts_as_their_client() {
    use airlock_testkit::{OidcClient, TempOidcProvider};
    let Some(packages) = common::oidc_packages() else {
        return;
    };
    let clients = [
        OidcClient::new("ops-bot", "ops-secret")
            .with_groups(&["ops"])
            .with_email("ops@example.test"),
        OidcClient::new("plain-bot", "plain-secret"),
    ];
    let provider = TempOidcProvider::start(&packages, &clients).unwrap();
    let (server, _) = serve(
        &provider.issuer(),
        "\"mcp\"",
        "algorithms = [\"ES256\"]\ngroups = { ops = \"operator\" }\n",
    )
    .await;
    let resource = server.url.clone();
    let ops = provider.token("ops-bot", &resource).unwrap();
    let plain = provider.token("plain-bot", &resource).unwrap();

    let me = whoami(&server, &ops).await;
    assert_eq!(
        (me["identity"].as_str(), me["mode"].as_str()),
        (Some("sso:ops-bot"), Some("operator"))
    );
    // No mapped group, no default_mode, not in [identities]: no entry.
    let a = initialize(&server, &plain).await;
    assert_eq!(a.status, 403, "{}", a.text);
    assert!(
        a.text.contains("identity sso:plain-bot has no mode"),
        "{}",
        a.text
    );

    // A script runs with the token as its caller.
    let client = server.connect(&ops).await;
    let r = common::call(
        &client,
        "execute",
        json!({"script": "const nodes = await tools.node_list({}); return nodes.length;"}),
    )
    .await;
    let text = common::text(&r);
    assert_ne!(r.is_error, Some(true), "{text}");
    assert!(text.contains('3'), "three simulated nodes: {text}");
    let _ = client.cancel().await;

    // A token the provider issued for another resource is not for us.
    let elsewhere = provider.token("ops-bot", "http://127.0.0.1:1/mcp").unwrap();
    assert_refused(&initialize(&server, &elsewhere).await, 401, "audience");
}
