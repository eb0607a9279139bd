// expect: ApprovalRequired
// backend: 1
const gs = await tools.vm_list({node: 'pve1'});
await Promise.all(gs.map((g) => tools.vm_stop({node: 'pve1', vmid: g.vmid})))
