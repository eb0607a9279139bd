// expect: ToolError
// backend: 0
await tools.guest_status({node: 'pv\u0435' + '1', vmid: 100})
