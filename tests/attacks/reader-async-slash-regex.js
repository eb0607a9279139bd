// expect: SyntaxError
// backend: 0
// boa reads a `/` after the name `async` as the start of a regular
// expression; other engines (and every reader) see a division by a
// template. The vm_stop a reader sees as text would run. Refused.
const async = (x) => x;
const note = async
/`/; await tools.vm_stop({ node: "pve1", vmid: 101 }); //`
note
