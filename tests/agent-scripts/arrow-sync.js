() => ["no", "await", "needed"].join(" ")
