//! `cargo run --release -p airlock-sandbox --example try -- 'script'`:
//! runs a script against a host whose every tool echoes its arguments.

use airlock_sandbox::{Limits, Sandbox, SandboxConfig, ToolCall, ToolFailure, ToolHost};

struct Echo;

#[async_trait::async_trait]
impl ToolHost for Echo {
    async fn call(&self, call: ToolCall) -> Result<serde_json::Value, ToolFailure> {
        Ok(serde_json::json!({"tool": call.name, "args": call.args}))
    }
}

#[tokio::main]
async fn main() {
    let sandbox = Sandbox::new(SandboxConfig::default())
        .await
        .expect("sandbox");
    for script in std::env::args().skip(1) {
        let outcome = sandbox.execute(&script, &Limits::default(), &Echo).await;
        println!("{}", serde_json::to_string_pretty(&outcome).unwrap());
    }
}
