// expect: ToolError
// backend: 0
await callTool('NODE_LIST', {})
