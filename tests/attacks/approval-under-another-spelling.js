// expect: ApprovalRequired
// backend: 0
// approve-by: OLGA
// The requester (olga) approves its own request under another spelling
// of its name before this run: four eyes compare one person in any
// spelling, so the request stays open and nothing is sent. (Named to
// run after the other approval- scripts: the runner denies what they
// left open first.)
await tools.vm_shutdown({node: 'pve1', vmid: 100, timeout: 17})
