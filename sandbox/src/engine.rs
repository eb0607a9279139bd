//! Building the wasmtime engine once and getting the compiled guest into it
//! without compiling on the request path.
//!
//! First start on a machine: pre-initialise the guest with wizer (run its
//! `wizer-initialize`, which builds a JS realm, and write the resulting
//! memory back into the module as data), compile the result with Cranelift,
//! and cache the compiled code on disk. Every later start maps the cached
//! file (milliseconds). A fresh instance then starts from memory that
//! already holds a ready realm, copy-on-write.

use std::{
    path::{Path, PathBuf},
    time::Instant,
};

use airlock_guest_sdk::abi::{ABI_VERSION, EXPORT_ABI_VERSION, EXPORT_INITIALIZE, EXPORT_MEMORY};
use wasmtime::{
    Config, Enabled, Engine, InstanceAllocationStrategy, InstancePre, Linker, Module, OptLevel,
    PoolingAllocationConfig, Store,
};
use wasmtime_wizer::{InstanceState, SnapshotVal, Wizer};

use crate::{cache, imports, store::StoreData, SandboxError};

/// The guest as built by `build.rs`.
pub const GUEST_WASM: &[u8] = include_bytes!(env!("AIRLOCK_GUEST_PATH"));
pub const GUEST_SHA256: &str = env!("AIRLOCK_GUEST_SHA256");

/// Largest linear memory a slot can hold: all a 32-bit guest can address,
/// so any `memory_bytes` limit fits and bounds checks compile away.
const SLOT_MEMORY: usize = 4 << 30;
/// Native stack for guest code; JS recursion stops far earlier (boa's own
/// recursion limit), this only catches runaway Rust recursion in the engine.
pub const MAX_WASM_STACK: usize = 2 << 20;
/// Memory kept mapped between uses of a slot and reset in place instead of
/// being unmapped, so a fresh instance does not page-fault on the pages a
/// typical script touches. With PAGEMAP_SCAN (Linux 6.7+) only dirty pages
/// are restored. Measured on 2 cores, fresh `1+1` p50: 180 µs with 0,
/// 45 µs with 4 MiB, 41 µs with 16 MiB; 74 µs at 16 MiB without
/// PAGEMAP_SCAN.
const KEEP_RESIDENT: usize = 16 << 20;

/// How the engine is built; part of the cache key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EngineOptions {
    pub fuel_metering: bool,
    pub snapshot: bool,
    pub cache_dir: PathBuf,
    /// Instance slots the pooling allocator reserves.
    pub slots: u32,
}

pub struct Compiled {
    pub engine: Engine,
    pub pre: InstancePre<StoreData>,
    /// Whether this start compiled (true) or loaded the cache (false).
    pub compiled_now: bool,
}

fn base_config(opts: &EngineOptions) -> Config {
    let mut c = Config::new();
    c.epoch_interruption(true)
        .consume_fuel(opts.fuel_metering)
        .cranelift_opt_level(OptLevel::Speed)
        .max_wasm_stack(MAX_WASM_STACK)
        .async_stack_size(MAX_WASM_STACK + (1 << 20))
        .memory_init_cow(true)
        .parallel_compilation(true);
    c
}

fn pooled_config(opts: &EngineOptions) -> Config {
    let mut c = base_config(opts);
    let mut pool = PoolingAllocationConfig::new();
    pool.total_core_instances(opts.slots)
        .total_memories(opts.slots)
        .total_tables(opts.slots)
        .total_stacks(opts.slots)
        .total_component_instances(0)
        .max_memory_size(SLOT_MEMORY)
        .table_elements(64 * 1024)
        .linear_memory_keep_resident(KEEP_RESIDENT)
        .table_keep_resident(256 * 1024)
        .pagemap_scan(Enabled::Auto);
    c.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    c
}

pub fn linker(engine: &Engine) -> Result<Linker<StoreData>, SandboxError> {
    let mut linker = Linker::new(engine);
    // WASI from the instance's own `GuestSystem`, which grants nothing.
    wasmtime_wasi::p1::add_to_linker_async(&mut linker, |data: &mut StoreData| {
        &mut data.system.ctx
    })
    .map_err(SandboxError::engine)?;
    imports::add_to_linker(&mut linker).map_err(SandboxError::engine)?;
    Ok(linker)
}

pub async fn load(opts: &EngineOptions) -> Result<Compiled, SandboxError> {
    let engine = Engine::new(&pooled_config(opts)).map_err(SandboxError::engine)?;
    let knobs = format!("fuel={};snapshot={}", opts.fuel_metering, opts.snapshot);
    let path = opts
        .cache_dir
        .join(cache::key(GUEST_SHA256, &engine, &knobs));

    cache::prepare_dir(&opts.cache_dir).map_err(|e| SandboxError::cache(&opts.cache_dir, e))?;
    let (module, compiled_now) = match load_cached(&engine, &path) {
        Some(m) => {
            // Modules compiled elsewhere and handed over (the Debian
            // package compiles at each install) are pruned here, by the
            // cache's owner, as a compile here prunes them.
            cache::prune(&opts.cache_dir);
            (m, false)
        }
        None => {
            let _lock = cache::Lock::acquire(&opts.cache_dir)
                .map_err(|e| SandboxError::cache(&opts.cache_dir, e))?;
            // Another process may have compiled it while we waited.
            match load_cached(&engine, &path) {
                Some(m) => (m, false),
                None => (compile_and_store(&engine, opts, &path).await?, true),
            }
        }
    };

    let linker = linker(&engine)?;
    let pre = linker
        .instantiate_pre(&module)
        .map_err(SandboxError::engine)?;
    check_abi(&engine, &pre).await?;
    Ok(Compiled {
        engine,
        pre,
        compiled_now,
    })
}

fn load_cached(engine: &Engine, path: &Path) -> Option<Module> {
    // The module is mapped from the file (shared, paged in on use) once it
    // is known to be the file that was hashed; between the check and the
    // map only this user can replace it: `prepare_dir` checked the
    // directory is theirs alone.
    if !cache::verified(path) {
        return None;
    }
    // SAFETY: the file is this user's own, in a directory no one else can
    // write, and its bytes match the digest recorded when
    // `compile_and_store` wrote it from `Module::serialize` of this same
    // wasmtime build; wasmtime checks the header and version too.
    match unsafe { Module::deserialize_file(engine, path) } {
        Ok(m) => Some(m),
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "ignoring unusable compiled-module cache entry");
            None
        }
    }
}

async fn compile_and_store(
    engine: &Engine,
    opts: &EngineOptions,
    path: &Path,
) -> Result<Module, SandboxError> {
    tracing::info!(
        cache = %path.display(),
        "first start on this machine: compiling the JavaScript sandbox guest to native code (5-10 s on 2 cores); later starts load it from the cache"
    );
    let t0 = Instant::now();
    let wasm = if opts.snapshot {
        let snap = snapshot(opts).await?;
        tracing::info!(
            ms = t0.elapsed().as_millis() as u64,
            bytes = snap.len(),
            "pre-initialised the JS realm"
        );
        snap
    } else {
        GUEST_WASM.to_vec()
    };
    let module = Module::new(engine, &wasm).map_err(SandboxError::engine)?;
    let bytes = module.serialize().map_err(SandboxError::engine)?;
    match cache::store(path, &bytes) {
        Ok(()) => cache::prune(&opts.cache_dir),
        // Still usable this time; the next start compiles again.
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "could not write the compiled-module cache")
        }
    }
    tracing::info!(
        ms = t0.elapsed().as_millis() as u64,
        "compiled the sandbox guest; cached for the next start"
    );
    Ok(module)
}

/// Runs the guest's initialiser under a throwaway engine (unoptimised
/// Cranelift: this code runs once) and returns the snapshot module.
async fn snapshot(opts: &EngineOptions) -> Result<Vec<u8>, SandboxError> {
    let mut config = base_config(opts);
    config
        .cranelift_opt_level(OptLevel::None)
        .consume_fuel(false)
        .epoch_interruption(false);
    let engine = Engine::new(&config).map_err(SandboxError::engine)?;
    let mut wizer = Wizer::new();
    wizer.init_func(EXPORT_INITIALIZE);
    let (cx, instrumented) = wizer.instrument(GUEST_WASM).map_err(SandboxError::engine)?;
    let module = Module::new(&engine, &instrumented).map_err(SandboxError::engine)?;
    let linker = linker(&engine)?;
    let mut store = Store::new(
        &engine,
        StoreData {
            memory_limit: SLOT_MEMORY as u64,
            ..StoreData::default()
        },
    );
    let instance = linker
        .instantiate_async(&mut store, &module)
        .await
        .map_err(SandboxError::engine)?;
    instance
        .get_typed_func::<(), ()>(&mut store, EXPORT_INITIALIZE)
        .map_err(SandboxError::engine)?
        .call_async(&mut store, ())
        .await
        .map_err(SandboxError::engine)?;
    let mut state = Snapshotter {
        store: &mut store,
        instance,
    };
    wizer
        .snapshot(&cx, &mut state)
        .await
        .map_err(SandboxError::engine)
}

struct Snapshotter<'a> {
    store: &'a mut Store<StoreData>,
    instance: wasmtime::Instance,
}

impl InstanceState for Snapshotter<'_> {
    async fn global_get(&mut self, name: &str, _hint: wasmtime_wizer::ValType) -> SnapshotVal {
        let global = self
            .instance
            .get_global(&mut *self.store, name)
            .expect("wizer asks only for globals it exported");
        match global.get(&mut *self.store) {
            wasmtime::Val::I32(x) => SnapshotVal::I32(x),
            wasmtime::Val::I64(x) => SnapshotVal::I64(x),
            wasmtime::Val::F32(x) => SnapshotVal::F32(x),
            wasmtime::Val::F64(x) => SnapshotVal::F64(x),
            wasmtime::Val::V128(x) => SnapshotVal::V128(x.as_u128()),
            other => panic!("the guest has a global of unsupported type {other:?}"),
        }
    }

    async fn memory_contents(&mut self, name: &str, contents: impl FnOnce(&[u8]) + Send) {
        let memory = self
            .instance
            .get_memory(&mut *self.store, name)
            .expect("wizer asks only for memories it exported");
        contents(memory.data(&*self.store))
    }
}

/// Refuses a guest built against a different ABI before any script runs.
async fn check_abi(engine: &Engine, pre: &InstancePre<StoreData>) -> Result<(), SandboxError> {
    if pre.module().get_export(EXPORT_MEMORY).is_none() {
        return Err(SandboxError::Abi("the guest exports no memory".into()));
    }
    let mut store = Store::new(
        engine,
        StoreData {
            memory_limit: SLOT_MEMORY as u64,
            ..StoreData::default()
        },
    );
    store.set_epoch_deadline(u64::MAX / 2);
    let _ = store.set_fuel(u64::MAX); // only errs when fuel is not metered
    let instance = pre
        .instantiate_async(&mut store)
        .await
        .map_err(SandboxError::engine)?;
    let version = instance
        .get_typed_func::<(), u32>(&mut store, EXPORT_ABI_VERSION)
        .map_err(|e| SandboxError::Abi(e.to_string()))?
        .call_async(&mut store, ())
        .await
        .map_err(SandboxError::engine)?;
    if version != ABI_VERSION {
        return Err(SandboxError::Abi(format!(
            "the guest speaks ABI version {version}, this host speaks {ABI_VERSION}; rebuild both"
        )));
    }
    Ok(())
}
