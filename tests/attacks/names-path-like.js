// expect: ToolError
// backend: 0
await callTool('../node_list', {})
