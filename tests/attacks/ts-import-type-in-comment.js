// expect: ok
// backend: 0
// result: "guarded"
// `import type` on the line where a comment ends: blanking the line as a
// line once took the guard after the comment with it (and the comment
// ran on). The comment's line is text; the guard stays code.
const confirm: boolean = false;
/* types come from get_schema:
import type { Vm } from "./vm"; */ if (!confirm) { return "guarded"; }
await tools.vm_stop({ node: "pve1", vmid: 101 });
"stopped"
