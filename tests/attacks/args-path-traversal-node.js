// expect: ToolError
// backend: 0
await tools.vm_status({node: '../../access/users', vmid: 100})
