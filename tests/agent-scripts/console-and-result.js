const nodes = await tools.node_list({});
console.log("found", nodes.length, "nodes");
nodes.length
