// expect: PolicyDenied
// backend: 0
await callTool('vm_console', {node: 'pve1', vmid: 100})
