// expect: ok
// backend: 0
// result: "\nexport type X = 1;\nexport interface Y {}\n"
// `export type` and `export interface` starting lines of a template:
// once they lost `export`. Only tokens are rewritten.
const t: string = `
export type X = 1;
export interface Y {}
`;
t
