new Date(Date.UTC(2026, 11, 7, 12, 0, 0)).toISOString()
