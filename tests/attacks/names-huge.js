// expect: ToolError
// backend: 0
await callTool('x'.repeat(2e6), {})
