// expect: SyntaxError
// backend: 0
// An enum needs code generated; it is refused, not half-run.
const ok: number = 1;
enum Mode { Read, Write }
Mode.Write
