const tries = await Promise.allSettled([tools.node_list({}), tools.no_such_tool({})]);
tries.map((t) => t.status)
