// expect: LimitExceeded
// backend: 0
while (true) await null;
