// expect: ok
// backend: 0
// result: {"confirm":false,"doc":"\nimport type { Vm } from \"./vm\"; ","more":"\nconst stop = await tools.vm_stop({ node: \"pve1\", vmid: 101 });\n"}
// `import type` on a template's last line, its backtick closing the
// template: blanking the line as a line once made the next template's
// text code (a vm_stop the reviewed logic never makes). Only tokens are
// rewritten: both templates stay text.
const confirm: boolean = false;
const doc = `
import type { Vm } from "./vm"; `;
const more = `
const stop = await tools.vm_stop({ node: "pve1", vmid: 101 });
`; // `
({ confirm, doc, more })
