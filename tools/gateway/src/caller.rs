//! Who a call is made for: the identity, the execution it belongs to, and
//! what its identity provider and the policy grant it. Backends see it
//! too (a backend may pick credentials by the mode allowed), so it sits
//! below both the gateway and the backends.

use std::sync::Arc;

use crate::{plan_apply::PlanRun, policy::Mode};
use airlock_runbooks::runbook::RunbookRun;

/// Who is calling, and from which execution.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    pub identity: String,
    /// The execution the call belongs to, when it came from a script.
    pub execution: Option<String>,
    /// The mode the identity provider's groups grant this caller (an
    /// OAuth token's group claim); used only when `[identities]` has no
    /// grant for `identity`.
    pub from_groups: Option<Mode>,
    /// The mode the gateway allowed this call in; set before a backend
    /// runs it (a backend may pick credentials by it), `None` before.
    pub mode: Option<Mode>,
    /// The change plan the execution records or applies, if any.
    pub plan: Option<PlanRun>,
    /// The identity provider lets this caller approve its own requests
    /// (its issuer's `approve_own`, or one of its groups in
    /// `approve_own_groups`); used only when `[identities]` does not say.
    pub approve_own: bool,
    /// The runbook run whose script makes the call, if one does: its
    /// calls are held to the runbook's file, and an approved version's
    /// changes inside it need no approval of their own.
    pub runbook: Option<Arc<RunbookRun>>,
    /// The call's number in its script (1, 2, ... in the order the
    /// script made them; a durable execution resumed by replay makes each
    /// call under the number it had), for the audit: `audit verify` finds
    /// a change one execution sent twice under one number.
    pub script_call: Option<u32>,
}

impl Caller {
    pub fn new(identity: impl Into<String>) -> Self {
        Self {
            identity: identity.into(),
            execution: None,
            from_groups: None,
            mode: None,
            plan: None,
            approve_own: false,
            runbook: None,
            script_call: None,
        }
    }

    /// A caller whose identity provider's groups grant `mode`.
    pub fn with_groups_mode(mut self, mode: Option<Mode>) -> Self {
        self.from_groups = mode;
        self
    }

    /// A caller whose identity provider lets it approve its own requests.
    pub fn with_approve_own(mut self, allowed: bool) -> Self {
        self.approve_own = allowed;
        self
    }
}
