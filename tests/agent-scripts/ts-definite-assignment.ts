let total!: number;
total = (await tools.node_list({})).length;
total
