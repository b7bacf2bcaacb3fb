//! Networked backend URLs, split once: `scheme://[user[:password]@]host[:port][,host[:port]…]
//! [/path][?key=value&…]` — and the one display form that every message, `status` and the drill
//! show, with the password replaced by `***`.
//!
//! Passwords are often typed without percent-encoding, so the credentials end at the *last* `@`:
//! a password may hold `/ # ? @ :` as written (`redis://u:pa/ss@h`). A `@` in a query value must
//! be written `%40`. Nothing of what stands between `://` and that last `@` ever reaches a message
//! except the user name, including when the rest of the URL turns out to be malformed: errors are
//! worded with [`Url::shown`], or with [`redact`] for text that could not be split at all.
//!
//! Each backend turns a [`Url`] into its own typed settings (`Settings::parse`), and judges the
//! hosts, path and query there; this module knows nothing of any one backend. The settings hand
//! the URL's [`UrlForms`] (as given, as shown, its secrets) to the rest of lockrun.

use percent_encoding::percent_decode_str;

/// Query keys whose values are secrets (compared after decoding, ignoring case): `password`,
/// libpq's `sslpassword`, and anything else that names a password, a secret, a token or
/// credentials, so that one written under a key lockrun does not take (`?auth=`, `?token=`,
/// `?aws_secret_access_key=`) is hidden from the error that refuses it.
fn is_secret_key(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    ["password", "passwd", "secret", "token", "credential"]
        .iter()
        .any(|word| key.contains(word))
        || matches!(key.as_str(), "pass" | "pw" | "pwd" | "auth")
}

/// One `host[:port]` of a URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostPort {
    /// The host as written (an IPv6 address keeps its brackets).
    pub host: String,
    pub port: Option<u16>,
}

impl HostPort {
    /// `host:port`, with `default` when the URL gave no port.
    pub fn with_default(&self, default: u16) -> String {
        format!("{}:{}", self.host, self.port.unwrap_or(default))
    }

    /// The host without IPv6 brackets, as a resolver wants it.
    pub fn bare_host(&self) -> &str {
        self.host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(&self.host)
    }
}

/// A split URL. Values are percent-decoded; the password is kept only here and in the secrets
/// list, never in [`Url::shown`].
#[derive(Clone, Debug)]
pub struct Url {
    pub scheme: String,
    pub user: Option<String>,
    pub password: Option<String>,
    /// Zero or more endpoints; each backend says how many it needs.
    pub hosts: Vec<HostPort>,
    /// The path without its leading `/`, decoded.
    pub path: String,
    /// Query pairs in order, keys and values decoded.
    pub query: Vec<(String, String)>,
    forms: UrlForms,
    /// Query keys written as `key=value` (a bare word is no option name).
    named_keys: Vec<String>,
}

/// A backend URL in the forms the rest of lockrun sees: as given, password included (only for
/// handing to another lockrun through a private file); as shown, the password replaced (the only
/// form messages and `status` show); and every form of every secret it holds, for scrubbing
/// messages.
#[derive(Clone, Debug)]
pub struct UrlForms {
    given: String,
    shown: String,
    secrets: Vec<String>,
}

impl UrlForms {
    /// Text that holds no secret: given and shown alike.
    pub fn public(text: String) -> Self {
        UrlForms {
            given: text.clone(),
            shown: text,
            secrets: Vec::new(),
        }
    }

    /// The URL as given, password included.
    pub fn given(&self) -> &str {
        &self.given
    }

    /// The URL with its password replaced by `***`.
    pub fn shown(&self) -> &str {
        &self.shown
    }

    /// Every form of every secret in the URL, longest first; empty when none.
    pub fn secrets(&self) -> &[String] {
        &self.secrets
    }
}

/// Whether `key` looks like an option's name.
fn is_option_name(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= 40
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// How a scheme reads credentials without a `:`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LoneUserinfo {
    /// `scheme://name@host`: a user name (PostgreSQL, etcd).
    User,
    /// `scheme://secret@host`: a password, as `redis-cli` reads it.
    Password,
}

impl Url {
    /// Splits `raw`. The error is a reason fragment; the caller words it with [`redact`]`(raw)`,
    /// which is safe for any text.
    pub fn split(raw: &str, lone: LoneUserinfo) -> Result<Url, String> {
        let (scheme, rest) = raw
            .split_once("://")
            .filter(|(scheme, _)| is_scheme(scheme))
            .ok_or("expected scheme://host")?;
        let (userinfo, after) = match rest.rfind('@') {
            Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
            None => (None, rest),
        };
        if let Some(bad) = userinfo.and_then(|info| info.chars().find(|c| "/?#@".contains(*c))) {
            return Err(format!(
                "the user or password holds an unencoded {bad:?}: write it as {}",
                encoded(bad)
            ));
        }
        let stray = |part: &str| {
            format!("{part} holds a % that does not start a %XX escape: write % as %25")
        };
        if userinfo.is_some_and(|info| !escapes_are_whole(info)) {
            return Err(stray("the user or password"));
        }
        if after.contains('#') {
            return Err("a URL fragment (#…) is not allowed; write # in a value as %23".into());
        }
        let end = after.find(['/', '?']).unwrap_or(after.len());
        let (authority, tail) = after.split_at(end);
        let (path, query) = match tail.split_once('?') {
            Some((path, query)) => (path, query),
            None => (tail, ""),
        };
        if !escapes_are_whole(path) {
            return Err(stray("the path"));
        }
        if !escapes_are_whole(query) {
            return Err(stray("an option"));
        }
        let hosts = if authority.is_empty() {
            Vec::new()
        } else {
            authority
                .split(',')
                .map(|text| parse_host_port(text, userinfo.is_some()))
                .collect::<Result<Vec<_>, _>>()?
        };
        let (user, password) = match userinfo {
            None => (None, None),
            Some(info) => match info.split_once(':') {
                Some((user, password)) => (
                    Some(credential(user, "user name")?),
                    Some(credential(password, "password")?),
                ),
                None if lone == LoneUserinfo::Password => {
                    (None, Some(credential(info, "password")?))
                }
                None => (Some(credential(info, "user name")?), None),
            },
        };
        let query = query
            .split('&')
            .filter(|pair| !pair.is_empty())
            .map(|pair| {
                let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
                (decode(key), decode(value))
            })
            .collect::<Vec<_>>();
        let mut secrets = Vec::new();
        if let Some((_, written)) = userinfo.and_then(|info| info.split_once(':')) {
            secrets.push(written.to_owned());
        } else if let (Some(info), LoneUserinfo::Password) = (userinfo, lone) {
            secrets.push(info.to_owned());
        }
        secrets.extend(password.clone());
        for (key, value) in &query {
            if is_secret_key(key) {
                secrets.push(value.clone());
            }
        }
        // Raw query values too, as written, in case a client echoes them undecoded.
        for pair in query_raw(rest) {
            if let Some((key, value)) = pair.split_once('=')
                && is_secret_key(&decode(key))
            {
                secrets.push(value.to_owned());
            }
        }
        secrets.retain(|s| !s.is_empty());
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        secrets.dedup();
        let shown = format!(
            "{scheme}://{}{authority}{}",
            shown_userinfo(userinfo, lone),
            shown_tail(path, query_raw(rest))
        );
        // Keys an error may name: written `key=value`, and before any secret (what follows a
        // secret may be the rest of it, after an unencoded `&`).
        let named_keys = query_raw(rest)
            .iter()
            .map_while(|pair| {
                let (key, _) = pair.split_once('=')?;
                let key = decode(key);
                (!is_secret_key(&key)).then_some(key)
            })
            .collect();
        Ok(Url {
            named_keys,
            scheme: scheme.to_owned(),
            user,
            password,
            hosts,
            path: decode(path.strip_prefix('/').unwrap_or(path)),
            query,
            forms: UrlForms {
                given: raw.to_owned(),
                shown,
                secrets,
            },
        })
    }

    /// The URL as given, as shown, and its secrets.
    pub fn forms(&self) -> &UrlForms {
        &self.forms
    }

    /// The URL with its password replaced by `***`: the only form a message may show.
    pub fn shown(&self) -> &str {
        self.forms.shown()
    }

    /// Every form of every secret in the URL, longest first, for scrubbing messages.
    pub fn secrets(&self) -> &[String] {
        self.forms.secrets()
    }

    /// The value of query key `key` (the last one wins), if given.
    pub fn param(&self, key: &str) -> Option<&str> {
        self.query
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Fails on the first query key not in `known`, naming it and the keys the backend takes.
    pub fn only_params(&self, known: &[&str]) -> Result<(), String> {
        match self
            .query
            .iter()
            .find(|(k, _)| !known.contains(&k.as_str()))
        {
            None => Ok(()),
            Some((key, _)) => Err(format!(
                "unknown option {}; {} URLs take {}",
                match self.named_keys.contains(key) && is_option_name(key) {
                    true => format!("{key:?}"),
                    false => "(not shown: it may hold part of a password; encode & as %26)".into(),
                },
                self.scheme,
                match known {
                    [] => "no options".to_owned(),
                    _ => known
                        .iter()
                        .map(|k| format!("{k}="))
                        .collect::<Vec<_>>()
                        .join(", "),
                }
            )),
        }
    }
}

/// The query part of what follows `://`, as written, split into pairs.
fn query_raw(rest: &str) -> Vec<&str> {
    let after = rest.rfind('@').map_or(rest, |at| &rest[at + 1..]);
    match after.split_once('?') {
        Some((_, query)) => query.split('&').filter(|p| !p.is_empty()).collect(),
        None => Vec::new(),
    }
}

fn shown_userinfo(userinfo: Option<&str>, lone: LoneUserinfo) -> String {
    match userinfo {
        None => String::new(),
        // Where a lone userinfo is a password (redis), any of it may be: none of it shows.
        Some(_) if lone == LoneUserinfo::Password => "***@".to_owned(),
        Some(info) => match info.split_once(':') {
            Some((user, _)) => format!("{}:***@", shown_user(user)),
            None if lone == LoneUserinfo::Password => "***@".to_owned(),
            None => format!("{}@", shown_user(info)),
        },
    }
}

/// A user name as shown: kept when it is plain, hidden when it looks like it holds more than a
/// name (a mistyped URL can put part of a password there).
fn shown_user(user: &str) -> &str {
    let plain = user
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b'%' | b'+'));
    if plain { user } else { "***" }
}

fn shown_tail(path: &str, query: Vec<&str>) -> String {
    if query.is_empty() {
        return path.to_owned();
    }
    // After a secret's key nothing more is shown: a password with an unencoded `&` runs on into
    // what look like further options. A bare word (no `=`) is no option either.
    let mut pairs: Vec<String> = Vec::new();
    for pair in query {
        match pair.split_once('=') {
            Some((key, _)) if is_secret_key(&decode(key)) => {
                pairs.push(format!("{key}=***"));
                break;
            }
            Some(_) => pairs.push(pair.to_owned()),
            None => pairs.push("***".to_owned()),
        }
    }
    format!("{path}?{}", pairs.join("&"))
}

/// One `HOST[:PORT]` given apart from a URL's authority (a URL option naming another server);
/// errors quote it, prefixed with `key`.
pub fn host_port(key: &str, text: &str) -> Result<HostPort, String> {
    parse_host_port(text, true).map_err(|e| format!("{key} {e}"))
}

/// Parses one `HOST[:PORT]`. `after_userinfo` says that the URL had an `@` before it: then the
/// text can only be an endpoint, and errors quote it. Without one, a broken endpoint may be
/// credentials whose `@HOST` was left out (`redis://:hunter2`), so errors quote none of it.
fn parse_host_port(text: &str, after_userinfo: bool) -> Result<HostPort, String> {
    let endpoint = match after_userinfo {
        true => format!("endpoint {text:?}"),
        false => "an endpoint".to_owned(),
    };
    let credentials_hint = match after_userinfo || !text.contains(':') {
        true => "",
        false => " (a user and password go before an @, as in USER:PASSWORD@HOST)",
    };
    let (host, port) = if let Some(rest) = text.strip_prefix('[') {
        let (inside, after) = rest
            .split_once(']')
            .ok_or_else(|| format!("{endpoint}: unclosed [ in an IPv6 address"))?;
        let port = match after {
            "" => None,
            _ => Some(
                after
                    .strip_prefix(':')
                    .ok_or_else(|| format!("{endpoint}: expected :PORT after the IPv6 address"))?,
            ),
        };
        // An IPv6 address, with an optional `%zone`.
        let valid = inside.contains(':')
            && inside.bytes().all(|b| {
                b.is_ascii_alphanumeric() || matches!(b, b':' | b'.' | b'%' | b'-' | b'_')
            });
        if !valid {
            return Err(format!("{endpoint}: no IPv6 address inside [ ]"));
        }
        (format!("[{inside}]"), port)
    } else {
        let (host, port) = match text.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (text, None),
        };
        // A name or an IPv4 address: a `:` left in it is a second port, or an IPv6 address
        // without its brackets; either way, not something to look up by name.
        if host.contains(':') && after_userinfo {
            return Err(format!(
                "{endpoint}: more than one :PORT (write an IPv6 address as [ADDRESS]:PORT)"
            ));
        }
        let valid = !host.is_empty()
            && host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'));
        if !valid {
            return Err(format!("{endpoint} has no valid host{credentials_hint}"));
        }
        (host.to_owned(), port)
    };
    let port = match port {
        None => None,
        Some(p) => Some(port_number(p).ok_or_else(|| match after_userinfo {
            true => format!("{endpoint}: port {p:?} is not 1-65535"),
            false => format!("{endpoint} has a port that is not 1-65535{credentials_hint}"),
        })?),
    };
    Ok(HostPort { host, port })
}

/// A TCP port written as a number: 1 to 65535.
pub fn port_number(text: &str) -> Option<u16> {
    text.parse::<u16>().ok().filter(|&p| p > 0)
}

/// Whether every `%` in `text` starts a `%XX` escape (two hex digits), as a URL's credentials,
/// path and options must: a stray one is refused rather than guessed at, as libpq does.
fn escapes_are_whole(text: &str) -> bool {
    let bytes = text.as_bytes();
    bytes.iter().enumerate().all(|(i, &b)| {
        b != b'%'
            || (bytes.get(i + 1).is_some_and(u8::is_ascii_hexdigit)
                && bytes.get(i + 2).is_some_and(u8::is_ascii_hexdigit))
    })
}

/// `%XX` escapes decoded (a `+` stays a `+`, as libpq and redis-cli read it); [`Url::split`] has
/// refused malformed escapes, which elsewhere are kept as written.
pub fn decode(raw: &str) -> String {
    percent_decode_str(raw).decode_utf8_lossy().into_owned()
}

/// A user name or password with its `%XX` escapes decoded. Bytes that are not UTF-8 are refused
/// rather than replaced: every client takes credentials as text, and two passwords that differ only
/// there would otherwise become the same one (ZooKeeper: the same identity).
fn credential(raw: &str, what: &str) -> Result<String, String> {
    percent_decode_str(raw)
        .decode_utf8()
        .map(std::borrow::Cow::into_owned)
        .map_err(|_| format!("the {what} is not UTF-8 once its %XX escapes are decoded"))
}

/// How a reserved character is written inside a URL's credentials.
fn encoded(c: char) -> &'static str {
    match c {
        '/' => "%2F",
        '?' => "%3F",
        '#' => "%23",
        '@' => "%40",
        _ => "%XX",
    }
}

/// Whether `text` can be a URL scheme (RFC 3986: a letter, then letters, digits, `+`, `-`, `.`).
pub fn is_scheme(text: &str) -> bool {
    text.starts_with(|c: char| c.is_ascii_alphabetic())
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

/// The authority of `raw` as written, from after `scheme://` up to the first `/`, `?` or `#`;
/// `None` when there is no scheme or the text holds an `@` (credentials). For a backend whose
/// authority is not a host (a DynamoDB table) to word the error of a URL that does not split.
pub fn written_authority(raw: &str) -> Option<&str> {
    let (scheme, rest) = raw.split_once("://")?;
    if !is_scheme(scheme) || rest.contains('@') {
        return None;
    }
    Some(&rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())])
}

/// Any text that may be a URL, safe to show: the credentials of a URL that splits are replaced
/// as in [`Url::shown`]; of anything else only the scheme (when there is one) and what follows the
/// last `@` (when there is one) remain, so a password typed in any shape never shows.
pub fn redact(raw: &str) -> String {
    for lone in [LoneUserinfo::User, LoneUserinfo::Password] {
        if let Ok(url) = Url::split(raw, lone) {
            let redis_like = url.scheme.starts_with("redis") || url.scheme == "redlock";
            if (lone == LoneUserinfo::Password) == redis_like {
                return url.forms.shown;
            }
        }
    }
    let (scheme, rest) = match raw.split_once("://") {
        Some((scheme, rest)) if is_scheme(scheme) => (format!("{scheme}://"), rest),
        _ => (String::new(), raw),
    };
    // Text that does not split as a URL: where a password may be anywhere in it, nothing but the
    // scheme shows; otherwise what follows the last `@`.
    if decode(raw).to_ascii_lowercase().contains("password") {
        return format!("{scheme}…");
    }
    // Without an `@`, the text may be credentials whose `@HOST` was left out: none of it shows.
    match rest.rsplit_once('@') {
        Some((_, after)) => format!("{scheme}***@{after}"),
        None => format!("{scheme}…"),
    }
}

/// Test support: parses each of `bad` with `parse`, checks that each fails without showing the
/// password `hunter2` the test URLs carry, and returns the errors for further checks.
#[cfg(test)]
pub fn refused_without_password<T: std::fmt::Debug>(
    parse: impl Fn(&str) -> Result<T, String>,
    bad: &[&str],
) -> Vec<String> {
    bad.iter()
        .map(|raw| {
            let err = parse(raw).expect_err(raw);
            assert!(!err.contains("hunter2"), "{raw}: {err}");
            err
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(raw: &str) -> Url {
        Url::split(raw, LoneUserinfo::User).unwrap()
    }

    #[test]
    fn splits_credentials_hosts_path_and_query() {
        let url = split("etcd://u:p%40ss@a:1,[::1]:2,b/x%2Fy?cacert=%2Fca.pem&k");
        assert_eq!(url.scheme, "etcd");
        assert_eq!(url.user.as_deref(), Some("u"));
        assert_eq!(url.password.as_deref(), Some("p@ss"));
        assert_eq!(
            url.hosts,
            [
                HostPort {
                    host: "a".into(),
                    port: Some(1)
                },
                HostPort {
                    host: "[::1]".into(),
                    port: Some(2)
                },
                HostPort {
                    host: "b".into(),
                    port: None
                },
            ]
        );
        assert_eq!(url.hosts[1].bare_host(), "::1");
        assert_eq!(url.path, "x/y");
        assert_eq!(url.param("cacert"), Some("/ca.pem"));
        assert_eq!(url.param("k"), Some(""));
        assert_eq!(
            url.shown(),
            "etcd://u:***@a:1,[::1]:2,b/x%2Fy?cacert=%2Fca.pem&***"
        );
    }

    #[test]
    fn unencoded_delimiters_in_a_password_are_refused_without_showing_it() {
        for raw in [
            "redis://u:Xy/zzy@h:1",
            "redis://u:Xy#zzy@h:1",
            "redis://u:Xy?zzy@h:1",
            "redis://u:Xy@zzy@h:1",
        ] {
            let err = Url::split(raw, LoneUserinfo::User).unwrap_err();
            assert!(
                !err.contains("Xy") && !err.contains("zzy") && err.contains('%'),
                "{raw}: {err}"
            );
            assert_eq!(redact(raw), "redis://***@h:1", "{raw}");
        }
        let url = split("redis://u:pa:ss%2F@h:1");
        assert_eq!(url.password.as_deref(), Some("pa:ss/"));
        assert_eq!(url.shown(), "redis://u:***@h:1");
        let url = Url::split("redis://u:pa:ss%2F@h:1", LoneUserinfo::Password).unwrap();
        assert_eq!(url.shown(), "redis://***@h:1");
    }

    #[test]
    fn a_lone_userinfo_is_a_password_where_the_scheme_says_so() {
        let url = Url::split("redis://secret@h", LoneUserinfo::Password).unwrap();
        assert_eq!(url.user, None);
        assert_eq!(url.password.as_deref(), Some("secret"));
        assert_eq!(url.shown(), "redis://***@h");
        assert_eq!(split("postgres://app@h/db").shown(), "postgres://app@h/db");
    }

    #[test]
    fn secret_query_values_are_hidden_even_when_their_key_is_encoded() {
        let url = split("postgres://h/db?user=x&pass%77ord=pw&sslpassword=k");
        assert_eq!(url.shown(), "postgres://h/db?user=x&pass%77ord=***");
        assert!(url.secrets().iter().any(|s| s == "pw"));
        assert!(url.secrets().iter().any(|s| s == "k"));
    }

    #[test]
    fn malformed_urls_fail_without_their_secrets() {
        for raw in [
            "redis://u:hunter2@h:99999",
            "redis://u:hunter2@:1",
            "redis://u:hunter2@h:1#frag",
            "redis://u:hunter2@[::1",
            "nonsense",
            // Credentials whose @HOST was left out: nothing after :// may show.
            "redis://:hunter2",
            "redis://:hunter2/x",
            "redis://:hunter2#x",
            "postgres://u:hunter2?x",
            "etcd://root:hunter2#x",
            "zk://app:hunter2/x/y",
            "redis://[:hunter2",
            "hunter2",
            // A second port, a bracketless IPv6 address, malformed %-escapes.
            "redis://u:hunter2@127.0.0.1:1:1",
            "redis://u:hunter2@::1:6379",
            "redis://u:hunter2@[zz]:1",
            "redis://u:hunter2%ZZ@h:1",
            "redis://u:%zzhunter2%@h:1",
            "postgres://u:hunter2@h/db%",
            "postgres://u@h/db?password=hunter2%G1",
        ] {
            for lone in [LoneUserinfo::User, LoneUserinfo::Password] {
                let err = Url::split(raw, lone).map(|_| ()).unwrap_err();
                assert!(!err.contains("hunter2"), "{raw}: {err}");
            }
            assert!(!redact(raw).contains("hunter2"), "{raw}: {}", redact(raw));
        }
        let err = Url::split("redis://:hunter2", LoneUserinfo::User).map(|_| ());
        assert!(err.unwrap_err().contains("USER:PASSWORD@HOST"));
    }

    #[test]
    fn redact_hides_every_shape_of_password() {
        for (raw, shown) in [
            ("redis://u:pw@h:1/0", "redis://***@h:1/0"),
            ("redis://:pw@h", "redis://***@h"),
            ("redis://pw@h", "redis://***@h"),
            ("postgres://app@h/db", "postgres://app@h/db"),
            ("postgres://app:pw@h/db", "postgres://app:***@h/db"),
            ("etcd://u:p@a:1,b:2", "etcd://u:***@a:1,b:2"),
            ("file:///x", "file:///x"),
            ("admin:pw@redis.local", "***@redis.local"),
            ("x:pw@h,redis://y", "***@h,redis://y"),
            ("redis://u:pw@h:0", "redis://***@h:0"),
            ("plain text", "…"),
            ("h:1/db?user=u&password=pw&x", "…"),
            ("redis://h/db?password=a@b&c", "redis://…"),
        ] {
            assert_eq!(redact(raw), shown, "{raw}");
        }
    }

    #[test]
    fn credentials_that_are_not_utf8_are_refused_not_replaced() {
        for raw in [
            "zk://u:Hunter2%FF@h:1",
            "zk://u%FE:pw@h:1",
            "redis://:Hunter2%80@h",
        ] {
            let err = Url::split(raw, LoneUserinfo::User).map(|_| ()).unwrap_err();
            assert!(err.contains("not UTF-8"), "{raw}: {err}");
            assert!(!err.contains("Hunter2"), "{err}");
        }
        let url = split("zk://u:p%C3%A9@h:1");
        assert_eq!(url.password.as_deref(), Some("pé"));
    }

    #[test]
    fn values_under_keys_that_name_a_secret_are_hidden() {
        for key in [
            "auth",
            "token",
            "aws_secret_access_key",
            "passwd",
            "pw",
            "Credentials",
        ] {
            let url = split(&format!("zk://h:1?{key}=u:Hunter2&x=1"));
            assert!(!url.forms().shown().contains("Hunter2"), "{key}");
            let err = url.only_params(&[]).unwrap_err();
            assert!(!err.contains("Hunter2"), "{key}: {err}");
        }
        let url = split("postgres://h/db?sslmode=require&application_name=app");
        assert!(url.forms().shown().contains("application_name=app"));
    }

    #[test]
    fn unknown_options_are_named_unless_they_may_be_a_password() {
        let url = split("etcd://u:hunter2@h:1?tls=1");
        let err = url.only_params(&["cacert", "cert", "key"]).unwrap_err();
        assert!(err.contains("\"tls\"") && err.contains("cacert="), "{err}");
        assert!(!err.contains("hunter2"));
        let url = split("postgres://h/db?password=Xy&zzy");
        let err = url.only_params(&["password"]).unwrap_err();
        assert!(!err.contains("zzy"), "{err}");
    }
}
