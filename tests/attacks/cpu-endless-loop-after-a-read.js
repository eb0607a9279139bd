// expect: LimitExceeded wall_time_ms
// backend: 1
await tools.node_list({});
for (;;) {}
