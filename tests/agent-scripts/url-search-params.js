// Building a Proxmox API path the way the Proxmox docs show it.
const url = new URL("/api2/json/cluster/resources", "https://pve1:8006");
url.searchParams.set("type", "vm");
const nodes = await tools.node_list({});
const list = new Intl.ListFormat("en", { type: "conjunction" }).format(nodes.map((n) => n.node));
[url.pathname + url.search, url.searchParams.get("type"), list]
