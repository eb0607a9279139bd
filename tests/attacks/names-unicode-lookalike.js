// expect: ToolError
// backend: 0
await callTool('list_n\u043edes', {})
