const guests = await tools.vm_list({ node: "pve1" });
JSON.parse(JSON.stringify(guests)).length === guests.length
