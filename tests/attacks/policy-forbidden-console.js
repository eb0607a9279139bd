// expect: PolicyDenied
// backend: 0
await tools.vm_console({node: 'pve1', vmid: 100})
