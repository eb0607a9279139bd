// Memory per node, formatted for a person to read.
interface NodeInfo { node: string; mem: number; maxmem: number }
const gb = new Intl.NumberFormat("en-US", { style: "unit", unit: "gigabyte", maximumFractionDigits: 1 });
const pct = new Intl.NumberFormat("en-US", { style: "percent" });
const nodes: NodeInfo[] = await tools.node_list({});
nodes.map((n) => `${n.node}: ${gb.format(n.mem / 2 ** 30)} of ${gb.format(n.maxmem / 2 ** 30)} (${pct.format(n.mem / n.maxmem)})`)
