// expect: ToolError
// backend: 0
await callTool('execute', {script: '1'})
