// expect: LimitExceeded wall_time_ms
// backend: 0
for (;;) { try { throw new Error('x'); } catch (e) {} }
