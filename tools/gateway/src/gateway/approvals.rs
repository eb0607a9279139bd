//! The approval step's side: what an agent is told to ask for, whether a
//! person may be asked in the client, what an approver is shown, and
//! deciding a request with its audit line.

use super::*;

impl Gateway {
    /// What an `ApprovalRequired` error tells the agent to do: the shell
    /// command that approves `request_id`, and for how long it holds.
    pub fn approve_instruction(&self, request_id: &str) -> String {
        format!(
            "an operator can run `{}` (or deny it); then run the script again within {} minutes",
            self.approve_command_for(request_id),
            self.state.approvals.ttl_ms() / 60_000
        )
    }

    /// What to do for a durable execution's call that waits: the same
    /// command, and the execution goes on by itself once followed. The
    /// rest of `how` (who must decide) is kept.
    pub fn wait_instruction(&self, request_id: &str, how: &str) -> String {
        let rest = how
            .strip_prefix(&self.approve_instruction(request_id))
            .unwrap_or("");
        format!(
            "an operator can run `{}` (or deny it) within {} minutes; the execution waits for the decision{rest}",
            self.approve_command_for(request_id),
            self.state.approvals.ttl_ms() / 60_000
        )
    }

    /// The command that approves `request_id` from a shell.
    pub fn approve_command_for(&self, request_id: &str) -> String {
        format!("{} {request_id}", self.approve_command)
    }

    /// What to do with a filed plan: who approves it, and how to apply it.
    pub fn plan_instruction(&self, plan_id: &str) -> String {
        format!(
            "an operator can run `{} {plan_id}` (or deny it), or the person in the client approves it; then run the same script with execute's `plan: \"{plan_id}\"` within {} minutes of the approval",
            self.approve_command,
            self.state.approvals.ttl_ms() / 60_000
        )
    }

    /// The command that lists open requests, next to the approve command
    /// (so it carries the same `--config`).
    pub(super) fn list_command(&self) -> String {
        match self.approve_command.strip_suffix(" approve") {
            Some(base) => format!("{base} list"),
            None => "airlock approvals list".into(),
        }
    }

    /// Whether the person in `identity`'s MCP client may be asked to
    /// approve a call of `tool`: its tier is in `approval.in_client` and
    /// the identity's `approve_in_client` is not off. When not, the call
    /// waits for an operator (`airlock approvals approve`), so a client
    /// cannot approve its own calls. Unknown tools: no.
    pub fn may_approve_in_client(&self, identity: &str, tool: &str) -> bool {
        if catalog::name_too_long(tool).is_some() {
            return false;
        }
        let catalog = self.catalog();
        catalog.get(tool).is_some_and(|e| {
            self.in_client_tiers.contains(&e.spec.tier) && self.policy.approve_in_client(identity)
        })
    }

    pub fn approvals(&self) -> &dyn ApprovalStore {
        &*self.state.approvals
    }

    /// What a person approving `args` is shown; refused (`approval_too_large`)
    /// when it cannot be shown whole, or (`approval_unavailable`) without
    /// the deployment's key for secrets' hashes.
    pub(super) fn shown(&self, tool: &str, args: &Value) -> Result<summary::Rendered, CallError> {
        let key = self.summary_key()?;
        summary::summarize(args, &key).map_err(|e| CallError::ApprovalTooLarge {
            tool: tool.to_string(),
            reason: e.to_string(),
        })
    }

    /// The deployment's key for secrets' tags (approver views, runbook
    /// lines), read from the store once, outside any lock: replicas
    /// racing to create it agree on the store's one row.
    pub(super) fn summary_key(&self) -> Result<summary::SummaryKey, CallError> {
        if let Some(k) = self.summary_key.get() {
            return Ok(k.clone());
        }
        let k = summary::SummaryKey::new(
            self.state
                .approvals
                .summary_key()
                .map_err(|e| CallError::ApprovalUnavailable(told(&e)))?,
        );
        Ok(self.summary_key.get_or_init(|| k).clone())
    }

    /// Whether `caller` may approve its own requests (`approve_own`).
    pub fn may_approve_own(&self, caller: &Caller) -> bool {
        self.policy
            .approve_own(&caller.identity, caller.approve_own)
    }

    /// Decides request `id` as `decider` (four eyes kept by the store)
    /// and writes the decision to the audit chain.
    pub fn decide(
        &self,
        id: &str,
        decider: &crate::decision::Decider,
        to: crate::approval::Status,
    ) -> Result<crate::approval::Request, ApprovalError> {
        crate::decision::decide(
            &*self.state.approvals,
            &*self.state.audit,
            id,
            decider,
            self.now_ms(),
            to,
        )
    }
}
