// expect: ToolError
// backend: 0
await tools.vm_status({node: 'a'.repeat(1 << 16), vmid: 100})
