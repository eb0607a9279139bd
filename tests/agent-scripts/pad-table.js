const nodes = await tools.node_list({});
nodes.map((n) => n.node.padEnd(6, ".") + String(n.maxcpu ?? 0).padStart(3))
