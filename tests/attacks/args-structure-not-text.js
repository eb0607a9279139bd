// expect: LimitExceeded args_bytes
// backend: 0
// 210 KB of text but a tree of 90,000 nodes on the host: arguments are
// charged for their structure, not only their bytes.
await tools.vm_status({node: 'pve1', vmid: 100, a: Array.from({length: 30000}, () => ({"": 0}))})
