//! Approvals for mutations: what a request is, what deciding it means,
//! and the store every implementation keeps them in ([`ApprovalStore`]).
//! The stores themselves (one machine's SQLite file, a PostgreSQL database
//! every replica shares) live in the `airlock-state` crate and pass one
//! suite of tests there; this module holds no storage code.
//!
//! An approval is bound to identity + the tool's stable key (which no
//! backend can move to another tool: `ToolSpec::key`) + the SHA-256 of
//! the exact arguments, expires, and is used up by the one call it
//! allowed: a tampered argument, another identity or a second call needs
//! a new one.
//!
//! Who may decide is the rule every channel keeps: **four eyes**. The
//! identity whose call or plan asks cannot approve it — not in its own
//! MCP client, not on the command line, not in a console — unless the
//! operator allowed that identity (or its identity provider's issuer or
//! group) to approve its own requests (`approve_own`). Refusing one's own
//! request is always allowed: it cannot make anything happen. The rule is
//! kept where the decision is written (every store's
//! [`ApprovalStore::decide`] asks [`refusal`]), so no channel can forget
//! it; [`crate::decision`] writes each decision to the audit chain.
//!
//! The store stays small whatever a script does: an identity has at most
//! `max_open` requests waiting at once (more are refused, not filed), and
//! rows are deleted one TTL after they expired — at open and, during
//! [`ApprovalStore::check`], at most once a minute ([`PURGE_EVERY_MS`]).

use serde::{Deserialize, Serialize};

use crate::plan::{self, PlanError, PlannedChange, PLAN_TOOL};
use airlock_edge::private_files::StateDirError;

/// Default lifetime of a request, and of an approval once granted.
pub const DEFAULT_TTL_MS: i64 = 10 * 60 * 1000;

/// Default cap on one identity's requests waiting for a decision.
pub const DEFAULT_MAX_OPEN: u32 = 20;

/// Expired rows are looked for at most this often during `check`.
pub const PURGE_EVERY_MS: i64 = 60_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Pending,
    Approved,
    Denied,
    Used,
}

impl Status {
    pub fn parse(s: &str) -> Status {
        match s {
            "approved" => Status::Approved,
            "denied" => Status::Denied,
            "used" => Status::Used,
            _ => Status::Pending,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pending => "pending",
            Status::Approved => "approved",
            Status::Denied => "denied",
            Status::Used => "used",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Request {
    pub id: String,
    pub identity: String,
    /// The tool's name in the catalog when the request was filed, for
    /// the person deciding.
    pub tool: String,
    /// The tool's stable key, which the approval is bound to (`None` on
    /// rows filed before keys, which then match no call).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_key: Option<String>,
    pub args_hash: String,
    /// What the arguments were, for the person deciding: every value that
    /// decides, long ones summarised (`summary::Rendered::short`).
    pub summary: String,
    /// The arguments in full, when `summary` had to summarise a long
    /// value (`airlock approvals show ID`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    pub status: Status,
    pub created_ms: i64,
    pub expires_ms: i64,
    pub decided_by: Option<String>,
    /// The channel the decision came through (`cli`, `client`, …).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decided_via: Option<String>,
    /// A plan's changes, in order (`tool` is then [`PLAN_TOOL`] and
    /// `args_hash` their [`plan::list_hash`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub changes: Option<Vec<PlannedChange>>,
    /// Why it was decided so, in the decider's words (at most
    /// [`MAX_REASON_CHARS`]); told to the requester with a denial.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl Request {
    pub fn expired(&self, now_ms: i64) -> bool {
        now_ms >= self.expires_ms
    }

    /// Whether the person who decided is the identity that asked.
    /// One person in any spelling ([`airlock_approver::person::same`]).
    pub fn decided_by_requester(&self) -> bool {
        self.decided_by
            .as_deref()
            .is_some_and(|by| airlock_approver::person::same(by, &self.identity))
    }
}

/// A call that needs approval, as the store binds and files it.
#[derive(Clone, Copy, Debug)]
pub struct Asked<'a> {
    pub identity: &'a str,
    /// The catalog name, shown.
    pub tool: &'a str,
    /// The stable key, bound.
    pub tool_key: &'a str,
    pub args_hash: &'a str,
    pub summary: &'a str,
    pub detail: Option<&'a str>,
}

/// What the gateway should do with a call that needs approval.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Check {
    /// An approval matched and is now used up; who granted it, through
    /// which channel, and whether it was the requester, for the audit.
    Proceed {
        request_id: String,
        decided_by: Option<String>,
        decided_via: Option<String>,
        own: bool,
    },
    /// Not approved (yet): the pending request to point the operator at.
    Required(Request),
    /// An operator refused exactly this call.
    Denied(Request),
    /// No request was filed: the identity already has `limit` waiting.
    TooManyOpen { limit: u32 },
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ApprovalError {
    #[error("no approval request with id {0}; `airlock approvals list` shows the open ones")]
    NotFound(String),
    #[error("approval request {id} is already {status}")]
    NotPending { id: String, status: &'static str },
    #[error("approval request {0} has expired; run the script again to make a new one")]
    Expired(String),
    #[error("approval request {id} was asked by {identity}, and nobody approves their own request: another person must decide it (`airlock approvals approve {id}` as someone else), or the operator allows {identity} to approve its own with `approve_own = true`")]
    OwnRequest { id: String, identity: String },
    #[error("the approval store is unavailable: {0}")]
    Storage(String),
    /// The name given for the decider is nobody the deployment knows
    /// (the command line's `--by`): the text says what to give.
    #[error("{0}")]
    Approver(String),
    #[error(transparent)]
    StateDir(#[from] StateDirError),
    #[error("a reason of {chars} characters is longer than the {limit} a decision keeps; say it in fewer words")]
    ReasonTooLong { chars: usize, limit: usize },
    #[error("a reason may hold line breaks and tabs, not other control characters (U+{0:04X}); write it as plain text")]
    ReasonControl(u32),
}

/// The longest reason a decision keeps, in characters: a sentence or two
/// for the requester, not a document.
pub const MAX_REASON_CHARS: usize = 500;

/// A store failure while taking a plan, in the plan's words.
impl From<ApprovalError> for PlanError {
    fn from(e: ApprovalError) -> Self {
        use ApprovalError as A;
        match e {
            A::NotFound(id) => PlanError::NotFound(id),
            A::Expired(id) => PlanError::Expired(id),
            // The store's own words, for the gateway to say as it says
            // every store failure (no host, no server text).
            A::Storage(m) => PlanError::Storage(m),
            other => PlanError::Storage(other.to_string()),
        }
    }
}

/// Where a decision was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Channel {
    /// `airlock approvals approve|deny` in a shell with the state.
    Cli,
    /// The person in the requester's own MCP client (elicitation).
    Client,
    /// The operator console in a browser.
    Console,
    /// `airlock demo`, approving its own plan to show the flow.
    Demo,
    /// Airlock itself: only ever a denial (a plan whose audit line could
    /// not be written is made undecidable).
    Airlock,
}

impl Channel {
    pub fn as_str(self) -> &'static str {
        match self {
            Channel::Cli => "cli",
            Channel::Client => "client",
            Channel::Console => "console",
            Channel::Demo => "demo",
            Channel::Airlock => "airlock",
        }
    }
}

impl std::fmt::Display for Channel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who decides, and through which channel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decider {
    /// The approver's name as the channel knows it: the identity in a
    /// client or console, `--by` (default the login name) on the command
    /// line.
    pub who: String,
    pub channel: Channel,
    /// The operator allowed the requester to approve its own requests
    /// (`approve_own`): only then may `who` approve a request `who` asked.
    pub may_approve_own: bool,
    /// Why, in the decider's words ([`Decider::with_reason`]).
    pub reason: Option<String>,
}

impl Decider {
    /// An operator on the command line (or in a test).
    pub fn cli(who: impl Into<String>) -> Self {
        Self {
            who: who.into(),
            channel: Channel::Cli,
            may_approve_own: false,
            reason: None,
        }
    }

    /// The person in an identity's own MCP client: always the requester.
    pub fn client(identity: impl Into<String>, may_approve_own: bool) -> Self {
        Self {
            who: identity.into(),
            channel: Channel::Client,
            may_approve_own,
            reason: None,
        }
    }

    /// A decider in the operator console, as the identity it signed in as.
    pub fn console(identity: impl Into<String>, may_approve_own: bool) -> Self {
        Self {
            who: identity.into(),
            channel: Channel::Console,
            may_approve_own,
            reason: None,
        }
    }

    /// `who` may approve its own requests (the operator allowed it).
    pub fn allowing_own(mut self, allowed: bool) -> Self {
        self.may_approve_own = allowed;
        self
    }

    /// Gives the decision a reason; blank is none. Refuses one longer than
    /// [`MAX_REASON_CHARS`] rather than keeping half of it.
    pub fn with_reason(mut self, reason: &str) -> Result<Self, ApprovalError> {
        // A browser sends a textarea's line ends as CRLF.
        let reason = reason.trim().replace("\r\n", "\n");
        if let Some(c) = reason
            .chars()
            .find(|c| c.is_control() && !matches!(c, '\n' | '\t'))
        {
            return Err(ApprovalError::ReasonControl(c as u32));
        }
        let chars = reason.chars().count();
        if chars > MAX_REASON_CHARS {
            return Err(ApprovalError::ReasonTooLong {
                chars,
                limit: MAX_REASON_CHARS,
            });
        }
        self.reason = (!reason.is_empty()).then_some(reason);
        Ok(self)
    }
}

/// Why `decider` may not move `current` to `to`, if it may not: a person
/// approving a request they asked themselves, without `approve_own`.
/// Names are compared as one person's in any spelling
/// ([`airlock_approver::person::same`]): `Olga` is `olga`.
pub fn refusal(current: &Request, decider: &Decider, to: Status) -> Option<ApprovalError> {
    let own = airlock_approver::person::same(&decider.who, &current.identity);
    (to == Status::Approved && own && !decider.may_approve_own).then(|| ApprovalError::OwnRequest {
        id: current.id.clone(),
        identity: current.identity.clone(),
    })
}

/// Where approval requests are filed, decided and used up. Every method
/// is one atomic step: two gateways checking the same approved call at
/// once (two threads, or two replicas on one database) use it once.
pub trait ApprovalStore: Send + Sync {
    /// Looks for an approval of exactly this call (identity, tool key,
    /// argument hash) and uses it up, or finds (or opens) the request an
    /// operator must decide.
    fn check(&self, asked: &Asked<'_>, now_ms: i64) -> Result<Check, ApprovalError>;

    /// Requests, newest first; only those still open unless `all`.
    fn list(&self, now_ms: i64, all: bool) -> Result<Vec<Request>, ApprovalError>;

    fn get(&self, id: &str) -> Result<Request, ApprovalError>;

    /// Decides a pending, unexpired request (`to` is `Approved` or
    /// `Denied`); the decision then lives for the TTL. Refuses a decider
    /// approving their own request without `approve_own`
    /// ([`refusal`]). Callers that write the decision to the
    /// audit use [`crate::decision::decide`].
    fn decide(
        &self,
        id: &str,
        decider: &Decider,
        now_ms: i64,
        to: Status,
    ) -> Result<Request, ApprovalError>;

    /// Deletes every row whose expiry passed more than one TTL before
    /// `now_ms`, whatever its status: nothing can use or decide it any
    /// more, and a denial has stopped counting. Returns how many went.
    fn purge(&self, now_ms: i64) -> Result<usize, ApprovalError>;

    /// How many rows the store holds, in any state.
    fn rows(&self) -> Result<u64, ApprovalError>;

    fn ttl_ms(&self) -> i64;

    /// Files the plan `id` of `identity` as one pending request (the
    /// person decides it whole), counted against the identity's cap like
    /// any request: `Check::Required` or `Check::TooManyOpen`.
    fn file_plan(
        &self,
        id: &str,
        identity: &str,
        changes: &[PlannedChange],
        now_ms: i64,
    ) -> Result<Check, ApprovalError>;

    /// The deployment's key for the short hashes approvers see secrets by
    /// (`summary::SummaryKey`): made once, at random, kept with the
    /// approvals, the same for every replica.
    fn summary_key(&self) -> Result<[u8; 32], ApprovalError>;

    /// Takes `identity`'s approved plan `id` for applying: approved →
    /// used in one step, so it applies once whatever runs at the same
    /// time; refuses a plan that is another identity's, not approved,
    /// used, expired, or whose changes no longer hash to what was filed.
    fn take_plan(&self, id: &str, identity: &str, now_ms: i64) -> Result<Request, PlanError>;

    /// Grants a pending request; the approval then lives for the TTL.
    fn approve(&self, id: &str, by: &Decider, now_ms: i64) -> Result<Request, ApprovalError> {
        self.decide(id, by, now_ms, Status::Approved)
    }

    fn deny(&self, id: &str, by: &Decider, now_ms: i64) -> Result<Request, ApprovalError> {
        self.decide(id, by, now_ms, Status::Denied)
    }
}

/// A plan request's row before it is filed: the table as its summary,
/// the list hash as its argument hash.
pub fn plan_request(
    id: &str,
    identity: &str,
    changes: &[PlannedChange],
    now_ms: i64,
    ttl_ms: i64,
) -> Request {
    Request {
        id: id.into(),
        identity: identity.into(),
        tool: PLAN_TOOL.into(),
        tool_key: None,
        args_hash: plan::list_hash(changes),
        summary: plan::table(changes),
        detail: None,
        status: Status::Pending,
        created_ms: now_ms,
        expires_ms: now_ms + ttl_ms,
        decided_by: None,
        decided_via: None,
        changes: Some(changes.to_vec()),
        reason: None,
    }
}

/// Why `current` cannot be applied by `identity` at `now_ms`, if it
/// cannot.
pub fn untakeable(current: &Request, identity: &str, now_ms: i64) -> Option<PlanError> {
    let id = || current.id.clone();
    let Some(changes) = current
        .changes
        .as_ref()
        .filter(|_| current.tool == PLAN_TOOL)
    else {
        return Some(PlanError::NotFound(id()));
    };
    if current.identity != identity {
        return Some(PlanError::OtherIdentity(id()));
    }
    if current.status == Status::Used {
        return Some(PlanError::Used(id()));
    }
    if current.expired(now_ms) {
        return Some(PlanError::Expired(id()));
    }
    match current.status {
        Status::Used | Status::Approved => {}
        Status::Pending => {
            return Some(PlanError::NotApproved {
                id: id(),
                status: "pending",
                what: "an operator must approve it first (`airlock approvals approve ID`, or the person in the client)".into(),
            })
        }
        Status::Denied => {
            return Some(PlanError::NotApproved {
                id: id(),
                status: "denied",
                what: format!(
                    "it was refused{}; change the script and plan again",
                    told_reason(current)
                ),
            })
        }
    }
    if plan::list_hash(changes) != current.args_hash || plan::table(changes) != current.summary {
        return Some(PlanError::Tampered(id()));
    }
    None
}

/// Who refused a request, as its requester is told: the person in the
/// requester's own MCP client (who declined or withdrew it), or an
/// operator, by whom and why. An agent told "an operator denied" when
/// its own person said no would wait for, or argue with, the wrong
/// people.
pub fn denial(r: &Request) -> String {
    match r.decided_via.as_deref() {
        Some(via) if via == Channel::Client.as_str() => format!(
            "the person in the client declined this exact call (request {})",
            r.id
        ),
        _ => format!(
            "an operator denied this exact call (request {}){}",
            r.id,
            told_reason(r)
        ),
    }
}

/// ` by WHO: "REASON"`, as a requester is told why a request was refused:
/// the decider and their reason, escaped (a person's words, shown to an
/// agent as data), or nothing when neither is known.
pub fn told_reason(r: &Request) -> String {
    let mut out = String::new();
    if let Some(by) = &r.decided_by {
        out.push_str(&format!(" by {}", airlock_catalog::visible::visible(by)));
    }
    if let Some(reason) = &r.reason {
        out.push_str(&format!(
            ": \"{}\"",
            airlock_catalog::visible::visible(reason)
        ));
    }
    out
}

/// Reads a plan's stored changes; `None` for a single call's row.
pub fn parse_changes(text: Option<String>) -> Option<Vec<PlannedChange>> {
    // Unreadable changes read as an empty list: its hash then differs
    // from the filed one, and taking it is refused as tampered.
    text.map(|t| serde_json::from_str(&t).unwrap_or_default())
}

pub fn changes_text(r: &Request) -> Option<String> {
    r.changes
        .as_ref()
        .map(|c| serde_json::to_string(c).expect("changes serialize"))
}

/// Why `decider` cannot move `current` to `to` at `now_ms`, if they
/// cannot.
pub fn undecidable(
    current: &Request,
    decider: &Decider,
    now_ms: i64,
    to: Status,
) -> Option<ApprovalError> {
    if let Some(refused) = refusal(current, decider, to) {
        return Some(refused);
    }
    if current.status != Status::Pending {
        return Some(ApprovalError::NotPending {
            id: current.id.clone(),
            status: current.status.as_str(),
        });
    }
    if current.expired(now_ms) {
        return Some(ApprovalError::Expired(current.id.clone()));
    }
    None
}

/// A new pending request for `asked`.
pub fn single_request(id: String, asked: &Asked<'_>, now_ms: i64, ttl_ms: i64) -> Request {
    Request {
        id,
        identity: asked.identity.into(),
        tool: asked.tool.into(),
        tool_key: Some(asked.tool_key.into()),
        args_hash: asked.args_hash.into(),
        summary: asked.summary.into(),
        detail: asked.detail.map(str::to_string),
        status: Status::Pending,
        created_ms: now_ms,
        expires_ms: now_ms + ttl_ms,
        decided_by: None,
        decided_via: None,
        changes: None,
        reason: None,
    }
}

/// 32 random bytes for a new summary key.
pub fn new_key() -> Result<[u8; 32], ApprovalError> {
    let mut key = [0u8; 32];
    getrandom::fill(&mut key)
        .map_err(|e| ApprovalError::Storage(format!("no randomness for a key: {e}")))?;
    Ok(key)
}

/// A stored summary key, checked for its length.
pub fn key_of(stored: &[u8]) -> Result<[u8; 32], ApprovalError> {
    stored.try_into().map_err(|_| {
        ApprovalError::Storage(format!(
            "the stored summary key has {} bytes, not 32",
            stored.len()
        ))
    })
}

pub fn new_id() -> Result<String, ApprovalError> {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes)
        .map_err(|e| ApprovalError::Storage(format!("no randomness for an id: {e}")))?;
    Ok(format!("ap-{}", hex::encode(bytes)))
}

// The stores' shared behaviour is tested once for both in `airlock-state`
// (`tests/state.rs`); here, the four-eyes rule alone.
#[cfg(test)]
mod tests {
    use super::*;

    fn request(identity: &str) -> Request {
        Request {
            id: "ap-1".into(),
            identity: identity.into(),
            tool: "vm_stop".into(),
            tool_key: None,
            args_hash: "h".into(),
            summary: String::new(),
            detail: None,
            status: Status::Pending,
            created_ms: 0,
            expires_ms: 1,
            decided_by: None,
            decided_via: None,
            changes: None,
            reason: None,
        }
    }

    #[test]
    fn a_reason_is_kept_whole_or_refused() {
        let d = Decider::cli("rita")
            .with_reason("  not in the change window \n")
            .unwrap();
        assert_eq!(d.reason.as_deref(), Some("not in the change window"));
        assert_eq!(
            Decider::cli("rita").with_reason("   ").unwrap().reason,
            None
        );
        let long = "x".repeat(MAX_REASON_CHARS + 1);
        let e = Decider::cli("rita").with_reason(&long).unwrap_err();
        assert_eq!(
            e,
            ApprovalError::ReasonTooLong {
                chars: MAX_REASON_CHARS + 1,
                limit: MAX_REASON_CHARS
            }
        );
        assert!(e.to_string().contains("500"), "{e}");
        // What the requester is told escapes the decider's words.
        let mut r = request("olga");
        r.decided_by = Some("rita".into());
        r.reason = Some("no\u{1b}[31m \"quoted\"".into());
        let told = told_reason(&r);
        assert!(told.starts_with(" by rita: \""), "{told}");
        assert!(!told.contains('\u{1b}'), "{told}");
    }

    #[test]
    fn nobody_approves_their_own_request_unless_allowed() {
        let r = request("olga");
        let approve = Status::Approved;
        assert!(refusal(&r, &Decider::client("olga", false), approve).is_some());
        assert!(refusal(&r, &Decider::cli("olga"), approve).is_some());
        assert!(refusal(&r, &Decider::client("olga", true), approve).is_none());
        assert!(refusal(&r, &Decider::cli("rita"), approve).is_none());
        assert!(
            refusal(&r, &Decider::client("olga", false), Status::Denied).is_none(),
            "refusing one's own request is always allowed"
        );
        let e = refusal(&r, &Decider::cli("olga"), approve).unwrap();
        assert!(e.to_string().contains("approve_own"), "{e}");
    }
}
