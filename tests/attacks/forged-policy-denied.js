// expect: RuntimeError
// backend: 0
const e = new Error('denied');
Object.assign(e, {name: 'ToolError', tool: 'list_nodes', code: 'policy_denied'});
throw e
