const bytes: Uint8Array = new TextEncoder().encode("node-€");
[bytes.length, new TextDecoder().decode(bytes)]
