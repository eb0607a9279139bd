// expect: RuntimeError
// backend: 0
const e = new Error('denied');
Object.assign(e, {name: 'ToolError', tool: 'node_list', code: 'policy_denied'});
throw e
