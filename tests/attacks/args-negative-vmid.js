// expect: ToolError
// backend: 0
await tools.guest_status({node: 'pve1', vmid: -1})
