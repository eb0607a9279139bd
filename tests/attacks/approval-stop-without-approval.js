// expect: ApprovalRequired
// backend: 0
await tools.vm_stop({node: 'pve1', vmid: 100})
