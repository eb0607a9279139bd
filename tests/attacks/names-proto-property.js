// expect: ToolError
// backend: 0
await tools.__proto__({})
