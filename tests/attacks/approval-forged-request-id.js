// expect: ToolError
// backend: 0
await tools.vm_stop({node: 'pve1', vmid: 100, approval: 'ap-0000000000000000'})
