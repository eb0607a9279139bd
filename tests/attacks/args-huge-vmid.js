// expect: ToolError
// backend: 0
await tools.vm_status({node: 'pve1', vmid: 1e308})
