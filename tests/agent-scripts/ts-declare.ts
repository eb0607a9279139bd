declare const injected: number;
declare function helper(x: number): number;
const n: number = 2;
n * 21
