// expect: ToolError
// backend: 0
await tools.vm_status({node: 'pve1\r\nX-Injected: 1', vmid: 100})
