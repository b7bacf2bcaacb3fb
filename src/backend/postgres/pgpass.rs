//! The password file libpq reads (`~/.pgpass`, or `PGPASSFILE`), for a URL and environment that
//! give no password: lines of `hostname:port:database:username:password`, `*` matching anything,
//! `\:` and `\\` escaping, `#` starting a comment. As libpq does, a file that the group or others
//! may read is ignored (with a warning), and a socket host is matched as `localhost`.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use tokio_postgres::Config;
use tokio_postgres::config::Host;

/// The password for the first host of `config`, if the password file has one.
pub fn lookup(config: &Config) -> Option<String> {
    let path = match std::env::var_os("PGPASSFILE").filter(|v| !v.is_empty()) {
        Some(path) => PathBuf::from(path),
        None => PathBuf::from(std::env::var_os("HOME")?).join(".pgpass"),
    };
    let meta = std::fs::metadata(&path).ok()?;
    if !meta.is_file() {
        return None;
    }
    if meta.permissions().mode() & 0o077 != 0 {
        crate::warn!(
            "ignoring the password file {}: the group or others can read it (chmod 0600 it)",
            path.display()
        );
        return None;
    }
    let text = std::fs::read_to_string(&path).ok()?;
    let host = match config.get_hosts().first()? {
        Host::Tcp(name) => name.clone(),
        Host::Unix(_) => "localhost".to_owned(),
    };
    let port = config
        .get_ports()
        .first()
        .copied()
        .unwrap_or(5432)
        .to_string();
    let wanted = [
        host.as_str(),
        port.as_str(),
        config.get_dbname().unwrap_or_default(),
        config.get_user().unwrap_or_default(),
    ];
    find(&text, wanted)
}

/// The password of the first line of `text` whose four fields match `wanted`.
fn find(text: &str, wanted: [&str; 4]) -> Option<String> {
    for line in text.lines() {
        if line.trim_start().starts_with('#') {
            continue;
        }
        let fields = split(line);
        let [host, port, db, user, password] = fields.as_slice() else {
            continue;
        };
        let matches = [host, port, db, user]
            .iter()
            .zip(wanted)
            .all(|(field, want)| field.as_str() == "*" || field.as_str() == want);
        if matches {
            return Some(password.clone());
        }
    }
    None
}

/// The `:`-separated fields of a line, with `\` escapes resolved; the fifth field (the
/// password) keeps any further `:`.
fn split(line: &str) -> Vec<String> {
    let mut fields = Vec::new();
    let mut current = String::new();
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => current.extend(chars.next()),
            ':' if fields.len() < 4 => fields.push(std::mem::take(&mut current)),
            c => current.push(c),
        }
    }
    fields.push(current);
    fields
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_first_matching_line_with_wildcards_and_escapes() {
        let text = "# comment\n\
                    other:5432:db:app:nope\n\
                    h:*:db:app:pa\\:ss\\\\word:tail\n\
                    *:*:*:*:fallback\n";
        assert_eq!(
            find(text, ["h", "5432", "db", "app"]).as_deref(),
            Some("pa:ss\\word:tail")
        );
        assert_eq!(
            find(text, ["x", "1", "y", "z"]).as_deref(),
            Some("fallback")
        );
        assert_eq!(find("h:1:db\n", ["h", "1", "db", "u"]), None);
    }
}
