//! The URL template: where `{key}` (and `{callback_url}`) may stand, how a query is put in
//! without changing the URL's shape, and the check that a built URL kept it.

use reqwest::Url;

use super::{truncate, ConfigError, UpstreamError};

/// Stands in for `{key}` while the template itself is parsed (lowercase: hosts are lowercased).
const KEY_MARK: &str = "repoll-key-0mark";
/// Stands for `{callback_url}` while the template is parsed.
const CALLBACK_MARK: &str = "repoll-callback-0mark";
/// The callback placeholder (see [`crate::callback`]).
pub const CALLBACK_PLACEHOLDER: &str = "{callback_url}";

/// The URL template, with where `{key}` sits in it.
#[derive(Clone, Debug)]
pub(super) struct Template {
    pub(super) raw: String,
    /// `{key}` is (also) in the path, where a dot segment would be resolved.
    in_path: bool,
    /// The template's path segments: `Some(fixed)`, or `None` where `{key}` is part of one.
    segments: Vec<Option<String>>,
    /// Scheme, host and port, which no key may change.
    origin: String,
    /// `{callback_url}` stands in the query string: each call carries its task's callback URL.
    pub(super) callback: bool,
}

impl Template {
    /// Checks the template: one or more `{key}`, in the path or the query string only.
    pub(super) fn parse(raw: &str) -> Result<Template, ConfigError> {
        let marks = raw.matches("{key}").count();
        if marks == 0 {
            return Err(ConfigError(format!(
                "the URL template has no {{key}}: {raw}"
            )));
        }
        let callbacks = raw.matches(CALLBACK_PLACEHOLDER).count();
        let url = Url::parse(
            &raw.replace("{key}", KEY_MARK)
                .replace(CALLBACK_PLACEHOLDER, CALLBACK_MARK),
        )
        .map_err(|e| ConfigError(format!("bad URL template: {e}")))?;
        if callbacks > 0 && url.query().map_or(0, |q| q.matches(CALLBACK_MARK).count()) != callbacks
        {
            return Err(ConfigError(
                "{callback_url} may stand in the URL's query string only".into(),
            ));
        }
        let count = |part: Option<&str>| part.map_or(0, |p| p.matches(KEY_MARK).count());
        if count(url.host_str()) + count(Some(url.username())) + count(url.password()) > 0 {
            return Err(ConfigError(
                "{key} may stand in the URL's path or query string, not in its host or user".into(),
            ));
        }
        if count(url.fragment()) > 0 {
            return Err(ConfigError(
                "{key} in the URL's fragment (after '#') is never sent to the server".into(),
            ));
        }
        let in_path = count(Some(url.path()));
        if in_path + count(url.query()) != marks {
            // E.g. `/{key}/..`: parsing the template resolved the key away.
            return Err(ConfigError(format!(
                "a {{key}} is lost when the URL template is parsed: {raw}"
            )));
        }
        let segments = url
            .path_segments()
            .ok_or_else(|| ConfigError(format!("the URL template has no path: {raw}")))?
            .map(|s| (!s.contains(KEY_MARK)).then(|| s.to_string()))
            .collect();
        Ok(Template {
            raw: raw.to_string(),
            in_path: in_path > 0,
            segments,
            origin: url.origin().ascii_serialization(),
            callback: callbacks > 0,
        })
    }

    /// `callback`: the task's callback URL, put where `{callback_url}` stands (percent-encoded;
    /// empty when the task has none).
    pub(super) fn url_for(&self, key: &str, callback: Option<&str>) -> Result<Url, UpstreamError> {
        // Encodes all but `A-Z a-z 0-9 - _ . ~`: `/ ? # % \` and spaces cannot split anything.
        let encoded = urlencoding::encode(key);
        let refuse = || {
            UpstreamError::BadKey(format!(
                "query '{}' cannot be placed in the URL path",
                truncate(key, 80)
            ))
        };
        if self.in_path && is_dot_segment(&encoded) {
            return Err(refuse());
        }
        let raw = if self.callback {
            self.raw.replace(
                CALLBACK_PLACEHOLDER,
                &urlencoding::encode(callback.unwrap_or("")),
            )
        } else {
            self.raw.clone()
        };
        let url = Url::parse(&raw.replace("{key}", &encoded)).map_err(|e| {
            UpstreamError::BadKey(format!(
                "query '{}' does not make a valid URL: {e}",
                truncate(key, 80)
            ))
        })?;
        // Defence in depth: whatever the encoding did, the URL must have the template's shape.
        if !self.has_shape(&url) {
            return Err(refuse());
        }
        Ok(url)
    }

    /// Same origin, same number of path segments, and the fixed segments unchanged.
    fn has_shape(&self, url: &Url) -> bool {
        let same_path = url.path_segments().is_some_and(|built| {
            let built: Vec<&str> = built.collect();
            built.len() == self.segments.len()
                && built
                    .iter()
                    .zip(&self.segments)
                    .all(|(b, t)| t.as_deref().is_none_or(|fixed| fixed == *b))
        });
        same_path && url.origin().ascii_serialization() == self.origin
    }
}

/// `.` or `..`, also percent-encoded (`%2e`, `.%2E`, ...), which URL parsers resolve.
fn is_dot_segment(segment: &str) -> bool {
    let s = segment.to_ascii_lowercase().replace("%2e", ".");
    s == "." || s == ".."
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upstream::client::SHOWN_CALL_MAX;
    use crate::upstream::{Secret, Upstream, UpstreamArgs};

    #[test]
    fn url_is_encoded_and_config_checked() {
        let up = Upstream::new(&UpstreamArgs {
            url: "http://h/q?key={key}".into(),
            ..UpstreamArgs::default()
        })
        .expect("valid");
        assert_eq!(
            up.url_for("a b&c=d/é").expect("url").as_str(),
            "http://h/q?key=a%20b%26c%3Dd%2F%C3%A9"
        );
        for bad in [
            UpstreamArgs {
                url: "http://h/q".into(),
                ..UpstreamArgs::default()
            },
            UpstreamArgs {
                headers: vec!["no colon".into()],
                ..UpstreamArgs::default()
            },
            UpstreamArgs {
                method: "GE T".into(),
                ..UpstreamArgs::default()
            },
        ] {
            assert!(Upstream::new(&bad).is_err(), "{bad:?}");
        }
    }

    const PATH_TEMPLATE: &str = "https://api.example.com/v2/reports/{key}/status";

    fn upstream(url: &str) -> Upstream {
        Upstream::new(&UpstreamArgs {
            url: url.into(),
            ..UpstreamArgs::default()
        })
        .expect(url)
    }

    #[test]
    fn the_shown_call_has_no_query_string_user_info_or_secret() {
        let up = Upstream::new(&UpstreamArgs {
            url:
                "http://ops:hunter22@api.example:8080/v1/sekr3t-token/jobs/{key}?api_key=abc123&q=1"
                    .into(),
            api_key: Some(Secret::new("sekr3t-token")),
            ..UpstreamArgs::default()
        })
        .unwrap();
        assert_eq!(
            up.shown_call("report 7").as_deref(),
            Some("GET http://api.example:8080/v1/***/jobs/report%207")
        );
        let long = "x".repeat(1000);
        let shown = up.shown_call(&long).unwrap();
        assert!(shown.chars().count() <= SHOWN_CALL_MAX + 1 && shown.ends_with('…'));
        let query_key = upstream("http://api.example/poll?q={key}");
        assert_eq!(
            query_key.shown_call("a&b").as_deref(),
            Some("GET http://api.example/poll")
        );
    }

    #[test]
    fn a_query_in_a_path_segment_cannot_change_the_path() {
        let up = upstream(PATH_TEMPLATE);
        for key in [".", ".."] {
            let err = up.url_for(key).expect_err(key);
            assert_eq!(
                err.to_string(),
                format!("query '{key}' cannot be placed in the URL path")
            );
            assert!(err.is_permanent(), "{err:?}");
            assert_eq!(err.kind(), "bad_key");
        }
        // A percent sign is encoded too, so "%2e" arrives as the three characters, no dot.
        for (key, segment) in [
            ("%2e%2E", "%252e%252E"),
            ("%2e", "%252e"),
            ("a/../b", "a%2F..%2Fb"),
            ("a\\b", "a%5Cb"),
            ("?x", "%3Fx"),
            ("#x", "%23x"),
            ("...", "..."),
            ("a b", "a%20b"),
        ] {
            let url = up.url_for(key).expect(key);
            assert_eq!(url.path(), format!("/v2/reports/{segment}/status"), "{key}");
            assert_eq!((url.query(), url.fragment()), (None, None), "{key}");
            assert_eq!(url.host_str(), Some("api.example.com"));
        }
        // Dot segments in any spelling URL parsers resolve.
        for s in [".", "..", "%2e", "%2E", ".%2e", "%2E.", "%2e%2E"] {
            assert!(is_dot_segment(s), "{s}");
        }
        for s in ["...", "a.", "%252e", ""] {
            assert!(!is_dot_segment(s), "{s}");
        }
    }

    #[test]
    fn a_built_url_must_keep_the_template_shape() {
        let t = Template::parse(PATH_TEMPLATE).expect("valid");
        let ok = Url::parse("https://api.example.com/v2/reports/x%2Fy/status").expect("url");
        assert!(t.has_shape(&ok));
        for bad in [
            "https://api.example.com/v2/status",
            "https://api.example.com/v2/reports/a/b/status",
            "https://api.example.com/v2/other/x/status",
            "https://evil.example.com/v2/reports/x/status",
            "http://api.example.com/v2/reports/x/status",
        ] {
            assert!(!t.has_shape(&Url::parse(bad).expect(bad)), "{bad}");
        }
        // Part of a segment: dots are still refused, the rest stays inside the segment.
        let up = upstream("https://api.example.com/v2/id-{key}.json");
        assert!(up.url_for("..").is_err());
        assert_eq!(up.url_for("a/b").expect("url").path(), "/v2/id-a%2Fb.json");
    }

    #[test]
    fn a_callback_url_goes_into_the_query_string_encoded() {
        let up = upstream("https://api.example.com/v2/reports?q={key}&notify={callback_url}");
        assert!(up.wants_callback());
        let url = up
            .template
            .url_for(
                "a b",
                Some("http://repoll.test/api/v1/callbacks/ab.1.2.ff?x=1&y"),
            )
            .expect("url");
        let pairs: Vec<(String, String)> = url.query_pairs().into_owned().collect();
        assert_eq!(
            pairs,
            [
                ("q".to_string(), "a b".to_string()),
                (
                    "notify".to_string(),
                    "http://repoll.test/api/v1/callbacks/ab.1.2.ff?x=1&y".to_string()
                )
            ]
        );
        // Shown calls never carry it (the query string is cut), and a plain template has none.
        assert!(!up.shown_call("k").unwrap().contains("notify"));
        assert!(!upstream("https://api.example.com/r?q={key}").wants_callback());
        // Anywhere but the query string is refused at start.
        for bad in [
            "https://api.example.com/{callback_url}/r?q={key}",
            "https://api.example.com/r?q={key}#{callback_url}",
        ] {
            let args = UpstreamArgs {
                url: bad.into(),
                ..UpstreamArgs::default()
            };
            assert!(Upstream::new(&args).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_query_in_the_query_string_stays_a_value() {
        let up = upstream("https://api.example.com/v2/reports?query={key}&fmt=json");
        for (key, query) in [
            ("..", "query=..&fmt=json"),
            (".", "query=.&fmt=json"),
            ("#x", "query=%23x&fmt=json"),
            ("a&fmt=xml", "query=a%26fmt%3Dxml&fmt=json"),
            ("a/../b", "query=a%2F..%2Fb&fmt=json"),
        ] {
            let url = up.url_for(key).expect(key);
            assert_eq!(url.path(), "/v2/reports", "{key}");
            assert_eq!(url.query(), Some(query), "{key}");
            assert_eq!(url.fragment(), None, "{key}");
        }
    }

    #[test]
    fn key_in_the_host_user_or_fragment_is_refused_at_start() {
        for url in [
            "https://{key}.example.com/v2/reports",
            "https://{key}/v2",
            "https://{key}@api.example.com/v2",
            "https://api.example.com/v2#{key}",
            "https://api.example.com/v2/{key}/../x",
            "https://api.example.com/v2/reports",
        ] {
            let err = Upstream::new(&UpstreamArgs {
                url: url.into(),
                ..UpstreamArgs::default()
            })
            .expect_err(url);
            assert!(err.0.contains("{key}"), "{url}: {err}");
        }
        // Path and query together are fine.
        let up = upstream("https://api.example.com/v2/{key}?q={key}");
        assert_eq!(
            up.url_for("a/b").expect("url").as_str(),
            "https://api.example.com/v2/a%2Fb?q=a%2Fb"
        );
        assert!(up.url_for("..").is_err());
    }
}
