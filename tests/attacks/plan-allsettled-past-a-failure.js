// expect: ok
// plan: apply
// backend: 1
// applied: 0
// plan-after: used
// result: ["backend", "plan_stopped"]
// An approved plan "stop VM 555 (it does not exist), then stop VM 101",
// applied with both sent at once and their failures ignored: change 2
// waits for change 1's answer, change 1 fails, and change 2 is refused
// unsent. VM 101 keeps running; nothing counts as applied.
const r = await Promise.allSettled([
  tools.vm_stop({node: "pve1", vmid: 555}),
  tools.vm_stop({node: "pve1", vmid: 101}),
]);
r.map((x) => x.status === "fulfilled" ? "made" : (x.reason.code === "plan_stopped" ? "plan_stopped" : "backend"))
