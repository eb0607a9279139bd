//! The simulated cluster against the real Proxmox VE 9.1 API schema
//! (../shared/pve-apidata.json, kept outside the repo; the test is skipped
//! with a notice when it is absent). The simulator is asked over HTTPS, as
//! any PVE client asks, about every operation of the real API:
//!
//! - every operation it serves (anything but 501) answers a call that has
//!   the required parameters, and the data's fields and types fit the
//!   operation's `returns` schema;
//! - leaving out any required parameter gets PVE's 400 naming it;
//! - every operation of the curated catalog, and the ones real clients were
//!   seen to need, is served.
//!
//! Where a real cluster returns fields its schema does not declare, the
//! table [`UNDECLARED`] says which and why; nothing else may differ.

mod common;
use common::schema_file;

use std::{collections::BTreeSet, time::Duration};

use airlock_edge::tls::{client_config, parse_fingerprint, Trust};
use airlock_proxmox::{
    apidata::{self, Method, Operation},
    curated,
    tiers::TierRules,
};
use airlock_sim::{Role, SimConfig, Simulator};
use serde_json::Value;

/// Fields a real cluster returns that the schema leaves out: (operation
/// path, field, why it is there).
const UNDECLARED: &[(&str, &[&str], &str)] = &[
    (
        "/nodes",
        &["id", "type"],
        "node rows are built as /cluster/resources rows are (`node/NAME`, `node`)",
    ),
    (
        "/nodes/{node}/qemu/{vmid}/snapshot",
        &["running"],
        "the `current` entry says whether the VM runs",
    ),
    (
        "/nodes/{node}/lxc/{vmid}/snapshot",
        &["running"],
        "the `current` entry says whether the container runs",
    ),
    (
        "/nodes/{node}/storage/{storage}/content",
        &["content"],
        "each volume's content type (images, rootdir, backup, iso, vztmpl)",
    ),
    (
        "/nodes/{node}/disks/list",
        &["type", "wearout"],
        "the disk kind (ssd, hdd, nvme) and SSD wear, as the node's disk panel shows them",
    ),
    (
        "/cluster/tasks",
        &[
            "node",
            "pid",
            "pstart",
            "starttime",
            "type",
            "id",
            "user",
            "status",
            "endtime",
        ],
        "a task row carries its UPID's parts and its end, as /nodes/{node}/tasks rows declare",
    ),
    (
        "/cluster/ha/rules",
        &[
            "type",
            "resources",
            "nodes",
            "strict",
            "affinity",
            "comment",
            "disable",
            "digest",
        ],
        "a rule row carries the rule's configuration",
    ),
];

/// Operations whose answer's type differs from the schema on a real
/// cluster: (path, why).
const RETYPED: &[(&str, &str)] = &[(
    "/cluster/nextid",
    "PVE answers the id as a JSON string (`\"100\"`), though the schema says integer",
)];

/// Operations real clients were seen to call (ProxmoxMCP-Plus 0.6.7) that
/// the curated catalog does not use.
const SEEN_IN_CLIENTS: &[(Method, &str)] = &[
    (Method::Put, "/nodes/{node}/qemu/{vmid}/config"),
    (Method::Get, "/cluster/config/join"),
    (Method::Get, "/nodes/{node}/firewall/log"),
    (Method::Get, "/nodes/{node}/qemu/{vmid}/firewall/log"),
];

struct Api {
    http: reqwest::Client,
    base: String,
    auth: String,
}

impl Api {
    async fn start() -> (Simulator, Api) {
        let config = SimConfig::with_default_tokens(Duration::from_millis(1));
        let sim = Simulator::start(&config).await.unwrap();
        let pin = parse_fingerprint(sim.fingerprint()).unwrap();
        let http = reqwest::Client::builder()
            .tls_backend_preconfigured(client_config(&Trust::Pin(pin)).unwrap())
            .no_proxy()
            .timeout(Duration::from_secs(20))
            .build()
            .unwrap();
        let api = Api {
            http,
            base: format!("{}/api2/json", sim.url()),
            auth: format!("PVEAPIToken={}", config.token(Role::Admin).unwrap().line()),
        };
        (sim, api)
    }

    /// Query string for GET and DELETE, form body for POST and PUT, as
    /// proxmoxer and the web UI send them.
    async fn call(&self, m: Method, path: &str, params: &[(String, String)]) -> (u16, Value) {
        let url = format!("{}{path}", self.base);
        let req = match m {
            Method::Get => self.http.get(url).query(params),
            Method::Delete => self.http.delete(url).query(params),
            Method::Post => self.http.post(url).form(params),
            Method::Put => self.http.put(url).form(params),
        };
        let res = req
            .header(reqwest::header::AUTHORIZATION, &self.auth)
            .send()
            .await
            .unwrap();
        let status = res.status().as_u16();
        let text = res.text().await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }
}

impl Api {
    /// Waits for a task (by its UPID) to end, asking as clients do.
    async fn wait(&self, upid: &Value) {
        let upid = upid.as_str().expect("a task's UPID");
        let node = upid.split(':').nth(1).unwrap();
        let path = format!(
            "/nodes/{node}/tasks/{}/status",
            percent_encoding::utf8_percent_encode(upid, percent_encoding::NON_ALPHANUMERIC)
        );
        loop {
            let (status, body) = self.call(Method::Get, &path, &[]).await;
            assert_eq!(status, 200, "{body}");
            if body["data"]["status"] == "stopped" {
                return;
            }
            tokio::task::yield_now().await;
        }
    }
}

fn ops() -> Option<Vec<Operation>> {
    let path = schema_file()?;
    Some(apidata::parse_text(&std::fs::read_to_string(path).unwrap()).unwrap())
}

/// The child key an index operation's `links` name (`{vmid}` → `vmid`).
fn link_key(op: &Operation) -> Option<String> {
    let href = op.returns["links"][0]["href"].as_str()?;
    Some(href.trim_matches(|c| c == '{' || c == '}').to_string())
}

fn as_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// Fills the path's placeholders the way a client finds them: `{node}` is
/// the first node; every other one is the first item the listing one level
/// up names (by the listing's own `links` key). A listing with nothing in
/// it leaves the operation unchecked, with the reason.
async fn fill(api: &Api, ops: &[Operation], op: &Operation) -> Result<String, String> {
    let mut built = String::new();
    let mut template = String::new();
    let prefer_stopped = (op.method == Method::Delete && op.path.ends_with("{vmid}"))
        || op.path.ends_with("/template")
        || (op.method == Method::Post && op.path.ends_with("/migrate"));
    for seg in op.path.trim_start_matches('/').split('/') {
        let Some(name) = seg.strip_prefix('{').and_then(|s| s.strip_suffix('}')) else {
            built.push('/');
            built.push_str(seg);
            template.push('/');
            template.push_str(seg);
            continue;
        };
        let value = if name == "node" {
            "pve1".to_string()
        } else {
            let (status, body) = api.call(Method::Get, &built, &[]).await;
            if status != 200 {
                return Err(format!("listing {built} answered {status}"));
            }
            let key = ops
                .iter()
                .find(|o| o.method == Method::Get && o.path == template)
                .and_then(link_key)
                .unwrap_or_else(|| name.to_string());
            let items = body["data"].as_array().cloned().unwrap_or_default();
            let named = |stopped: bool| {
                items
                    .iter()
                    .filter(|i| !(name == "snapname" && i[&key] == "current"))
                    .filter(|i| !stopped || i["status"] == "stopped")
                    .find_map(|i| as_text(&i[&key]))
            };
            match (named(prefer_stopped), named(false)) {
                (Some(v), _) => v,
                // Nothing stopped: stop the first, as a client would.
                (None, Some(v)) => {
                    let (status, body) = api
                        .call(Method::Post, &format!("{built}/{v}/status/stop"), &[])
                        .await;
                    if status != 200 {
                        return Err(format!("stopping {built}/{v} answered {status}"));
                    }
                    api.wait(&body["data"]).await;
                    v
                }
                (None, None) => return Err(format!("{built} lists no `{key}` to ask about")),
            }
        };
        built.push('/');
        built.push_str(
            &percent_encoding::utf8_percent_encode(&value, percent_encoding::NON_ALPHANUMERIC)
                .to_string(),
        );
        template.push('/');
        template.push_str(seg);
    }
    Ok(built)
}

/// Parameters an operation needs although the schema marks none of them
/// required (PVE checks that one of several is given).
const ONE_OF: &[(&str, &str, &str)] = &[("/nodes/{node}/vzdump", "all", "1")];

/// A value for a required parameter that a real cluster would accept in
/// this state of the simulated one.
async fn sample(api: &Api, op: &Operation, name: &str) -> Option<String> {
    let lxc = op.path.contains("/lxc");
    let volumes = |content: &'static str| async move {
        let (_, body) = api
            .call(
                Method::Get,
                "/nodes/pve1/storage/local/content",
                &[("content".into(), content.into())],
            )
            .await;
        body["data"][0]["volid"].as_str().map(str::to_string)
    };
    Some(match name {
        "vmid" => "900".into(),
        "newid" => "901".into(),
        "target" => "pve2".into(),
        "disk" if lxc => "rootfs".into(),
        "disk" => "scsi0".into(),
        "size" => "+1G".into(),
        "snapname" => "conformance".into(),
        "ostemplate" => volumes("vztmpl").await?,
        "volume" if op.path.ends_with("/move_volume") => "rootfs".into(),
        "volume" => volumes("backup").await?,
        "content" => "iso".into(),
        "filename" => "conformance.iso".into(),
        "url" => "https://images.example/conformance.iso".into(),
        "feature" => "snapshot".into(),
        _ => {
            let schema = &op.parameters["properties"][name];
            return as_text(&schema["enum"][0]).or_else(|| as_text(&schema["default"]));
        }
    })
}

fn required(op: &Operation) -> Vec<String> {
    let path_params = op.path_params();
    op.parameters["properties"]
        .as_object()
        .map(|props| {
            props
                .iter()
                .filter(|(k, p)| {
                    !path_params.contains(k) && p["optional"].as_u64().is_none_or(|o| o != 1)
                })
                .map(|(k, _)| k.clone())
                .collect()
        })
        .unwrap_or_default()
}

/// Checks `v` against a schema in PVE's dialect: types (a boolean may be
/// 0 or 1, as PVE sends them), enums, required and declared fields,
/// indexed families (`net[n]` declares `net0`, `net1`, …) and items.
struct Checker<'a> {
    path: &'a str,
    problems: Vec<String>,
}

impl Checker<'_> {
    fn check(&mut self, v: &Value, s: &Value, at: &str, index_key: Option<&str>) {
        let types: Vec<&str> = match &s["type"] {
            Value::String(t) => vec![t.as_str()],
            Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
            _ => vec!["any"],
        };
        let fits = types.iter().any(|t| match *t {
            "any" => true,
            "null" => v.is_null(),
            "string" => v.is_string(),
            "integer" => v.is_i64() || v.is_u64(),
            "number" => v.is_number(),
            "boolean" => v.is_boolean() || v.as_u64().is_some_and(|n| n <= 1),
            "object" => v.is_object(),
            "array" => v.is_array(),
            _ => false,
        });
        if !fits {
            if !RETYPED.iter().any(|(p, _)| *p == self.path) || at != "data" {
                let shown: String = v.to_string().chars().take(60).collect();
                self.problems
                    .push(format!("{at}: {shown} is not {}", types.join(" or ")));
            }
            return;
        }
        if let (Some(allowed), Some(text)) = (s["enum"].as_array(), v.as_str()) {
            if !allowed.iter().any(|a| a == text) {
                self.problems
                    .push(format!("{at}: {text:?} is not one of {allowed:?}"));
            }
        }
        if let (Value::Object(fields), Some(props)) = (v, s["properties"].as_object()) {
            // An index declares only the key it links by; its items carry
            // the configuration of what they list, undeclared.
            let index = index_key.is_some_and(|k| props.keys().all(|p| p == k));
            for (name, value) in fields {
                let declared = props.get(name).or_else(|| {
                    let family = name.trim_end_matches(|c: char| c.is_ascii_digit());
                    (family.len() < name.len())
                        .then(|| props.get(&format!("{family}[n]")))
                        .flatten()
                });
                match declared {
                    Some(d) => self.check(value, d, &format!("{at}.{name}"), None),
                    None if s["additionalProperties"].is_object() => self.check(
                        value,
                        &s["additionalProperties"],
                        &format!("{at}.{name}"),
                        None,
                    ),
                    None if props.is_empty()
                        || index
                        || s["additionalProperties"] == 1
                        || s["additionalProperties"] == true => {}
                    None if UNDECLARED
                        .iter()
                        .any(|(p, f, _)| *p == self.path && f.contains(&name.as_str())) => {}
                    None => self
                        .problems
                        .push(format!("{at}: field `{name}` is not in the schema")),
                }
            }
            for (name, p) in props {
                let optional = p["optional"].as_u64().is_some_and(|o| o == 1);
                if !optional && !name.ends_with("[n]") && !fields.contains_key(name) {
                    self.problems.push(format!("{at}: lacks `{name}`"));
                }
            }
        }
        if let (Value::Array(items), Some(schema)) = (v, s.get("items")) {
            for item in items.iter().take(100) {
                self.check(item, schema, &format!("{at}[]"), index_key);
            }
        }
    }
}

fn report(problems: &mut Vec<String>, op: &Operation, found: Vec<String>) {
    let mut seen = BTreeSet::new();
    for p in found {
        if seen.insert(p.clone()) {
            problems.push(format!("{} {}: {p}", op.method, op.path));
        }
    }
}

/// What one operation's calls show, on a simulator of its own for changes.
async fn conform(
    api: &Api,
    ops: &[Operation],
    op: &Operation,
    problems: &mut Vec<String>,
) -> Result<bool, String> {
    let path = match fill(api, ops, op).await {
        Ok(path) => path,
        Err(why) => {
            // Nothing to ask about: served at all? A made-up name tells.
            let made_up = op
                .path
                .split('/')
                .map(|s| {
                    if s.starts_with('{') && s != "{node}" {
                        "conformance"
                    } else if s == "{node}" {
                        "pve1"
                    } else {
                        s
                    }
                })
                .collect::<Vec<_>>()
                .join("/");
            let (status, _) = api.call(op.method, &made_up, &[]).await;
            return if status == 501 { Ok(false) } else { Err(why) };
        }
    };
    let (status, _) = api.call(op.method, &path, &[]).await;
    if status == 501 {
        return Ok(false);
    }
    let mut params = Vec::new();
    let extra: Vec<(String, String)> = ONE_OF
        .iter()
        .filter(|(p, _, _)| *p == op.path)
        .map(|(_, k, v)| (k.to_string(), v.to_string()))
        .collect();
    for name in required(op) {
        match sample(api, op, &name).await {
            Some(v) => params.push((name, v)),
            None => return Err(format!("no sample value for the required `{name}`")),
        }
    }
    let mut found = Vec::new();
    for (i, (name, _)) in params.iter().enumerate() {
        let mut without = params.clone();
        without.remove(i);
        without.extend(extra.iter().cloned());
        let (status, body) = api.call(op.method, &path, &without).await;
        if status != 400 || body["errors"][name].is_null() {
            found.push(format!(
                "without the required `{name}`: {status} {}",
                body.to_string().chars().take(120).collect::<String>()
            ));
        }
    }
    let mut all = params.clone();
    all.extend(extra);
    let (status, body) = api.call(op.method, &path, &all).await;
    if status != 200 {
        found.push(format!(
            "the call with the required parameters answered {status}: {}",
            body.to_string().chars().take(160).collect::<String>()
        ));
    } else {
        let mut checker = Checker {
            path: &op.path,
            problems: Vec::new(),
        };
        let key = link_key(op);
        checker.check(&body["data"], &op.returns, "data", key.as_deref());
        found.extend(checker.problems);
    }
    report(problems, op, found);
    Ok(true)
}

/// A snapshot besides `current` on a VM and a container, and so finished
/// tasks, for the listings to name.
async fn prepare(api: &Api) {
    for guest in ["qemu/100", "lxc/200"] {
        let (s, body) = api
            .call(
                Method::Post,
                &format!("/nodes/pve1/{guest}/snapshot"),
                &[("snapname".into(), "before-upgrade".into())],
            )
            .await;
        assert_eq!(s, 200, "{body}");
        api.wait(&body["data"]).await;
    }
}

#[tokio::test]
async fn the_simulator_answers_as_the_real_schema_says() {
    let Some(ops) = ops() else { return };
    let _ = rustls::crypto::ring::default_provider().install_default();
    let (_reads_sim, reads) = Api::start().await;
    // A task, and a snapshot besides `current`, for the listings to name.
    prepare(&reads).await;

    let mut served = BTreeSet::new();
    let mut problems = Vec::new();
    let mut unchecked = Vec::new();
    for op in ops.iter().filter(|o| o.method == Method::Get) {
        match conform(&reads, &ops, op, &mut problems).await {
            Ok(true) => {
                served.insert((op.method, op.path.clone()));
            }
            Ok(false) => {}
            Err(why) => unchecked.push(format!("{} {}: {why}", op.method, op.path)),
        }
    }
    // Changes: each on a fresh cluster, so one cannot spoil the next.
    for op in ops.iter().filter(|o| o.method != Method::Get) {
        let (_sim, api) = Api::start().await;
        prepare(&api).await;
        match conform(&api, &ops, op, &mut problems).await {
            Ok(true) => {
                served.insert((op.method, op.path.clone()));
            }
            Ok(false) => {}
            Err(why) => unchecked.push(format!("{} {}: {why}", op.method, op.path)),
        }
    }

    let tools = curated::tools(&TierRules::defaults(), &Default::default(), "pve");
    let mut needed: Vec<(Method, String)> = tools
        .iter()
        .filter(|(spec, _)| spec.tier != airlock_catalog::Tier::Forbidden)
        .map(|(_, r)| (r.method, r.path.clone()))
        .collect();
    needed.extend(SEEN_IN_CLIENTS.iter().map(|(m, p)| (*m, p.to_string())));
    for (m, p) in needed {
        if !served.contains(&(m, p.clone())) {
            problems.push(format!("{m} {p}: not served (or not checked), but needed"));
        }
    }
    eprintln!(
        "{} of {} operations served and checked",
        served.len(),
        ops.len()
    );
    problems.extend(
        unchecked
            .into_iter()
            .map(|u| format!("served, unchecked: {u}")),
    );
    assert!(
        problems.is_empty(),
        "{} problems:\n{}",
        problems.len(),
        problems.join("\n")
    );
    assert!(served.len() >= 120, "{} served", served.len());
}

/// The checker itself must catch what it is for.
#[test]
fn the_checker_catches_wrong_types_missing_and_unknown_fields() {
    let schema = serde_json::json!({"type": "array", "items": {"type": "object", "properties": {
        "vmid": {"type": "integer"}, "maxcpu": {"type": "number", "optional": 1},
        "running": {"type": "boolean", "optional": 1}, "net[n]": {"type": "string", "optional": 1}}}});
    let mut c = Checker {
        path: "/x",
        problems: Vec::new(),
    };
    c.check(
        &serde_json::json!([{"vmid": 1, "running": 1, "net0": "virtio"}]),
        &schema,
        "data",
        None,
    );
    assert!(c.problems.is_empty(), "{:?}", c.problems);
    c.check(
        &serde_json::json!([{"vmid": "1", "cpus": 2, "running": 2}, {"maxcpu": 1}]),
        &schema,
        "data",
        None,
    );
    assert_eq!(
        c.problems,
        [
            "data[].vmid: \"1\" is not integer",
            "data[]: field `cpus` is not in the schema",
            "data[].running: 2 is not boolean",
            "data[]: lacks `vmid`",
        ]
    );
}
