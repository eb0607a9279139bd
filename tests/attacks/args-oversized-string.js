// expect: ToolError
// backend: 0
await tools.guest_status({node: 'a'.repeat(1 << 20), vmid: 100})
