enum Status { Running = "running", Stopped = "stopped" }
const guests = await tools.vm_list({ node: "pve1" });
guests.filter((g) => g.status === Status.Running).length
