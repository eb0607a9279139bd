// Shut down every running VM on one node, all at once, and wait for the
// tasks. Needs an identity allowed to operate (and, by default, approval
// of each shutdown: the first run asks, an operator approves, the second
// run proceeds).
const node = "pve1";
const running = (await tools.vm_list({ node })).filter((vm) => vm.status === "running" && !vm.template);

// allSettled, not all: every shutdown is asked for (and, on the first
// run, files its approval request) before the script goes on or fails.
const settled = await Promise.allSettled(
  running.map((vm) => tools.vm_shutdown({ node, vmid: vm.vmid, timeout: 60, forceStop: true })),
);
const refused = settled.find((s) => s.status === "rejected");
if (refused) throw refused.reason;
const upids = settled.map((s) => s.value);
const done = await Promise.all(upids.map((upid) => tools.wait_task({ node, upid })));

running.map((vm, i) => ({ vmid: vm.vmid, name: vm.name, result: done[i].exitstatus }))
