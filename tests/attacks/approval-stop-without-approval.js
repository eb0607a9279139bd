// expect: ApprovalRequired
// backend: 0
await tools.stop_guest({node: 'pve1', vmid: 100})
