const when: Date = new Date("2026-12-07T12:00:00Z");
[when.toLocaleDateString("en-US", { dateStyle: "medium" }), when.toLocaleTimeString("en-US", { hour: "2-digit", minute: "2-digit" })]
