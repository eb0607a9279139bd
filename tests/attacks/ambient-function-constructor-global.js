// expect: ok
// backend: 0
// result: "undefined,undefined,undefined,undefined"
const g = Function('return this')();
[typeof g.process, typeof g.require, typeof g.fetch, typeof g.Deno].join(',')
