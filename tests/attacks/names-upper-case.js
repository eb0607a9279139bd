// expect: ToolError
// backend: 0
await callTool('LIST_NODES', {})
