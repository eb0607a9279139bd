//! The operator console over real HTTP, against a real `airlock serve
//! --http` on the simulated cluster, with an agent on MCP beside it:
//! people sign in with their keys, see what an agent asked for, and
//! approve or deny it with a reason, which the agent then meets; the
//! four-eyes rule, roles and CSRF hold.

mod common;

use std::time::Duration;

use airlock_testkit::{OidcClient, OidcPerson, TempOidcProvider};
use common::{call, oidc_packages, serve_enrolled, serve_enrolled_on, ConsoleUser};
use reqwest::StatusCode;
use serde_json::{json, Value};

const CONSOLE: &str = "\n[console]\napprovers = [\"rita\", \"olga\"]\nauditors = [\"local\"]\n";

/// The request an agent's change filed, from its execute result.
async fn asks(client: &rmcp::service::RunningService<rmcp::RoleClient, ()>, vmid: u32) -> String {
    asks_in(client, vmid).await.0
}

/// The request, and the execution that waits for it.
async fn asks_in(
    client: &rmcp::service::RunningService<rmcp::RoleClient, ()>,
    vmid: u32,
) -> (String, String) {
    let r = call(
        client,
        "execute",
        json!({"script": format!("await tools.vm_start({{node: 'pve1', vmid: {vmid}}})")}),
    )
    .await;
    // The execution waits for the decision (it is durable).
    let answer: &Value = r.structured_content.as_ref().unwrap();
    assert_eq!(answer["status"], "waiting", "{answer}");
    let text = |v: &Value| v.as_str().unwrap().to_string();
    (
        text(&answer["waiting"][0]["request_id"]),
        text(&answer["execution"]),
    )
}

async fn outcome(client: &rmcp::service::RunningService<rmcp::RoleClient, ()>, vmid: u32) -> Value {
    let r = call(
        client,
        "execute",
        json!({"script": format!("await tools.vm_start({{node: 'pve1', vmid: {vmid}}})")}),
    )
    .await;
    r.structured_content.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn people_decide_in_the_console_and_the_agent_meets_it() {
    // Agents' keys for alice, olga and rita; people's console keys for
    // olga, rita, local and alice.
    let (_sim, server, enrolled, audit) = serve_enrolled(
        Duration::ZERO,
        CONSOLE,
        &[],
        &["alice", "olga", "rita"],
        &["olga", "rita", "local", "alice"],
    )
    .await;
    let (agents, keys) = (enrolled.agents, enrolled.people);
    assert!(server.said("operator console at").is_some());
    let agent = server.connect(&agents["alice"]).await;

    // Not signed in: sent to sign in; a wrong key is told so.
    let mut rita = ConsoleUser::new(&server.base());
    let (status, _) = rita.get("/console").await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let r = rita.sign_in("alk_not-a-key").await;
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert!(rita.cookie.is_none());
    // An agent's key signs no one in, even an approver's identity's; a
    // console key calls no tool.
    let r = rita.sign_in(&agents["rita"]).await;
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    let body = r.text().await.unwrap();
    assert!(body.contains("enroll IDENTITY --console"), "{body}");
    assert!(rita.cookie.is_none());
    let mcp = reqwest::Client::new()
        .post(&server.url)
        .bearer_auth(&keys["rita"])
        .header("accept", "application/json, text/event-stream")
        .json(
            &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"}}}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(mcp.status(), StatusCode::UNAUTHORIZED);
    assert!(mcp.text().await.unwrap().contains("console key"));
    // alice has a console key but no role: no session.
    let mut alice = ConsoleUser::new(&server.base());
    assert_eq!(
        alice.sign_in(&keys["alice"]).await.status(),
        StatusCode::FORBIDDEN
    );
    assert!(alice.cookie.is_none());

    // The agent asks; rita sees it and approves with a reason; it runs.
    let (first, waiting) = asks_in(&agent, 103).await;
    assert_eq!(
        rita.sign_in(&keys["rita"]).await.status(),
        StatusCode::SEE_OTHER
    );
    let (status, list) = rita.get("/console").await;
    assert_eq!(status, StatusCode::OK);
    assert!(list.contains(&first) && list.contains("vmid=103"), "{list}");
    let (status, page) = rita.get(&format!("/console/requests/{first}")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains("value=\"approve\"") && page.contains("value=\"deny\""));
    let (status, _) = rita.decide(&first, "approve", "planned restart").await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    // The agent follows the execution that waited: it goes on.
    let ran = call(&agent, "execute", json!({"execution": waiting}))
        .await
        .structured_content
        .unwrap();
    assert_eq!(ran["execution"], json!(waiting), "{ran}");
    let task = ran["result"].as_str().unwrap_or_default();
    assert!(task.contains(":qmstart:103:"), "the start ran: {ran}");

    // Denied with a reason: the agent is told who and why.
    let second = asks(&agent, 104).await;
    let (status, _) = rita
        .decide(&second, "deny", "104 is the build host <b>not</b> yours")
        .await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let refused = outcome(&agent, 104).await;
    let told = refused["error"]["reason"].as_str().unwrap_or_default();
    assert!(
        told.contains(r#"by rita: "104 is the build host <b>not</b> yours""#),
        "{refused}"
    );
    // The page shows the reason as text, never as markup.
    let (_, page) = rita.get(&format!("/console/requests/{second}")).await;
    assert!(
        page.contains("104 is the build host &lt;b&gt;not&lt;/b&gt; yours"),
        "{page}"
    );

    // A forged post (no token, or another session's) decides nothing.
    let third = asks(&agent, 105).await;
    let (status, _) = rita
        .post(
            &format!("/console/requests/{third}/decide"),
            &[("decision", "approve")],
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let mut olga = ConsoleUser::new(&server.base());
    olga.sign_in(&keys["olga"]).await;
    let (_, olga_page) = olga.get("/console").await;
    let (status, _) = rita
        .post(
            &format!("/console/requests/{third}/decide"),
            &[
                ("csrf", &ConsoleUser::csrf(&olga_page)),
                ("decision", "approve"),
            ],
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);

    // An auditor reads, and may not decide.
    let mut local = ConsoleUser::new(&server.base());
    local.sign_in(&keys["local"]).await;
    let (status, page) = local.get(&format!("/console/requests/{third}")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(!page.contains("value=\"approve\""), "{page}");
    let (status, _) = local.decide(&third, "approve", "").await;
    assert_eq!(status, StatusCode::FORBIDDEN);

    // An approver's own request: deny only, and an approve is refused.
    let olga_agent = server.connect(&agents["olga"]).await;
    let own = asks(&olga_agent, 106).await;
    let (_, page) = olga.get(&format!("/console/requests/{own}")).await;
    assert!(
        !page.contains("value=\"approve\"") && page.contains("value=\"deny\""),
        "{page}"
    );
    let (status, page) = olga.decide(&own, "approve", "").await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(page.contains("nobody approves their own request"), "{page}");
    let still = outcome(&olga_agent, 106).await;
    assert_eq!(still["status"], "waiting", "{still}");

    // A revoked key's sign-in opens nothing once the keys are re-read.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_airlock"))
        .args(["revoke", "local", "--file"])
        .arg(&server.enrollment)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    unsafe { libc::kill(server.child.id() as i32, libc::SIGHUP) };
    server.wait_for("reloaded the enrolled keys");
    assert_eq!(local.get("/console").await.0, StatusCode::SEE_OTHER);

    // Signed out, the cookie opens nothing.
    let (_, page) = rita.get("/console").await;
    let (status, _) = rita
        .post("/console/logout", &[("csrf", &ConsoleUser::csrf(&page))])
        .await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(rita.get("/console").await.0, StatusCode::SEE_OTHER);

    // Every decision is in the chain, with its channel and reason.
    let log = std::fs::read_to_string(&audit).unwrap();
    let decisions: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|l| l["event"] == "approval_decision")
        .collect();
    assert_eq!(decisions.len(), 2, "{decisions:?}");
    assert!(decisions
        .iter()
        .all(|d| d["channel"] == "console" && d["decided_by"] == "rita"));
    assert_eq!(decisions[0]["reason"], "planned restart");

    // Executions and the audit trail, under the whole chain's verdict.
    let (status, page) = olga.get("/console/executions").await;
    assert_eq!(status, StatusCode::OK);
    assert!(page.contains("The chain verifies"), "{page}");
    let starts = log.matches("\"event\":\"execution_start\"").count();
    let chain = page.split("In the audit chain").nth(1).unwrap();
    assert_eq!(
        chain.matches("<tr>").count(),
        1 + starts.min(100),
        "one row each: {page}"
    );
    assert!(
        page.contains("vm_start ×1") && page.contains(">alice<"),
        "{page}"
    );
    let (status, page) = olga
        .get("/console/audit?identity=alice&tool=vm_start")
        .await;
    assert_eq!(status, StatusCode::OK);
    let calls = log
        .lines()
        .filter(|l| l.contains("\"identity\":\"alice\"") && l.contains("\"tool\":\"vm_start\""))
        .count();
    let lines = log.lines().count();
    assert!(calls >= 5, "{calls}");
    assert!(
        page.contains(&format!("{calls} of {lines} lines match")),
        "{page}"
    );
    assert!(
        page.contains("<td>alice</td>") && !page.contains("<td>olga</td>"),
        "only alice's lines"
    );
    // A bad search is named, and reads nothing.
    let (status, page) = olga.get("/console/audit?since=yesterday").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        page.contains("since `yesterday` is not a UTC time"),
        "{page}"
    );
    // An edited line breaks the chain, and the page says where.
    let edited = log.replacen("planned restart", "planned restarT", 1);
    std::fs::write(&audit, edited).unwrap();
    let (_, page) = olga.get("/console/audit").await;
    let broken_at = log
        .lines()
        .position(|l| l.contains("planned restart"))
        .unwrap()
        + 1;
    assert!(
        page.contains(&format!("The chain is broken at line {broken_at}")),
        "{page}"
    );
    agent.cancel().await.unwrap();
    olga_agent.cancel().await.unwrap();
}

/// Durable executions on the executions page: what each waits for,
/// linked to its request; an approver cancels one that waits (the end
/// line says who, its agent's follow-up finds nothing), an auditor and a
/// forged form cannot, and a second cancel is told it is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approver_sees_what_executions_wait_for_and_cancels_one() {
    let (_sim, server, enrolled, audit) =
        serve_enrolled(Duration::ZERO, CONSOLE, &[], &["alice"], &["olga", "local"]).await;
    let (agents, keys) = (enrolled.agents, enrolled.people);
    let agent = server.connect(&agents["alice"]).await;
    let (request, execution) = asks_in(&agent, 103).await;
    let mut olga = ConsoleUser::new(&server.base());
    assert_eq!(
        olga.sign_in(&keys["olga"]).await.status(),
        StatusCode::SEE_OTHER
    );
    let mut local = ConsoleUser::new(&server.base());
    assert_eq!(
        local.sign_in(&keys["local"]).await.status(),
        StatusCode::SEE_OTHER
    );
    let cancel = format!("/console/executions/{execution}/cancel");

    let (status, page) = olga.get("/console/executions").await;
    assert_eq!(status, StatusCode::OK);
    let kept = page
        .split("Durable executions kept to go on")
        .nth(1)
        .unwrap()
        .split("In the audit chain")
        .next()
        .unwrap();
    assert!(kept.contains("1 kept"), "{kept}");
    assert!(
        kept.contains(&execution) && kept.contains(">alice<"),
        "{kept}"
    );
    assert!(
        kept.contains(&format!("href=\"/console/requests/{request}\"")),
        "what it waits for, linked: {kept}"
    );
    assert!(kept.contains(&format!("action=\"{cancel}\"")), "{kept}");
    // An auditor sees it, and cannot cancel it.
    let (_, seen) = local.get("/console/executions").await;
    assert!(
        seen.contains(&execution) && !seen.contains(&cancel),
        "{seen}"
    );
    let (status, said) = local
        .post(&cancel, &[("csrf", &ConsoleUser::csrf(&seen))])
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(said.contains("Only approvers cancel executions"), "{said}");
    // A form without the session's token cancels nothing.
    let (status, _) = olga.post(&cancel, &[("csrf", "forged")]).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (_, page) = olga.get("/console/executions").await;
    assert!(page.contains(&cancel), "still there");

    let (status, _) = olga
        .post(&cancel, &[("csrf", &ConsoleUser::csrf(&page))])
        .await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    let (_, page) = olga.get("/console/executions").await;
    assert!(
        page.contains("None: no execution waits") && !page.contains(&cancel),
        "{page}"
    );
    let ends: Vec<Value> = std::fs::read_to_string(&audit)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|l| l["event"] == "execution_end" && l["execution"] == execution.as_str())
        .collect();
    assert_eq!(ends.len(), 1, "{ends:?}");
    assert_eq!(ends[0]["outcome"], "Cancelled");
    assert_eq!(ends[0]["cancelled_by"], "olga");
    // Its agent's follow-up finds nothing to go on with.
    let r = call(&agent, "execute", json!({"execution": execution})).await;
    let answer = r.structured_content.unwrap();
    assert_eq!(answer["error"]["kind"], "UnknownExecution", "{answer}");
    // Cancelled twice: told it is gone.
    let (status, said) = olga
        .post(&cancel, &[("csrf", &ConsoleUser::csrf(&page))])
        .await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert!(said.contains("is waiting"), "{said}");
    agent.cancel().await.unwrap();
}

/// The provider's sign-in refuses what did not start here: a callback
/// without this browser's pending sign-in, with another state, or with a
/// code the provider never issued; the start sends the browser to the
/// provider with PKCE (S256), a state and a nonce, and keeps them in a
/// cookie only the callback gets. No refusal signs anyone in, and the
/// client secret is in no log line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_sign_in_that_did_not_start_here_signs_no_one_in() {
    let Some(packages) = oidc_packages() else {
        return;
    };
    let provider = TempOidcProvider::start_with_people(
        &packages,
        &[OidcClient::new("airlock-console", "console-secret-7f3a")
            .with_redirect("http://127.0.0.1/console/oidc/callback")],
        &[OidcPerson::new("rita", None, &["ops-leads"])],
    )
    .unwrap();
    let secrets = tempfile::tempdir().unwrap();
    let secret_file = secrets.path().join("secret");
    std::fs::write(&secret_file, "console-secret-7f3a\n").unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let toml = format!(
        "\n[console]\n\n[console.oidc]\nissuer = \"{}\"\nclient_id = \"airlock-console\"\n\
         client_secret_file = \"{}\"\nredirect_uri = \"http://127.0.0.1:{port}/console/oidc/callback\"\n\
         approver_groups = [\"ops-leads\"]\n",
        provider.issuer(),
        secret_file.display()
    );
    let (_sim, server, _, _) = serve_enrolled_on(
        &format!("127.0.0.1:{port}"),
        Duration::ZERO,
        &toml,
        &[],
        &["alice"],
        &[],
    )
    .await;
    let base = server.base();
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();

    // The sign-in page offers the provider.
    let page = http
        .get(format!("{base}/console/login"))
        .send()
        .await
        .unwrap();
    assert!(page.text().await.unwrap().contains("/console/oidc/start"));

    // The start: to the provider, with PKCE, state and nonce.
    let start = http
        .get(format!("{base}/console/oidc/start"))
        .send()
        .await
        .unwrap();
    assert_eq!(start.status(), StatusCode::SEE_OTHER);
    let to = reqwest::Url::parse(start.headers()["location"].to_str().unwrap()).unwrap();
    assert!(to.as_str().starts_with(&provider.issuer()), "{to}");
    let q: std::collections::HashMap<String, String> = to.query_pairs().into_owned().collect();
    assert_eq!(q["code_challenge_method"], "S256");
    assert_eq!(q["code_challenge"].len(), 43, "base64url of a SHA-256");
    assert_eq!(q["client_id"], "airlock-console");
    assert_eq!(q["response_type"], "code");
    assert!(q["scope"].split(' ').any(|s| s == "openid"));
    assert!(
        !to.as_str().contains("console-secret"),
        "the secret stays on the server"
    );
    let set = start.headers()["set-cookie"].to_str().unwrap().to_string();
    for part in [
        "__Host-airlock_console_login=",
        "HttpOnly",
        "Secure",
        "SameSite=Lax",
        "Path=/;",
        "Max-Age=600",
    ] {
        assert!(set.contains(part), "{set}");
    }
    let cookie = set.split(';').next().unwrap().to_string();
    assert!(
        !cookie.contains(&q["code_challenge"]),
        "the verifier, not the challenge, is kept"
    );
    let state = q["state"].clone();

    let callback = |query: String, cookie: Option<String>| {
        let mut r = http.get(format!("{base}/console/oidc/callback?{query}"));
        if let Some(c) = cookie {
            r = r.header("cookie", c);
        }
        r.send()
    };
    let signed_in = |r: &reqwest::Response| {
        r.headers()
            .get_all("set-cookie")
            .iter()
            .any(|v| v.to_str().unwrap().starts_with("__Host-airlock_console="))
    };
    // No pending sign-in, or another state: not started here.
    for (query, cookie) in [
        (format!("state={state}&code=abc"), None),
        (
            format!("state={}&code=abc", "0".repeat(64)),
            Some(cookie.clone()),
        ),
    ] {
        let r = callback(query, cookie).await.unwrap();
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
        assert!(!signed_in(&r));
        let body = r.text().await.unwrap();
        assert!(body.contains("not started from this browser"), "{body}");
    }
    // The right state with a code the provider never issued.
    let r = callback(format!("state={state}&code=made-up"), Some(cookie.clone()))
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert!(!signed_in(&r));
    let body = r.text().await.unwrap();
    assert!(body.contains("refused to finish the sign-in"), "{body}");
    // The provider's error comes through as a code only.
    let r = callback(
        format!("state={state}&error=access_denied%3Cb%3Ex%3C%2Fb%3E"),
        Some(cookie.clone()),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    let body = r.text().await.unwrap();
    assert!(
        body.contains("(access_deniedbxb)") && !body.contains("<b>x"),
        "{body}"
    );
    // Nobody signed in: the console still sends to the sign-in page.
    let r = http.get(format!("{base}/console")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    server.wait_for("console sign-in through the provider failed");
    drop(server);
}

/// The webhook hears of each request as it is filed (the message links
/// it, with no argument), and never holds up the call that filed it: the
/// receiver keeps the first message unanswered while the agent goes on
/// filing. Asking again for the same call tells nobody twice; a receiver
/// that refuses is logged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_hears_of_each_request_and_never_holds_up_the_call() {
    use std::sync::Arc;
    let (heard, mut hear) = tokio::sync::mpsc::unbounded_channel::<Value>();
    // Answers wait for the test to let them go, one permit each.
    let answers = Arc::new(tokio::sync::Semaphore::new(0));
    let release = answers.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |body: String| {
            let (heard, answers) = (heard.clone(), answers.clone());
            async move {
                let v: Value = serde_json::from_str(&body).unwrap();
                let plan = !v["airlock"]["changes"].is_null();
                heard.send(v).unwrap();
                answers.acquire().await.unwrap().forget();
                if plan {
                    axum::http::StatusCode::INTERNAL_SERVER_ERROR
                } else {
                    axum::http::StatusCode::OK
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hook = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let secrets = tempfile::tempdir().unwrap();
    let url_file = secrets.path().join("webhook-url");
    std::fs::write(&url_file, format!("{hook}\n")).unwrap();
    let toml = format!(
        "\n[console]\napprovers = [\"rita\"]\nwebhook_url_file = {:?}\npublic_url = \"https://airlock.example.test\"\n",
        url_file.display().to_string()
    );
    let (_sim, server, enrolled, _) =
        serve_enrolled(Duration::ZERO, &toml, &[], &["alice"], &["rita"]).await;
    let agent = server.connect(&enrolled.agents["alice"]).await;

    let first = asks(&agent, 103).await;
    let told = hear.recv().await.unwrap();
    assert_eq!(told["airlock"]["id"], first.as_str());
    assert_eq!(told["airlock"]["identity"], "alice");
    assert_eq!(told["airlock"]["tool"], "vm_start");
    let link = format!("https://airlock.example.test/console/requests/{first}");
    assert_eq!(told["airlock"]["link"], link.as_str());
    let text = told["text"].as_str().unwrap();
    assert!(
        text.starts_with("Airlock: `alice` asks to call `vm_start`")
            && text.contains(&format!("<{link}|Decide in the console>")),
        "{text}"
    );
    assert!(!told.to_string().contains("vmid"), "no argument: {told}");

    // The first message is still unanswered: the calls go on regardless.
    let second = asks(&agent, 104).await;
    assert_eq!(
        asks(&agent, 103).await,
        first,
        "the same request, found again"
    );
    let plan = call(
        &agent,
        "execute",
        json!({"script": "await tools.vm_stop({node: 'pve1', vmid: 101}); 1", "mode": "plan"}),
    )
    .await;
    let plan = plan.structured_content.unwrap()["plan"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    release.add_permits(3);
    let ids: Vec<String> = [hear.recv().await.unwrap(), hear.recv().await.unwrap()]
        .iter()
        .map(|m| m["airlock"]["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        ids,
        [second, plan],
        "one message per request, in order; none for the retry"
    );
    server.wait_for("the webhook refused a request's message");
    assert!(hear.try_recv().is_err(), "nothing more");
    agent.cancel().await.unwrap();
}
