//! What the gateway benches share: a backend that serves the curated
//! catalog's specs and answers every call at once, so the numbers are the
//! gateway's own (and its state store's), not a backend's.

use std::sync::Arc;

use airlock_catalog::ToolSpec;
use airlock_gateway::{Backend, BackendError, Caller, Gateway, GatewayConfig, Reply};
use airlock_proxmox::{curated, tiers::TierRules};
use airlock_state::Place;
use async_trait::async_trait;
use criterion::Criterion;
use serde_json::Value;

pub struct Immediate(pub Vec<ToolSpec>);

#[async_trait]
impl Backend for Immediate {
    fn id(&self) -> &str {
        "pve"
    }
    fn tools(&self) -> Vec<ToolSpec> {
        self.0.clone()
    }
    async fn call(&self, _: &Caller, _: &ToolSpec, args: Value) -> Result<Reply, BackendError> {
        Ok(Reply::new(args))
    }
}

/// The curated catalog's specs, with the default tiers.
pub fn curated_specs() -> Vec<ToolSpec> {
    curated::tools(&TierRules::defaults(), &Default::default(), "pve")
        .into_iter()
        .map(|(s, _)| s)
        .collect()
}

/// Benches one whole gateway call of `vm_list` with `args`, through a
/// gateway on `config` and its state in `place`, in front of
/// [`Immediate`].
pub fn bench_call(
    c: &mut Criterion,
    name: &str,
    config: GatewayConfig,
    place: &Place,
    specs: Vec<ToolSpec>,
    args: Value,
    rt: &tokio::runtime::Runtime,
) {
    let (gateway, _) = Gateway::new(
        config,
        vec![Arc::new(Immediate(specs)) as Arc<dyn Backend>],
        place,
    )
    .unwrap();
    let caller = Caller::new("local");
    c.bench_function(name, |b| {
        b.to_async(rt).iter(|| async {
            gateway
                .call(&caller, "vm_list", args.clone())
                .await
                .unwrap()
        })
    });
}
