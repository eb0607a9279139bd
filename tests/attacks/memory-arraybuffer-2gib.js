// expect: RuntimeError
// backend: 0
new ArrayBuffer(2 ** 31).byteLength
