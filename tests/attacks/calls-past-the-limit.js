// expect: LimitExceeded tool_calls
// backend: 50
for (let i = 0; i < 1000; i++) await tools.node_list({});
