// A correlation id for the run, as agents tag their changes.
const runId = crypto.randomUUID();
const nodes = await tools.node_list({});
/^[0-9a-f-]{36}$/.test(runId) && nodes.length === 3
