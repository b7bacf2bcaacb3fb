//! The name of the account lockrun runs as, for holder records and the SQL backends' default
//! user: looked up in `/etc/passwd` itself first, and through the system's name service only when
//! the account is not there.
//!
//! The name service (`getpwuid`) reads `/etc/nsswitch.conf`, asks for `nscd` twice and only then
//! reads `/etc/passwd` — about 0.09 ms of every run on the file backend, whose whole run is about
//! 2 ms (`bench/file_vs_flock.py`). Accounts in a directory service (LDAP, SSSD) are not in
//! `/etc/passwd` and still come from the name service.

use std::os::unix::ffi::OsStrExt;

const PASSWD: &str = "/etc/passwd";

/// The account's name, `$USER` when it has none (a uid without an entry, as in some
/// containers), else `fallback`.
pub fn current_or(fallback: impl FnOnce() -> String) -> String {
    let uid = nix::unistd::getuid();
    std::fs::read(PASSWD)
        .ok()
        .and_then(|passwd| name_in(&passwd, uid.as_raw()))
        .or_else(|| {
            nix::unistd::User::from_uid(uid)
                .ok()
                .flatten()
                .map(|user| user.name)
        })
        .or_else(|| {
            std::env::var_os("USER")
                .filter(|user| !user.is_empty())
                .map(|user| String::from_utf8_lossy(user.as_bytes()).into_owned())
        })
        .unwrap_or_else(fallback)
}

/// The name of the first entry of `passwd` (the `/etc/passwd` format) whose uid is `uid`. Lines
/// that are not entries (NIS `+`/`-` lines, comments, short or broken lines) are passed over.
fn name_in(passwd: &[u8], uid: u32) -> Option<String> {
    passwd.split(|&b| b == b'\n').find_map(|line| {
        let mut fields = line.split(|&b| b == b':');
        let name = fields.next()?;
        let _password = fields.next()?;
        let entry_uid = std::str::from_utf8(fields.next()?)
            .ok()?
            .parse::<u32>()
            .ok()?;
        let valid = !name.is_empty() && !matches!(name[0], b'+' | b'-' | b'#');
        (valid && entry_uid == uid).then(|| String::from_utf8_lossy(name).into_owned())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const PASSWD_TEXT: &[u8] = b"root:x:0:0:root:/root:/bin/bash\n\
        # a comment:x:5:5\n\
        +nis:x:1000:1000::/:/bin/sh\n\
        broken\n\
        half:x:\n\
        ci:x:1000:1000:CI runner:/home/ci:/bin/sh\n\
        also-ci:x:1000:1000::/home/ci:/bin/sh";

    #[test]
    fn the_first_entry_with_the_uid_names_the_account() {
        assert_eq!(name_in(PASSWD_TEXT, 0).as_deref(), Some("root"));
        assert_eq!(name_in(PASSWD_TEXT, 1000).as_deref(), Some("ci"));
        assert_eq!(name_in(PASSWD_TEXT, 5), None);
        assert_eq!(name_in(PASSWD_TEXT, 4242), None);
        assert_eq!(name_in(b"", 0), None);
    }

    #[test]
    fn this_process_has_the_name_the_name_service_gives() {
        let uid = nix::unistd::getuid();
        let expected = nix::unistd::User::from_uid(uid).unwrap().map(|u| u.name);
        if let Some(expected) = expected {
            assert_eq!(current_or(|| "unknown".into()), expected);
        }
    }
}
