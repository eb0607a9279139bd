const first = <T,>(xs: readonly T[]): T | undefined => xs[0];
const pair: [string, number] = ["pve1", 100];
[first<string>(["a", "b"]), pair[1]]
