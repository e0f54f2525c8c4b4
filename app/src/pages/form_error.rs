//! The words a server-function form shows when its action failed — only ours.
//!
//! Without JavaScript, Leptos sends a failed form post back to the page with the error in the
//! URL (`?__path=<fn>&__err=<base64 of "ServerError|<message>">`), and the page's action
//! starts out with that error. Anyone can write such a URL: a link to
//! `/admin/login?__err=…"Our service moved. Sign in at https://evil.example"` would put the
//! attacker's sentence on our sign-in page (escaped, but a phishing aid all the same). So an
//! error that came from the URL is shown only when it is one of our own messages — the
//! templates below, whose only free parts are numbers and words from fixed lists — and as
//! [`GENERIC`] otherwise. An error the action got from its own call to the server (with
//! JavaScript) is our server's answer and is shown as it came.
//!
//! The templates are the messages of the form-posted server functions (`sign_in`, `sign_out`,
//! `act`, `bulk_act`, `submit_query`) and of the checks they share; the tests below feed the
//! real messages of the query rules through, so a reworded one is noticed.

use leptos::prelude::*;
use leptos::server_fn::ServerFn;

/// What is shown for an error that is not one of ours.
pub const GENERIC: &str = "The request failed; try again.";

/// Our messages. `{n}`: a number; `{hex}`: 4 to 6 upper-case hex digits; `{a|b|c}`: one of
/// the words listed.
const OURS: &[&str] = &[
    // Every admin server function (crate::auth::guard, crate::context).
    "sign in required",
    "not allowed: this account is read-only",
    model::REDIS_UNREACHABLE,
    "server misconfigured",
    // sign_in.
    "wrong password",
    "too many attempts; wait a minute",
    "busy; try again in a moment",
    // act.
    "bad task id",
    "bad worker id",
    "unknown action",
    "unknown purge target",
    "not purged: type \"{dead|results|history|queued}\" to confirm",
    "the action failed; see the server log",
    // bulk_act and its filter.
    "{retry|cancel|purge} does not apply to {dead|waiting|ready|leased} tasks",
    "nothing done: no task matches the filter now",
    "nothing done: {n} tasks match, more than the {n} one bulk action may touch (REPOLL_BULK_LIMIT); narrow the filter",
    "nothing done: {n} tasks match now, more than the {n} shown; look at the count again",
    "nothing done: another bulk {retry|cancel|purge} is running ({n} of {n})",
    "unknown state",
    // bulk_act on ticked rows (issue 29).
    "nothing done: type the number of tasks ({n}) to confirm a {purge|cancel}",
    "nothing done: no task chosen; tick the rows to act on",
    "unknown error class",
    "the error group is not a group key",
    "nothing done: {n} tasks chosen, more than the {n} one bulk action may touch",
    "{error|query} text is longer than 512 characters",
    "the time window is not a number of hours",
    "the time window must be between 0 and 8784 hours",
    "unknown time field",
    "the tenant is not a tenant name (letters, digits and ._:@-) or none",
    // submit_query: the query rules (model::normalise_query) and the page's own refusals.
    "query is empty",
    "query is {n} chars, at most {n} allowed",
    "query contains a control character (U+{hex})",
    // model/src/query_chars.rs `refusal`: its kinds (`invisible_kind`), then its reasons.
    "query contains an invisible character (U+{hex}, {zero width joiner|zero width non-joiner|\
     control character|variation selector|tag character|bidirectional control|format character|\
     default-ignorable character|visible character}){| where no emoji sequence or joining script \
     uses it| outside the letters of a script it separates| after no character it selects a form \
     of| outside a subdivision flag|: characters that show nothing are refused|: tag characters \
     only spell a subdivision flag (U+1F3F4, tag letters, U+E007F)|: a subdivision flag names its \
     region in 3 to 7 tag letters}",
    "tenant: 1 to {n} of letters, digits and ._:@-",
    "Too many queries from your address; try again in {n} s.",
    "the queue is unavailable",
    "internal error",
];

/// An unknown upstream's message names the name asked for and the known ones
/// (`context::UnknownUpstream`): free text, so from the URL only this much of it is shown.
const UNKNOWN_UPSTREAM: &str = "unknown upstream";

/// The text shown for `e` read from the URL: the message when it is one of [`OURS`], else
/// [`GENERIC`].
pub fn from_url(e: &ServerFnError) -> String {
    match e {
        ServerFnError::ServerError(m) if OURS.iter().any(|t| fits(t, m)) => m.clone(),
        ServerFnError::ServerError(m) if m.starts_with("unknown upstream ") => {
            UNKNOWN_UPSTREAM.into()
        }
        _ => GENERIC.into(),
    }
}

/// The text shown for an error the action got from its own call: our server's message; a
/// failure of the call itself (network, decoding) in general words.
pub fn from_call(e: &ServerFnError) -> String {
    match e {
        ServerFnError::ServerError(m) => m.clone(),
        _ => GENERIC.into(),
    }
}

/// The action's last outcome as its form shows it: the value, or the error's text — checked
/// by [`from_url`] while the action has not run on this page (its error then came from the
/// URL), as it came ([`from_call`]) once it has.
pub fn outcome<S>(action: ServerAction<S>) -> Option<Result<S::Output, String>>
where
    S: ServerFn<Error = ServerFnError> + Send + Sync + Clone + 'static,
    S::Output: Clone + Send + Sync + 'static,
{
    let ran = action.version().get() > 0;
    action
        .value()
        .get()
        .map(|r| r.map_err(|e| if ran { from_call(&e) } else { from_url(&e) }))
}

/// The action's error text, if its last outcome is one ([`outcome`]).
pub fn error<S>(action: ServerAction<S>) -> Option<String>
where
    S: ServerFn<Error = ServerFnError> + Send + Sync + Clone + 'static,
    S::Output: Clone + Send + Sync + 'static,
{
    outcome(action).and_then(|r| r.err())
}

/// Whether `msg` is `template` with its slots filled by what they allow.
fn fits(template: &str, msg: &str) -> bool {
    let Some(open) = template.find('{') else {
        return template == msg;
    };
    let Some(msg) = msg.strip_prefix(&template[..open]) else {
        return false;
    };
    let rest = &template[open + 1..];
    let Some(close) = rest.find('}') else {
        return false;
    };
    let (slot, after) = (&rest[..close], &rest[close + 1..]);
    let run = |ok: fn(u8) -> bool, min: usize, max: usize| {
        let n = msg.bytes().take_while(|&b| ok(b)).count();
        (min..=max).contains(&n) && fits(after, &msg[n..])
    };
    match slot {
        "n" => run(|b| b.is_ascii_digit(), 1, 20),
        "hex" => run(|b| b.is_ascii_digit() || (b'A'..=b'F').contains(&b), 4, 6),
        words => words
            .split('|')
            .any(|w| msg.strip_prefix(w).is_some_and(|m| fits(after, m))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shown(m: &str) -> String {
        from_url(&ServerFnError::ServerError(m.into()))
    }

    #[test]
    fn our_messages_are_shown_and_anything_else_is_not() {
        for ours in [
            "wrong password",
            "query is 600 chars, at most 512 allowed",
            "query contains a control character (U+0007)",
            "query contains an invisible character (U+202E, bidirectional control): characters \
             that show nothing are refused",
            "not purged: type \"dead\" to confirm",
            "nothing done: another bulk retry is running (3 of 40)",
            "Too many queries from your address; try again in 7 s.",
        ] {
            assert_eq!(shown(ours), ours);
        }
        for forged in [
            "Our service moved. Sign in at https://evil.example/login",
            "wrong password. Sign in at https://evil.example/login",
            "query is 600 chars, at most 512 allowed https://evil.example",
            "query is 6OO chars, at most 512 allowed",
            "not purged: type \"https://evil.example\" to confirm",
            "nothing done: another bulk evil.example is running (3 of 40)",
            "",
        ] {
            assert_eq!(shown(forged), GENERIC, "{forged:?}");
        }
        assert_eq!(
            shown("unknown upstream \"x\"; known: Sign in at https://evil.example"),
            "unknown upstream"
        );
        // Other kinds of error (a forged `Args|…`, say) say nothing either.
        assert_eq!(
            from_url(&ServerFnError::Args("https://evil.example".into())),
            GENERIC
        );
    }

    /// The query rules' own messages, as `model` words them, survive the round trip: a
    /// reworded rule fails here rather than turning into the generic text on the 422 page.
    #[test]
    fn the_query_rules_messages_are_ours() {
        for bad in [
            String::new(),
            "x".repeat(model::MAX_QUERY_CHARS + 1),
            "a\u{202E}b".into(),
            "a\u{7}b".into(),
        ] {
            let m = model::normalise_query(&bad).unwrap_err().to_string();
            assert_eq!(shown(&m), m, "{bad:?}");
        }
    }
}
