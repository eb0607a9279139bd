// expect: SyntaxError
// plan: apply
// apply-source: broken
// backend: 0
// applied: 0
// plan-after: approved
// An approved plan applied with a script that does not compile: nothing
// is sent, and the plan is not spent; it stays approved until it expires.
await tools.vm_stop({node: "pve1", vmid: 101})
