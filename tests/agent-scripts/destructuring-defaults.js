const [{ node = "none", status } = {}] = await tools.node_list({});
({ node, status })
