try {
  throw new Error("outer", { cause: new Error("inner") });
} catch (e) {
  [e.message, e.cause.message]
}
