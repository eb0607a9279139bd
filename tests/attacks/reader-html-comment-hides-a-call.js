// expect: SyntaxError
// backend: 0
// `<!--` is a comment to the sandbox's JavaScript (an old rule for
// scripts in web pages) and code to a reader: `x <!--y` is `x < !(--y)`.
// The backtick after it opens a template for the reader, not for the
// sandbox, so the vm_stop a reader sees as text would run. Refused.
let y = 1, x = 0;
const z = x <!--y; const note = `
await tools.vm_stop({ node: "pve1", vmid: 101 });
`; // `
"read only"
