process.env.PVE_TOKEN
