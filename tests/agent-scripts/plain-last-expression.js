const nodes = await tools.node_list({});
nodes.map((n) => n.node).sort()
