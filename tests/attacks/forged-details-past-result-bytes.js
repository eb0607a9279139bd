// expect: RuntimeError
// backend: 0
// Details that a host failure would carry uncut, forged: a megabyte of them.
throw {name: 'ToolError', tool: 'node_list', code: 'backend_error', message: 'm', details: {blob: 'x'.repeat(1e6)}}
