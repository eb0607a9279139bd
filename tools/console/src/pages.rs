//! The pages, as HTML that maud escapes: every value a request carries
//! was chosen by an agent or a backend, so it is shown as text, with
//! control and invisible characters spelled out (`visible`), never as
//! markup. No page has a script; the decisions are plain forms.

use airlock_catalog::visible::visible;
use airlock_gateway::{
    approval::{Request, Status},
    plan::PlannedChange,
};
use maud::{html, Markup, DOCTYPE};

use crate::{config::Role, sessions::Session};

/// The one stylesheet, served from `/console/style.css` (the page's
/// Content-Security-Policy allows no inline style).
pub const STYLE: &str = "\
body{font:15px/1.45 system-ui,sans-serif;margin:0;color:#1b1f24;background:#f6f7f9}\
header{display:flex;gap:1em;align-items:center;padding:.6em 1.2em;background:#1b1f24;color:#fff}\
header a{color:#fff;font-weight:600;text-decoration:none}header .who{margin-left:auto}\
header form{display:inline}main{padding:1.2em;max-width:72em}\
header nav{display:flex;gap:1em}header nav a{font-weight:400}\
form.search{display:flex;gap:.5em;flex-wrap:wrap;align-items:flex-end;margin-bottom:1em}\
form.search input{width:11em}.verdict.ok{color:#1a7f37}.verdict.broken{color:#cf222e;font-weight:600}\
details summary{cursor:pointer}\
table{border-collapse:collapse;width:100%;background:#fff}\
th,td{border:1px solid #d0d7de;padding:.35em .5em;text-align:left;vertical-align:top}\
td.args,pre{font-family:ui-monospace,monospace;font-size:13px;white-space:pre-wrap;word-break:break-all}\
.status{font-weight:600}.pending{color:#9a6700}.approved{color:#1a7f37}.denied{color:#cf222e}.used{color:#57606a}\
.note{background:#fff8c5;border:1px solid #d4a72c;padding:.5em .8em}\
.error{background:#ffebe9;border:1px solid #cf222e;padding:.5em .8em}\
form.decide{margin-top:1em;display:flex;gap:.6em;align-items:flex-end;flex-wrap:wrap}\
textarea{width:28em;height:4em}button{padding:.35em 1em}\
a.button{display:inline-block;padding:.45em 1.1em;background:#1b1f24;color:#fff;border-radius:4px;text-decoration:none}";

pub(crate) fn layout(title: &str, who: Option<&Session>, body: Markup) -> Markup {
    layout_reloading(title, who, body, None)
}

/// How often the request list reloads itself (no script: the browser's
/// own refresh), so a request filed meanwhile shows up.
pub const LIST_REFRESH_SECS: u64 = 15;

fn layout_reloading(
    title: &str,
    who: Option<&Session>,
    body: Markup,
    every_secs: Option<u64>,
) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                @if let Some(secs) = every_secs { meta http-equiv="refresh" content=(secs); }
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " — Airlock console" }
                link rel="stylesheet" href="/console/style.css";
            }
            body {
                header {
                    a href="/console" { "Airlock console" }
                    @if who.is_some() {
                        nav {
                            a href="/console" { "Requests" }
                            a href="/console/executions" { "Executions" }
                            a href="/console/audit" { "Audit trail" }
                        }
                    }
                    @if let Some(s) = who {
                        span.who { (visible(&s.identity)) " · " (s.role.as_str()) }
                        form method="post" action="/console/logout" {
                            input type="hidden" name="csrf" value=(s.csrf);
                            button type="submit" { "Sign out" }
                        }
                    }
                }
                main { (body) }
            }
        }
    }
}

/// The page the provider's sign-in ends on: it moves on to the console
/// at once. A redirect would not do: the browser arrives here from the
/// provider's site, and would not send the SameSite=Strict session
/// cookie along a redirect that began there; a page of our own that
/// moves on is same-site.
pub fn signed_in(identity: &str) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta http-equiv="refresh" content="0; url=/console";
                title { "Signed in — Airlock console" }
                link rel="stylesheet" href="/console/style.css";
            }
            body {
                main {
                    p.note { "Signed in as " (visible(identity)) ". " a href="/console" { "Continue to the console" } }
                }
            }
        }
    }
}

/// A page that only says something (a refusal, a result).
pub fn message(title: &str, who: Option<&Session>, text: &str, error: bool) -> Markup {
    layout(
        title,
        who,
        html! {
            h1 { (title) }
            p class=(if error { "error" } else { "note" }) { (text) }
            p { a href="/console" { "Back to the requests" } }
        },
    )
}

pub fn login(problem: Option<&str>, provider: bool) -> Markup {
    layout(
        "Sign in",
        None,
        html! {
            h1 { "Sign in" }
            @if let Some(p) = problem { p.error { (p) } }
            @if provider {
                // A link, not a form: the CSP's form-action would stop a
                // form's redirect to the provider.
                p { a.button href="/console/oidc/start" { "Sign in with your organisation's account" } }
                p { "Or with a console key:" }
            }
            form method="post" action="/console/login" {
                p {
                    label for="key" { "Your console key (from " code { "airlock enroll IDENTITY --console" } ")" }
                    br;
                    input id="key" name="key" type="password" autocomplete="off" size="72" required;
                }
                button type="submit" { "Sign in" }
            }
        },
    )
}

fn expires_in(r: &Request, now_ms: i64) -> String {
    let left = (r.expires_ms - now_ms).max(0) / 1000;
    if left == 0 {
        "expired".into()
    } else {
        format!("{}m{:02}s", left / 60, left % 60)
    }
}

fn what(r: &Request) -> Markup {
    match &r.changes {
        Some(changes) => {
            let n = changes.iter().filter(|c| c.is_change()).count();
            html! { "plan of " (n) " change" @if n != 1 { "s" } }
        }
        None => html! { code { (visible(&r.tool)) } },
    }
}

/// The most requests one page lists; the rest are counted, for the
/// person to decide these first (or list them all with `airlock
/// approvals list`).
pub const LIST_LIMIT: usize = 200;

/// The requests still open, newest first.
pub fn list(who: &Session, requests: &[Request], now_ms: i64) -> Markup {
    let more = requests.len().saturating_sub(LIST_LIMIT);
    let requests = &requests[..requests.len().min(LIST_LIMIT)];
    layout_reloading(
        "Requests",
        Some(who),
        html! {
            h1 { "Requests waiting or approved" }
            p { small { "This list reloads itself every " (LIST_REFRESH_SECS) " s." } }
            @if more > 0 {
                p.note { (more) " more, older, are not listed here: decide these first, or list them all with " code { "airlock approvals list" } "." }
            }
            @if requests.is_empty() {
                p { "Nothing is waiting for a decision." }
            } @else {
                table {
                    thead { tr { th { "id" } th { "asked by" } th { "what" } th { "arguments" } th { "status" } th { "expires in" } } }
                    tbody {
                        @for r in requests {
                            tr {
                                td { a href={ "/console/requests/" (r.id) } { (visible(&r.id)) } }
                                td { (visible(&r.identity)) }
                                td { (what(r)) }
                                td.args { @if r.changes.is_none() { (visible(&r.summary)) } }
                                td { span class={ "status " (r.status.as_str()) } { (r.status.as_str()) } }
                                td { (expires_in(r, now_ms)) }
                            }
                        }
                    }
                }
            }
        },
        Some(LIST_REFRESH_SECS),
    )
}

fn change_rows(changes: &[PlannedChange]) -> Markup {
    html! {
        table {
            thead { tr { th { "#" } th { "tool" } th { "acts on" } th { "tier" } th { "needs approval" } th { "arguments, as they will be sent" } } }
            tbody {
                @for c in changes {
                    tr {
                        td { (c.n) @if let Some(w) = c.waits_on { " (reads change " (w) "'s task)" } }
                        td { code { (visible(&c.tool)) } br; small { (visible(if c.key.is_empty() { &c.tool } else { &c.key })) } }
                        td { (visible(&c.target)) }
                        td { (c.tier.as_str()) }
                        td { @if c.needs_approval { "yes" } @else { "no" } }
                        td.args { (visible(c.detail.as_deref().unwrap_or(&c.summary))) }
                    }
                }
            }
        }
    }
}

/// What deciding offers `who` for `r`.
pub enum Offer {
    /// Approve or deny.
    Both,
    /// Deny only: `who` asked, and may not approve their own.
    DenyOnly,
    /// Nothing: not an approver, or the request is not pending.
    Nothing,
}

pub fn request(who: &Session, r: &Request, offer: Offer, now_ms: i64) -> Markup {
    layout(
        &format!("Request {}", visible(&r.id)),
        Some(who),
        html! {
            h1 { "Request " (visible(&r.id)) }
            table {
                tr { th { "asked by" } td { (visible(&r.identity)) } }
                tr { th { "status" } td { span class={ "status " (r.status.as_str()) } { (r.status.as_str()) } } }
                tr { th { "expires in" } td { (expires_in(r, now_ms)) } }
                @if let Some(by) = &r.decided_by {
                    tr { th { "decided by" } td { (visible(by)) " (" (visible(r.decided_via.as_deref().unwrap_or("unknown channel"))) ")" } }
                }
                @if let Some(reason) = &r.reason {
                    tr { th { "reason" } td { (visible(reason)) } }
                }
                @if r.changes.is_none() {
                    tr { th { "tool" } td { code { (visible(&r.tool)) } " " small { (visible(r.tool_key.as_deref().unwrap_or(""))) } } }
                    tr { th { "arguments, as they will be sent" } td.args { (visible(r.detail.as_deref().unwrap_or(&r.summary))) } }
                }
            }
            @if let Some(changes) = &r.changes {
                h2 { "The plan's steps, approved or denied as a whole" }
                (change_rows(changes))
            }
            @match offer {
                Offer::Both | Offer::DenyOnly => {
                    form.decide method="post" action={ "/console/requests/" (r.id) "/decide" } {
                        input type="hidden" name="csrf" value=(who.csrf);
                        label { "Reason (told to the requester, kept in the audit)" br;
                            textarea name="reason" maxlength="500" {} }
                        @if matches!(offer, Offer::Both) {
                            button type="submit" name="decision" value="approve" { "Approve" }
                        }
                        button type="submit" name="decision" value="deny" { "Deny" }
                    }
                    @if matches!(offer, Offer::DenyOnly) {
                        p.note { "You asked for this: another person must approve it. You may withdraw it by denying." }
                    }
                }
                Offer::Nothing => {
                    @if r.status == Status::Pending && who.role != Role::Approver {
                        p.note { "Only approvers decide requests." }
                    }
                }
            }
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(n: usize, summary: &str) -> Request {
        Request {
            id: format!("ap-{n:016x}"),
            identity: "alice".into(),
            tool: "vm_stop".into(),
            tool_key: Some("pve:POST /nodes/{node}/qemu/{vmid}/status/stop".into()),
            args_hash: "h".into(),
            summary: summary.into(),
            detail: None,
            status: Status::Pending,
            created_ms: 0,
            expires_ms: 60_000,
            decided_by: None,
            decided_via: None,
            changes: None,
            reason: None,
        }
    }

    fn who() -> Session {
        Session {
            identity: "rita".into(),
            role: Role::Approver,
            key_sha256: String::new(),
            provider: false,
            groups: Vec::new(),
            csrf: "c".repeat(64),
            expires_ms: 1,
        }
    }

    #[test]
    fn a_long_list_is_cut_and_says_how_much_is_left() {
        let many: Vec<Request> = (0..LIST_LIMIT + 5).map(|n| request(n, "vmid=1")).collect();
        let page = list(&who(), &many, 0).into_string();
        assert_eq!(
            page.matches("<tr>").count(),
            LIST_LIMIT + 1,
            "a header and 200 rows"
        );
        assert!(page.contains("5 more, older"), "{page}");
        assert!(
            page.contains(&format!(
                "<meta http-equiv=\"refresh\" content=\"{LIST_REFRESH_SECS}\">"
            )),
            "the list reloads itself"
        );
        let one = request(1, "vmid=1");
        let page = super::request(&who(), &one, Offer::Both, 0).into_string();
        assert!(
            !page.contains("refresh"),
            "a page with a form never reloads under the person"
        );
    }

    #[test]
    fn what_an_agent_chose_is_text_never_markup() {
        let r = request(
            1,
            "name=<script>alert(1)</script>\u{1b}[2J \" onmouseover=x",
        );
        let page = list(&who(), std::slice::from_ref(&r), 0).into_string();
        assert!(!page.contains("<script>alert"), "{page}");
        assert!(page.contains("&lt;script&gt;"), "{page}");
        assert!(!page.contains('\u{1b}'), "{page}");
        let page = request_page(&r);
        assert!(
            !page.contains("<script>alert") && !page.contains("\" onmouseover"),
            "{page}"
        );
    }

    fn request_page(r: &Request) -> String {
        super::request(&who(), r, Offer::Both, 0).into_string()
    }
}
