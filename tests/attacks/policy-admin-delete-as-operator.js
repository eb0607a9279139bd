// expect: PolicyDenied
// backend: 0
await tools.delete_guest({node: 'pve1', vmid: 100})
