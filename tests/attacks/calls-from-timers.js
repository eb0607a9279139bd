// expect: LimitExceeded tool_calls
// backend: 50
for (let i = 0; i < 200; i++) setTimeout(() => tools.node_list({}).catch(() => {}), 0);
await new Promise((r) => setTimeout(r, 500))
