//! The one contract for a function's KEYS. Its header declares them by name, and both sides
//! are built from that declaration: the library puts `local K = { task = KEYS[1], ... }` and a
//! count check in front of the body ([`prologue`]), and an [`crate::library::Invocation`] sends
//! the keys in the declared order. Neither side numbers keys by hand, so they cannot drift.
//!
//! Header syntax (comment lines before the body's first line of code):
//! - `-- KEYS: ready due task (what they hold)` — the fixed keys, in order, up to the first
//!   word that is not a key; further `-- KEYS:` lines continue the list. A name is a key of the slot's layout (`Keys::named`: `ready`, `task` — the
//!   call's task — and so on).
//! - `[claim]` — a group a prelude part declares once (`-- KEYS group claim: ...`).
//! - `<list>` — a key the caller gives by name (`Invocation::given`); the body reads `K.list`.
//! - `-- KEYS per item: task hist` — the keys each item of a batch call adds after the fixed
//!   ones (`Invocation::item`); the body reads them with `item_keys(KEYS, ITEM_KEYS, i)` and
//!   counts them with `item_count(KEYS, ITEM_KEYS)` (prelude.lua), never by index arithmetic.

use std::collections::HashMap;

/// The keys one function declares.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeyDecl {
    /// Fixed keys in KEYS order, groups expanded; a caller-given key keeps its `<…>`.
    pub fixed: Vec<String>,
    /// The keys of each item of a batch call, in order (empty: no items).
    pub per_item: Vec<String>,
}

impl KeyDecl {
    /// The name the Lua body reads a key by (`K.<name>`): the token without `<…>`.
    pub fn lua_name(token: &str) -> &str {
        token
            .strip_prefix('<')
            .and_then(|t| t.strip_suffix('>'))
            .unwrap_or(token)
    }
}

const GROUP: &str = "-- KEYS group ";
const FIXED: &str = "-- KEYS:";
const PER_ITEM: &str = "-- KEYS per item:";

/// `name`, `<name>` or `[group]`, the name in lower case letters, digits and `_`.
fn is_key_token(t: &str) -> bool {
    let inner = t
        .strip_prefix('<')
        .and_then(|t| t.strip_suffix('>'))
        .or_else(|| t.strip_prefix('[').and_then(|t| t.strip_suffix(']')))
        .unwrap_or(t);
    !inner.is_empty()
        && inner
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// The groups the prelude parts declare (`-- KEYS group <name>: keys...`; further lines of the
/// same group continue it).
fn groups(prelude: &[(&str, &str)]) -> HashMap<String, Vec<String>> {
    let mut out: HashMap<String, Vec<String>> = HashMap::new();
    let lines = prelude.iter().flat_map(|(_, src)| src.lines());
    for (name, keys) in lines
        .filter_map(|l| l.strip_prefix(GROUP))
        .filter_map(|rest| rest.split_once(':'))
    {
        out.entry(name.trim().to_string()).or_default().extend(
            keys.split_whitespace()
                .take_while(|t| is_key_token(t))
                .map(str::to_string),
        );
    }
    out
}

/// Parses the header of `source`, with the groups `prelude` declares. An unknown group is an
/// error (a typo would drop keys), and so is a name declared twice.
pub fn parse(source: &str, prelude: &[(&str, &str)]) -> Result<KeyDecl, String> {
    let groups = groups(prelude);
    let mut decl = KeyDecl::default();
    for line in source.lines().take_while(|l| l.starts_with("--")) {
        let (target, rest) = if let Some(rest) = line.strip_prefix(PER_ITEM) {
            (&mut decl.per_item, rest)
        } else if let Some(rest) = line.strip_prefix(FIXED) {
            (&mut decl.fixed, rest)
        } else {
            continue;
        };
        // The list ends at the first word that is not a key (the description that follows).
        for token in rest.split_whitespace().take_while(|t| is_key_token(t)) {
            match token.strip_prefix('[').and_then(|t| t.strip_suffix(']')) {
                Some(group) => target.extend(
                    groups
                        .get(group)
                        .ok_or_else(|| format!("unknown key group [{group}]"))?
                        .iter()
                        .cloned(),
                ),
                None => target.push(token.to_string()),
            }
        }
    }
    let mut seen = std::collections::HashSet::new();
    for token in decl.fixed.iter().chain(&decl.per_item) {
        if !seen.insert(KeyDecl::lua_name(token)) {
            return Err(format!("key {token} declared twice"));
        }
    }
    Ok(decl)
}

/// What the library puts before the body of function `name`: the key count checked before
/// anything runs, then `K` (the fixed keys by name) and, for a batch function, `ITEM_KEYS`
/// (where items start and how many keys each has).
pub fn prologue(name: &str, decl: &KeyDecl) -> String {
    let n = decl.fixed.len();
    let width = decl.per_item.len();
    let mut out = String::new();
    let count_ok = if width == 0 {
        format!("#KEYS == {n}")
    } else {
        format!("#KEYS >= {n} and (#KEYS - {n}) % {width} == 0")
    };
    out.push_str(&format!(
        "if not ({count_ok}) then return redis.error_reply('ERR repoll {}: wrong number of keys') end\n",
        name
    ));
    let fields: Vec<String> = decl
        .fixed
        .iter()
        .enumerate()
        .map(|(i, t)| format!("{} = KEYS[{}]", KeyDecl::lua_name(t), i + 1))
        .collect();
    out.push_str(&format!("local K = {{ {} }}\n", fields.join(", ")));
    if width > 0 {
        out.push_str(&format!(
            "local ITEM_KEYS = {{ first = {}, width = {width} }}\n",
            n + 1
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_parse_with_groups_items_and_given_keys() {
        let prelude = [(
            "p",
            "-- KEYS group claim: ready\n-- KEYS group claim: due\n",
        )];
        let parse = |s| parse(s, &prelude);
        let src = "-- x\n-- KEYS: task <list> (the rest is prose)\n-- KEYS: [claim]\n-- KEYS per item: hist\nlocal a\n-- KEYS: late\n";
        let d = parse(src).unwrap();
        assert_eq!(d.fixed[..2], ["task".to_string(), "<list>".to_string()]);
        assert_eq!(d.fixed[2..], ["ready".to_string(), "due".to_string()]);
        assert_eq!(d.per_item, ["hist"]);
        assert!(parse("-- KEYS: [nope]\n").unwrap_err().contains("[nope]"));
        assert!(parse("-- KEYS: task task\n").unwrap_err().contains("twice"));
        assert_eq!(KeyDecl::lua_name("<list>"), "list");
    }
}
