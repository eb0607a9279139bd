// expect: LimitExceeded args_bytes
// backend: 0
await tools.vm_status({node: 'a'.repeat(2 << 20), vmid: 100})
