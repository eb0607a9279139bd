//! What validation and the gateway allocate for a large argument, counted
//! exactly: a global allocator that adds up, per thread, every byte
//! allocated. The problems of a megabyte argument used to copy and
//! serialise it whole, once per problem (70–190× its size held by the
//! host for each); now a problem is made of labels, whatever the size of
//! the value. A call through the gateway hashes its arguments as their
//! canonical JSON is written, and hands them back with a refusal made
//! before the backend instead of its caller keeping a copy.

use std::{
    alloc::{GlobalAlloc, Layout, System},
    cell::Cell,
};

use std::sync::Arc;

use airlock_catalog::{
    spec::{Hints, Tier, ToolSpec},
    validate::ArgsValidator,
};
use airlock_gateway::{
    backend::{Backend, BackendError, Reply},
    CallError, Caller, Gateway, GatewayConfig, Mode, Refused,
};
use airlock_state::Place;
use async_trait::async_trait;
use serde_json::{json, Map, Value};

struct Counting;

thread_local! {
    /// Bytes allocated (and grown by reallocation) on this thread.
    static ALLOCATED: Cell<u64> = const { Cell::new(0) };
}

fn count(bytes: usize) {
    let _ = ALLOCATED.try_with(|a| a.set(a.get() + bytes as u64));
}

// SAFETY: every call is passed to the system allocator unchanged; the
// counter is a const-initialised thread-local without a destructor, so
// touching it never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size.saturating_sub(layout.size()));
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn allocated() -> u64 {
    ALLOCATED.with(Cell::get)
}

fn spec(schema: Value) -> ToolSpec {
    ToolSpec {
        name: "t".into(),
        summary: String::new(),
        description: String::new(),
        input_schema: schema,
        output_schema: None,
        tier: Tier::Read,
        hints: Hints::default(),
        backend: "test".into(),
        path_params: vec![],
        endpoint: None,
        keywords: String::new(),
        key: String::new(),
        aliases: Vec::new(),
    }
}

#[test]
fn problems_with_a_megabyte_argument_allocate_kilobytes() {
    // `data`: 1 MiB of small entries, missing 20 required keys (20
    // problems, each about the whole of `data`); `name`: a 1 MiB string
    // breaking 3 rules.
    let all_of: Vec<Value> = (0..20)
        .map(|i| json!({"required": [format!("missing_{i}")]}))
        .collect();
    let validator = ArgsValidator::new(&spec(json!({
        "type": "object",
        "properties": {
            "data": {"type": "object", "allOf": all_of},
            "name": {"type": "string", "maxLength": 8, "pattern": "^[a-z]+$", "enum": ["a", "b"]}
        }
    })))
    .unwrap();
    let data: Map<String, Value> = (0..100_000)
        .map(|i| (format!("k{i:06}"), json!(i)))
        .collect();
    let data = Value::Object(data);
    let data_bytes = data.to_string().len();
    assert!(data_bytes > 1 << 20, "{data_bytes}");

    let args = json!({"data": data});
    let before = allocated();
    let problems = validator.problems(&args);
    let used = allocated() - before;
    eprintln!(
        "{} problems about a {data_bytes} B object: {used} B allocated",
        problems.len()
    );
    assert_eq!(problems.len(), 20, "{problems:?}");
    for p in &problems {
        assert!(p.starts_with("args.data: \"missing_"), "{p}");
        assert!(p.len() < 200, "{p}");
    }
    assert!(
        used < 64 << 10,
        "{used} B allocated to describe 20 problems of a {data_bytes} B argument"
    );

    let name = "X".repeat(1 << 20);
    let args = json!({"name": name});
    let before = allocated();
    let problems = validator.problems(&args);
    let used = allocated() - before;
    eprintln!(
        "{} problems about a 1 MiB string: {used} B allocated",
        problems.len()
    );
    assert_eq!(problems.len(), 3, "{problems:?}");
    for p in &problems {
        assert!(p.starts_with("args.name: \"XXX") && p.len() < 400, "{p}");
        assert!(p.contains("…\" (1048576 characters)"), "{p}");
    }
    assert!(
        used < 64 << 10,
        "{used} B allocated to describe 3 problems of a 1 MiB string"
    );
}

/// Answers every call with the number of its arguments' keys.
struct Keys;

#[async_trait]
impl Backend for Keys {
    fn id(&self) -> &str {
        "keys"
    }

    fn tools(&self) -> Vec<ToolSpec> {
        let mut read = spec(json!({"type": "object", "properties": {"node": {"type": "string"}}}));
        read.name = "read_keys".into();
        read.backend = "keys".into();
        let mut operate = read.clone();
        operate.name = "op_keys".into();
        operate.tier = Tier::Operate;
        vec![read, operate]
    }

    async fn call(&self, _: &Caller, _: &ToolSpec, args: Value) -> Result<Reply, BackendError> {
        Ok(Reply::new(json!(args.as_object().map_or(0, Map::len))))
    }
}

#[test]
fn a_call_through_the_gateway_does_not_copy_its_arguments() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = GatewayConfig::default();
    config.policy.identities.insert(
        "alice".into(),
        airlock_gateway::policy::Grant {
            mode: Mode::Rw,
            ..Default::default()
        },
    );
    config.approval.tiers = vec![Tier::Operate];
    let (gateway, _) = Gateway::new(
        config,
        vec![Arc::new(Keys) as Arc<dyn Backend>],
        &Place::in_dir(dir.path()),
    )
    .unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let alice = Caller::new("alice");

    let mut args: Map<String, Value> = (0..100_000)
        .map(|i| (format!("k{i:06}"), json!(i)))
        .collect();
    args.insert("node".into(), json!("pve1"));
    let args = Value::Object(args);
    let args_bytes = args.to_string().len();
    let before = allocated();
    let r = runtime.block_on(gateway.call(&alice, "read_keys", args));
    let used = allocated() - before;
    eprintln!("an allowed call with {args_bytes} B of arguments: {used} B allocated");
    assert_eq!(r.unwrap().value, 100_001);
    // What remains is the list of keys sorted for the hash (8 bytes a
    // key) and the audit lines: the arguments are neither copied nor
    // written out whole (6.8 MB were allocated for this call before).
    assert!(
        (used as usize) < args_bytes,
        "{used} B allocated for a call with {args_bytes} B of arguments"
    );

    // A call that needs approval gets its arguments back with the
    // refusal, for the client to run it again once approved.
    let small = json!({"node": "pve1", "vmid": 101});
    match runtime.block_on(gateway.call_keeping_args(&alice, "op_keys", small.clone())) {
        Err(Refused {
            error: CallError::ApprovalRequired { .. },
            args,
        }) => assert_eq!(args, Some(small)),
        other => panic!("{other:?}"),
    }
    // After the backend ran there is nothing to hand back.
    let r = runtime.block_on(gateway.call_keeping_args(&alice, "read_keys", json!({"node": "x"})));
    assert!(r.is_ok());
}
