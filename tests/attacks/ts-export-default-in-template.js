// expect: ok
// backend: 0
// result: "line one\nexport default config"
// `export default` starting a line of a template: once rewritten to
// `return` padded, it changed the string. Only the token is rewritten.
const config: string = "x";
const s = `line one
export default config`;
s
