// expect: ToolError
// backend: 0
await callTool('list_nodes', [1, 2])
