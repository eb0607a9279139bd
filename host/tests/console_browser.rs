//! The operator console in a real headless browser (Debian's Chromium,
//! driven over WebDriver by chromedriver), against a real `airlock serve
//! --http` on the simulated cluster with an agent on MCP beside it: a
//! person signs in, reads a plan the agent filed, approves it with a
//! reason, and the agent's apply runs; a denial's reason reaches the
//! agent; an approver's own request offers only Deny. People also sign in
//! through a real OpenID provider (oidc-provider, started by the testkit):
//! the authorization code grant with PKCE, their groups giving their role.
//!
//! The pages are photographed into `target/console-screenshots/`; with
//! `AIRLOCK_UPDATE_SCREENSHOTS=1` also into `docs/`, where the README and
//! DEPLOYMENT.md show them.

mod common;

use std::{
    net::TcpListener,
    os::unix::process::CommandExt,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use airlock_testkit::{OidcClient, OidcPerson, TempNginx, TempOidcProvider, TempPostgres};
use common::{call, oidc_packages, serve_enrolled, serve_enrolled_on, Server};
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{json, Value};

const CONSOLE: &str = "\n[console]\napprovers = [\"rita\", \"olga\"]\n";

/// Stops two VMs of pve1: a plan of two changes.
const PLAN: &str = "await tools.vm_stop({node: 'pve1', vmid: 101}); \
                    await tools.vm_stop({node: 'pve1', vmid: 102}); 'stopped'";

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// chromedriver on a free loopback port, stopped when dropped.
struct Driver {
    child: Child,
    url: String,
    _profile: tempfile::TempDir,
}

impl Drop for Driver {
    /// Stops chromedriver and the browsers it started (its process
    /// group): killing chromedriver alone leaves Chromium running when a
    /// failed assertion skipped closing the session.
    fn drop(&mut self) {
        unsafe { libc::kill(-(self.child.id() as i32), libc::SIGKILL) };
        let _ = self.child.wait();
    }
}

impl Driver {
    /// Installs the browser if missing (scripts/install-browser.sh); `None`
    /// (the test says SKIPPED) where that cannot be done.
    async fn start() -> Option<Driver> {
        let script = repo().join("scripts/install-browser.sh");
        let installed = Command::new("sh").arg(&script).status().ok()?;
        if !installed.success() {
            return None;
        }
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .process_group(0)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        let driver = Driver {
            child,
            url: format!("http://127.0.0.1:{port}"),
            _profile: tempfile::tempdir().unwrap(),
        };
        // Ready when /status says so (bounded: a driver that never comes
        // up fails the test).
        let deadline = Instant::now() + Duration::from_secs(30);
        // reqwest is built without a default TLS provider here.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::new();
        loop {
            let ready = http
                .get(format!("{}/status", driver.url))
                .send()
                .await
                .ok()
                .filter(|r| r.status().is_success());
            if ready.is_some() {
                return Some(driver);
            }
            assert!(Instant::now() < deadline, "chromedriver never came up");
            tokio::task::yield_now().await;
        }
    }

    async fn browser(&self) -> Client {
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".into(),
            json!({"args": [
                "--headless=new", "--no-sandbox", "--disable-gpu",
                "--disable-dev-shm-usage", "--window-size=1280,860",
                format!("--user-data-dir={}", self._profile.path().display()),
            ]}),
        );
        ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(caps)
            .connect(&self.url)
            .await
            .expect("a browser session")
    }
}

/// Saves the page as `name.png`, and into docs/ when asked to.
async fn photograph(browser: &Client, name: &str) {
    let png = browser.screenshot().await.unwrap();
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 5_000,
        "{name}: a real picture"
    );
    let dir = repo().join("target/console-screenshots");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(format!("{name}.png")), &png).unwrap();
    if std::env::var_os("AIRLOCK_UPDATE_SCREENSHOTS").is_some() {
        std::fs::write(repo().join(format!("docs/console-{name}.png")), &png).unwrap();
    }
}

async fn click(browser: &Client, at: Locator<'_>) {
    browser.find(at).await.unwrap().click().await.unwrap();
}

async fn sign_in(browser: &Client, base: &str, key: &str) {
    browser.goto(&format!("{base}/console")).await.unwrap();
    let field = browser.find(Locator::Css("input#key")).await.unwrap();
    field.send_keys(key).await.unwrap();
    click(browser, Locator::Css("form button[type=submit]")).await;
    browser
        .wait()
        .for_element(Locator::Css("header .who"))
        .await
        .unwrap();
}

async fn sign_out(browser: &Client) {
    click(browser, Locator::Css("header form button")).await;
    browser
        .wait()
        .for_element(Locator::Css("input#key"))
        .await
        .unwrap();
}

/// Opens request `id` from the list, writes `reason` and presses `button`
/// (`approve` or `deny`); returns the page's text after.
async fn decide(
    browser: &Client,
    id: &str,
    reason: &str,
    button: &str,
    shot: Option<&str>,
) -> String {
    click(browser, Locator::LinkText(id)).await;
    let reason_box = browser
        .wait()
        .for_element(Locator::Css("textarea[name=reason]"))
        .await
        .unwrap();
    reason_box.send_keys(reason).await.unwrap();
    if let Some(name) = shot {
        photograph(browser, name).await;
    }
    click(browser, Locator::Css(&format!("button[value={button}]"))).await;
    browser
        .wait()
        .for_element(Locator::Css("span.status.approved, span.status.denied"))
        .await
        .unwrap();
    browser
        .find(Locator::Css("main"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_decides_in_a_real_browser() {
    let Some(driver) = Driver::start().await else {
        eprintln!("SKIPPED: no chromium and chromedriver, and scripts/install-browser.sh could not install them");
        return;
    };
    let (_sim, server, enrolled, _) = serve_enrolled(
        Duration::ZERO,
        CONSOLE,
        &[],
        &["alice", "olga"],
        &["rita", "olga"],
    )
    .await;
    let (agents, people) = (enrolled.agents, enrolled.people);
    let base = server.base();
    let agent = server.connect(&agents["alice"]).await;

    // The agent plans two changes; the plan waits for a person.
    let planned = call(&agent, "execute", json!({"script": PLAN, "mode": "plan"})).await;
    let planned: Value = planned.structured_content.unwrap();
    let plan = planned["plan"]["id"]
        .as_str()
        .expect("a plan filed")
        .to_string();

    let browser = driver.browser().await;
    browser.goto(&format!("{base}/console")).await.unwrap();
    browser
        .wait()
        .for_element(Locator::Css("input#key"))
        .await
        .unwrap();
    photograph(&browser, "sign-in").await;
    sign_in(&browser, &base, &people["rita"]).await;
    let list = browser
        .find(Locator::Css("main"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        list.contains(&plan) && list.contains("plan of 2 changes"),
        "{list}"
    );
    photograph(&browser, "requests").await;

    // rita reads the plan's table and approves it; the apply runs.
    let after = decide(
        &browser,
        &plan,
        "maintenance window 14:00",
        "approve",
        Some("plan"),
    )
    .await;
    assert!(
        after.contains("approved") && after.contains("maintenance window 14:00"),
        "{after}"
    );
    assert!(
        after.contains("vmid=101") && after.contains("vmid=102"),
        "{after}"
    );
    photograph(&browser, "decided").await;
    let applied = call(&agent, "execute", json!({"script": PLAN, "plan": plan})).await;
    let applied: Value = applied.structured_content.unwrap();
    assert_eq!(applied["result"], "stopped", "{applied}");

    // A denial's reason reaches the agent.
    let single = call(
        &agent,
        "execute",
        json!({"script": "await tools.vm_start({node: 'pve1', vmid: 103})"}),
    )
    .await;
    // The execution waits for the decision.
    let single = single.structured_content.unwrap();
    let asked = single["waiting"][0]["request_id"]
        .as_str()
        .unwrap()
        .to_string();
    browser.goto(&format!("{base}/console")).await.unwrap();
    let after = decide(&browser, &asked, "not on the build host", "deny", None).await;
    assert!(after.contains("denied"), "{after}");
    // Followed, it meets the denial.
    let told = call(&agent, "execute", single["follow"].clone()).await;
    let told = told.structured_content.unwrap();
    assert!(
        told["error"]["reason"]
            .as_str()
            .is_some_and(|r| r.contains(r#"by rita: "not on the build host""#)),
        "{told}"
    );
    sign_out(&browser).await;

    // olga, an approver, meets her own request: Deny only.
    let olga_agent = server.connect(&agents["olga"]).await;
    let own = call(
        &olga_agent,
        "execute",
        json!({"script": "await tools.vm_start({node: 'pve1', vmid: 104})"}),
    )
    .await;
    let own = own.structured_content.unwrap();
    let own_execution = own["execution"].as_str().unwrap().to_string();
    let own = own["waiting"][0]["request_id"]
        .as_str()
        .unwrap()
        .to_string();
    sign_in(&browser, &base, &people["olga"]).await;
    browser
        .goto(&format!("{base}/console/requests/{own}"))
        .await
        .unwrap();
    browser
        .wait()
        .for_element(Locator::Css("button[value=deny]"))
        .await
        .unwrap();
    assert!(
        browser
            .find_all(Locator::Css("button[value=approve]"))
            .await
            .unwrap()
            .is_empty(),
        "no Approve on one's own request"
    );
    photograph(&browser, "own-request").await;

    // What ran, and the trail under the chain's verdict.
    browser
        .goto(&format!("{base}/console/executions"))
        .await
        .unwrap();
    let text = main_text(&browser).await;
    assert!(
        text.contains("The chain verifies") && text.contains("vm_stop ×2"),
        "{text}"
    );
    // Her own execution waits for the request she may not approve; she
    // cancels it.
    assert!(
        text.contains("1 kept") && text.contains(&own_execution),
        "{text}"
    );
    photograph(&browser, "executions").await;
    click(
        &browser,
        Locator::Css(&format!(
            "form[action='/console/executions/{own_execution}/cancel'] button"
        )),
    )
    .await;
    browser
        .wait()
        .for_element(Locator::Css("p.kept-none"))
        .await
        .unwrap();
    let text = main_text(&browser).await;
    // Gone from those kept; in the chain, ended `Cancelled`.
    assert!(text.contains("Cancelled"), "{text}");
    browser
        .goto(&format!("{base}/console/audit"))
        .await
        .unwrap();
    browser
        .find(Locator::Css("input[name=event]"))
        .await
        .unwrap()
        .send_keys("approval_decision")
        .await
        .unwrap();
    click(&browser, Locator::Css("form.search button")).await;
    // The answer's page, not the one the search was typed on: its form
    // carries the search as the field's value (typing sets no attribute),
    // and a table found before it loads goes stale.
    browser
        .wait()
        .for_element(Locator::Css(
            "form.search input[name=event][value=approval_decision]",
        ))
        .await
        .unwrap();
    let text = browser
        .wait()
        .for_element(Locator::Css("main table"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(
        text.matches("approval_decision").count(),
        2,
        "rita's two decisions: {text}"
    );
    photograph(&browser, "audit").await;
    browser.close().await.unwrap();
    agent.cancel().await.unwrap();
    olga_agent.cancel().await.unwrap();
}

/// Signs in at the provider's page as `login` (any password: the test
/// provider's development page) after pressing the console's button.
async fn sign_in_at_provider(browser: &Client, base: &str, login: &str) {
    browser
        .goto(&format!("{base}/console/login"))
        .await
        .unwrap();
    click(
        browser,
        Locator::Css("a.button[href='/console/oidc/start']"),
    )
    .await;
    let field = browser
        .wait()
        .for_element(Locator::Css("input[name=login]"))
        .await
        .unwrap();
    field.send_keys(login).await.unwrap();
    browser
        .find(Locator::Css("input[name=password]"))
        .await
        .unwrap()
        .send_keys("any password")
        .await
        .unwrap();
    click(browser, Locator::Css("button[type=submit]")).await;
}

async fn main_text(browser: &Client) -> String {
    browser
        .find(Locator::Css("body"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn people_sign_in_through_the_openid_provider_with_the_role_their_groups_give() {
    let Some(packages) = oidc_packages() else {
        return;
    };
    let Some(driver) = Driver::start().await else {
        eprintln!("SKIPPED: no chromium and chromedriver, and scripts/install-browser.sh could not install them");
        return;
    };
    let provider = TempOidcProvider::start_with_people(
        &packages,
        &[OidcClient::new("airlock-console", "console-secret")
            .with_redirect("http://127.0.0.1/console/oidc/callback")],
        &[
            OidcPerson::new("rita", Some("rita@example.test"), &["ops-leads"]),
            OidcPerson::new("bob", None, &["ops"]),
            OidcPerson::new("eve", None, &["marketing"]),
        ],
    )
    .unwrap();
    let secrets = tempfile::tempdir().unwrap();
    let secret_file = secrets.path().join("console-secret");
    std::fs::write(&secret_file, "console-secret\n").unwrap();
    // The server's address goes into its redirect URI before it starts.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let toml = format!(
        "\n[console]\napprovers = []\n\n[console.oidc]\nissuer = \"{}\"\nclient_id = \"airlock-console\"\n\
         client_secret_file = \"{}\"\nredirect_uri = \"http://127.0.0.1:{port}/console/oidc/callback\"\n\
         scopes = [\"email\", \"groups\"]\nalgorithms = [\"ES256\"]\n\
         approver_groups = [\"ops-leads\"]\nauditor_groups = [\"ops\"]\n",
        provider.issuer(),
        secret_file.display()
    );
    let (_sim, server, enrolled, audit) = serve_enrolled_on(
        &format!("127.0.0.1:{port}"),
        Duration::ZERO,
        &toml,
        &[],
        &["alice"],
        &[],
    )
    .await;
    let base = server.base();
    let agent = server.connect(&enrolled.agents["alice"]).await;
    let planned = call(&agent, "execute", json!({"script": PLAN, "mode": "plan"})).await;
    let plan = planned.structured_content.unwrap()["plan"]["id"]
        .as_str()
        .expect("a plan filed")
        .to_string();

    let browser = driver.browser().await;
    browser
        .goto(&format!("{base}/console/login"))
        .await
        .unwrap();
    photograph(&browser, "sign-in-provider").await;
    // rita, in ops-leads, signs in at the provider and lands on the list.
    sign_in_at_provider(&browser, &base, "rita").await;
    let who = browser
        .wait()
        .for_element(Locator::Css("header .who"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(who, "sso:rita · approver");
    let after = decide(&browser, &plan, "window agreed in #ops", "approve", None).await;
    assert!(
        after.contains("approved") && after.contains("sso:rita"),
        "{after}"
    );
    let applied = call(&agent, "execute", json!({"script": PLAN, "plan": plan})).await;
    assert_eq!(applied.structured_content.unwrap()["result"], "stopped");
    sign_out(&browser).await;

    // bob, in ops, reads but is offered no decision.
    let single = call(
        &agent,
        "execute",
        json!({"script": "await tools.vm_start({node: 'pve1', vmid: 103})"}),
    )
    .await;
    let asked = single.structured_content.unwrap()["waiting"][0]["request_id"]
        .as_str()
        .unwrap()
        .to_string();
    // The provider remembers rita's sign-in: bob signs in afresh.
    browser.delete_all_cookies().await.unwrap();
    sign_in_at_provider(&browser, &base, "bob").await;
    let who = browser
        .wait()
        .for_element(Locator::Css("header .who"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(who, "sso:bob · auditor");
    browser
        .goto(&format!("{base}/console/requests/{asked}"))
        .await
        .unwrap();
    let text = main_text(&browser).await;
    assert!(text.contains(&asked) && text.contains("pending"), "{text}");
    for button in ["approve", "deny"] {
        assert!(
            browser
                .find_all(Locator::Css(&format!("button[value={button}]")))
                .await
                .unwrap()
                .is_empty(),
            "no {button} for an auditor"
        );
    }
    // bob forges the approve: from a page of no origin the browser keeps
    // the Strict cookie back and says cross-site; from the console's own
    // page, without the session's token. Neither decides.
    let forge = r#"const f = document.createElement('form');
        f.method = 'post'; f.action = arguments[0];
        const d = document.createElement('input'); d.name = 'decision'; d.value = 'approve';
        f.appendChild(d); document.body.appendChild(f); f.submit();"#;
    let endpoint = format!("{base}/console/requests/{asked}/decide");
    for from in ["about:blank".to_string(), format!("{base}/console")] {
        browser.goto(&from).await.unwrap();
        browser.execute(forge, vec![json!(endpoint)]).await.unwrap();
        let text = browser
            .wait()
            .for_element(Locator::Css("p.error"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(
            text.contains("Sign in first")
                || text.contains("did not come from this console's page"),
            "from {from}: {text}"
        );
    }
    browser
        .goto(&format!("{base}/console/requests/{asked}"))
        .await
        .unwrap();
    let text = main_text(&browser).await;
    assert!(text.contains("pending"), "still pending: {text}");

    // eve's groups give no role: she is told, and holds no sign-in.
    browser.delete_all_cookies().await.unwrap();
    sign_in_at_provider(&browser, &base, "eve").await;
    browser
        .wait()
        .for_element(Locator::Css("p.error"))
        .await
        .unwrap();
    let text = main_text(&browser).await;
    assert!(
        text.contains("sso:eve has no role in the console"),
        "{text}"
    );
    browser.goto(&format!("{base}/console")).await.unwrap();
    browser
        .wait()
        .for_element(Locator::Css("input#key"))
        .await
        .unwrap();
    browser.close().await.unwrap();
    agent.cancel().await.unwrap();

    // The decision's audit line names the provider's identity.
    let lines = std::fs::read_to_string(&audit).unwrap();
    assert!(
        lines.contains("\"sso:rita\"") && lines.contains("window agreed in #ops"),
        "{lines}"
    );
    assert!(
        !lines.contains("console-secret"),
        "the client secret is in no audit line"
    );
}

/// A port that was free a moment ago (as chromedriver's): the address
/// must be written into configurations before the process binds it.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Two replicas sharing PostgreSQL behind nginx, which spreads the
/// browser's requests over both (round robin): a person signs in through
/// the provider (the sign-in starting on one replica and finishing on
/// whichever the callback reaches), approves a plan an agent filed on
/// replica A, and the agent applies it on replica B, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_behind_nginx_serve_one_console() {
    let Some(packages) = oidc_packages() else {
        return;
    };
    let Some(driver) = Driver::start().await else {
        eprintln!("SKIPPED: no chromium and chromedriver, and scripts/install-browser.sh could not install them");
        return;
    };
    let provider = TempOidcProvider::start_with_people(
        &packages,
        &[OidcClient::new("airlock-console", "console-secret")
            .with_redirect("http://127.0.0.1/console/oidc/callback")],
        &[OidcPerson::new("rita", None, &["ops-leads"])],
    )
    .unwrap();
    let pg = TempPostgres::start().unwrap();
    let url = pg.create_database("airlock").unwrap();
    let (_sim, sim_config) = airlock::demo::start(Duration::ZERO, 0).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let proxmox =
        airlock::demo::proxmox_section(&_sim, &sim_config, &dir.path().join("tokens")).unwrap();
    let secret_file = dir.path().join("console-secret");
    std::fs::write(&secret_file, "console-secret\n").unwrap();

    // nginx first, on the replicas' ports-to-be: its address is the
    // console's redirect URI, written before the replicas start.
    let ports = [free_port(), free_port()];
    let upstreams: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let nginx = TempNginx::start(&upstreams, "", "").unwrap();
    let front = nginx.url("");
    let mut toml = airlock::demo::config_toml(&proxmox, &dir.path().join("unused-state"));
    toml.push_str(&format!(
        "\n[state]\nbackend = \"postgres\"\nurl = {url:?}\npassword_file = {:?}\n\
         \n[console]\n\n[console.oidc]\nissuer = \"{}\"\nclient_id = \"airlock-console\"\n\
         client_secret_file = {:?}\nredirect_uri = \"{front}/console/oidc/callback\"\n\
         algorithms = [\"ES256\"]\nscopes = [\"groups\"]\napprover_groups = [\"ops-leads\"]\n",
        pg.password_file().display().to_string(),
        provider.issuer(),
        secret_file.display().to_string(),
    ));
    let config = dir.path().join("airlock.toml");
    std::fs::write(&config, toml).unwrap();
    let enrolled = std::process::Command::new(env!("CARGO_BIN_EXE_airlock"))
        .arg("--config")
        .arg(&config)
        .args(["enroll", "alice"])
        .output()
        .unwrap();
    assert!(enrolled.status.success(), "{enrolled:?}");
    let alice = String::from_utf8(enrolled.stdout)
        .unwrap()
        .trim()
        .to_string();
    let replica = |port: u16| {
        let args: Vec<std::ffi::OsString> = vec![
            "--config".into(),
            config.clone().into(),
            "serve".into(),
            "--http".into(),
            format!("127.0.0.1:{port}").into(),
        ];
        Server::spawn(tempfile::tempdir().unwrap(), &args)
    };
    let (a, b) = tokio::task::block_in_place(|| (replica(ports[0]), replica(ports[1])));

    let on_a = a.connect(&alice).await;
    let planned = call(&on_a, "execute", json!({"script": PLAN, "mode": "plan"})).await;
    let plan = planned.structured_content.unwrap()["plan"]["id"]
        .as_str()
        .expect("a plan filed")
        .to_string();

    let browser = driver.browser().await;
    sign_in_at_provider(&browser, &front, "rita").await;
    let who = browser
        .wait()
        .for_element(Locator::Css("header .who"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(who, "sso:rita · approver");
    let after = decide(&browser, &plan, "through nginx", "approve", None).await;
    assert!(after.contains("approved"), "{after}");
    browser.close().await.unwrap();

    let on_b = b.connect(&alice).await;
    let applied = call(&on_b, "execute", json!({"script": PLAN, "plan": plan})).await;
    assert_eq!(applied.structured_content.unwrap()["result"], "stopped");
    let again = call(&on_a, "execute", json!({"script": PLAN, "plan": plan})).await;
    let again = again.structured_content.unwrap();
    assert!(
        again["error"].is_object(),
        "a plan is applied once: {again}"
    );

    // Both replicas served the console.
    let log = nginx.access_log();
    for up in &upstreams {
        assert!(
            log.lines()
                .any(|l| l.contains("/console") && l.contains(&format!("upstream={up} "))),
            "no console request reached {up}:\n{log}"
        );
    }
    on_a.cancel().await.unwrap();
    on_b.cancel().await.unwrap();
}
