new Date("2026-12-07T12:00:00Z").toLocaleString("en-US", { timeZone: "Europe/Berlin" })
