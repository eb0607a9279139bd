// expect: ToolError
// backend: 0
await tools.vm_status(JSON.parse('{"__proto__": {"admin": true}, "node": "pve1", "vmid": 100}'))
