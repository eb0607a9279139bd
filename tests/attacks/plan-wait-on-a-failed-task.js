// expect: ok
// plan: apply
// backend: 2
// applied: 1
// plan-after: used
// result: "plan_stopped"
// A plan that waited on a task before its next change ("reboot, wait,
// then stop another"): applying, the reboot's task fails (VM 103 is not
// running), and the stop after the wait is refused unsent, though the
// script ignores the task's status and goes on.
const upid = await tools.vm_reboot({node: "pve1", vmid: 103});
await tools.wait_task({node: "pve1", upid, timeout: 10});
await tools.vm_stop({node: "pve1", vmid: 101}).then(() => "made", (e) => e.code)
