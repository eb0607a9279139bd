// expect: PolicyDenied
// backend: 0
await callTool('guest_console', {node: 'pve1', vmid: 100})
