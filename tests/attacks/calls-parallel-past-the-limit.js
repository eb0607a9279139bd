// expect: LimitExceeded tool_calls
// backend: 50
await Promise.all(Array.from({length: 1000}, () => tools.node_list({})))
