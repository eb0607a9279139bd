// The reference a JavaScript user knows: each data-work script run in
// Node, in a new `vm` context per run (nothing carried over, as in
// Airlock's fresh mode), timed inside Node. Prints one JSON object:
// {"NAME": {"p50_ms": …, "value": …}, …}.
//
//   node benches/peer/node_compute.cjs ROUNDS benches/compute/a.js …
'use strict';
const fs = require('fs');
const path = require('path');
const vm = require('vm');

const [rounds, ...files] = process.argv.slice(2);
const out = {};
for (const file of files) {
  const source = fs.readFileSync(file, 'utf8');
  const script = new vm.Script(source, { filename: path.basename(file) });
  const times = [];
  let value;
  for (let r = 0; r <= Number(rounds); r++) {
    const t0 = process.hrtime.bigint();
    value = script.runInNewContext({});
    const took = Number(process.hrtime.bigint() - t0) / 1e6;
    if (r > 0) times.push(took); // the first round warms up
  }
  times.sort((a, b) => a - b);
  out[path.basename(file, '.js')] = { p50_ms: times[Math.floor(times.length / 2)], value: JSON.parse(JSON.stringify(value)) };
}
console.log(JSON.stringify(out));
