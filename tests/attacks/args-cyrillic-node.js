// expect: ToolError
// backend: 0
await tools.vm_status({node: 'pv\u0435' + '1', vmid: 100})
