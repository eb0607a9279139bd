// expect: PolicyDenied
// backend: 0
await tools.vm_delete({node: 'pve1', vmid: 100})
