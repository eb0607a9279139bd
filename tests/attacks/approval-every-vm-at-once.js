// expect: ApprovalRequired
// backend: 1
const gs = await tools.list_guests({node: 'pve1'});
await Promise.all(gs.map((g) => tools.stop_guest({node: 'pve1', vmid: g.vmid})))
