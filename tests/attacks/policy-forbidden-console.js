// expect: PolicyDenied
// backend: 0
await tools.guest_console({node: 'pve1', vmid: 100})
