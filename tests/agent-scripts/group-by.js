const nodes = await tools.node_list({});
const lists = await Promise.all(nodes.map((n) => tools.vm_list({ node: n.node })));
const all = lists.flat();
Object.fromEntries(Object.entries(Object.groupBy(all, (g) => g.status)).map(([k, v]) => [k, v.length]))
