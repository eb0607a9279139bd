// Start every stopped guest whose name starts with "web-", at most two at
// a time, and report what happened to each. Failures are caught per guest
// so one refusal does not hide the others.
const nodes = (await tools.list_nodes({})).filter((n) => n.status === "online");
const guests = (await Promise.all(nodes.map((n) => tools.list_guests({ node: n.node })))).flat();
const targets = guests.filter((g) => g.status === "stopped" && g.name.startsWith("web-"));

const results = [];
for (let i = 0; i < targets.length; i += 2) {
  const batch = targets.slice(i, i + 2);
  results.push(...(await Promise.all(batch.map(async (g) => {
    try {
      const r = await tools.start_guest({ node: g.node, vmid: g.vmid });
      return { vmid: g.vmid, ok: true, status: r.status };
    } catch (e) {
      return { vmid: g.vmid, ok: false, error: `${e.code}: ${e.message}` };
    }
  }))));
}
results
