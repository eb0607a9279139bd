// expect: LimitExceeded args_bytes
// backend: 0
const node = 'n'.repeat(100000);
for (let i = 0; i < 50; i++) { try { await tools.vm_status({node, vmid: 100}) } catch (e) {} }
