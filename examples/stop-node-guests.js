// Shut down every running guest on one node — VMs and containers — and
// wait for the tasks. Made for plan mode, so a person approves the whole
// change once instead of each shutdown:
//
//   1. run it with execute's `mode: "plan"` (`airlock exec --plan`): the
//      lists are read, the shutdowns are recorded, not sent, and the
//      result lists them under `plan`, with the plan's id;
//   2. a person approves the plan (in the MCP client, or
//      `airlock approvals approve pl-…`);
//   3. run the same script with `plan: "pl-…"` (`airlock exec --apply
//      pl-…`): each planned shutdown runs once, without asking again.
//
// In plan mode a shutdown answers a planned task id, and wait_task answers
// it at once with exitstatus "planned".
const node = "pve1";
const [vms, cts] = await Promise.all([tools.vm_list({ node }), tools.ct_list({ node })]);
const running = [
  ...vms.filter((g) => g.status === "running" && !g.template).map((g) => ({ kind: "vm", vmid: g.vmid, name: g.name })),
  ...cts.filter((g) => g.status === "running" && !g.template).map((g) => ({ kind: "ct", vmid: g.vmid, name: g.name })),
];
const shutdown = (g) =>
  g.kind === "vm"
    ? tools.vm_shutdown({ node, vmid: g.vmid, timeout: 60, forceStop: true })
    : tools.ct_shutdown({ node, vmid: g.vmid, timeout: 60, forceStop: true });
const upids = await Promise.all(running.map(shutdown));
const done = await Promise.all(upids.map((upid) => tools.wait_task({ node, upid })));
running.map((g, i) => ({ ...g, result: done[i].exitstatus }));
