const r = await fetch("https://pve1:8006/api2/json/nodes");
await r.json()
