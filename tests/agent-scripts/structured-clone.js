const nodes = await tools.node_list({});
const copy = structuredClone(nodes);
copy[0].node = "changed";
[nodes[0].node !== "changed", copy.length === nodes.length]
