// expect: ToolError
// backend: 0
await tools.guest_status({node: '../../access/users', vmid: 100})
