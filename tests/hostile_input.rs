//! Hostile input: names, backend URLs and durations generated at random (from a fixed seed, so a
//! failure reproduces) never panic the parsers, and through the real binary every bad one is a
//! single-line usage error (exit 64) that runs nothing and never echoes a password. Every URL
//! checked for its password carries one, in any of the forms a password can take (`user:pw@`,
//! `pw@` without a scheme, `?password=`), with the characters that break URLs around it.

use std::path::Path;

use crate::support::certs::Certificates;
use crate::support::lockrun::{lockrun, output};
use crate::support::scene::Scene;
use crate::support::wait::{code, text};
use lockrun::backend::BackendSpec;
use lockrun::name::LockName;

/// xorshift64*: small, deterministic, good enough to spread inputs.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// A string of up to `max` pieces drawn from `pieces`.
    fn string(&mut self, pieces: &[&str], max: usize) -> String {
        let len = self.below(max + 1);
        (0..len).map(|_| pieces[self.below(pieces.len())]).collect()
    }
}

const NAME_PIECES: &[&str] = &[
    "a",
    "Z",
    "0",
    ".",
    "..",
    "/",
    "//",
    "_",
    ":",
    "-",
    " ",
    "\t",
    "%",
    "@",
    "~",
    "*",
    "{",
    "}",
    "\\",
    "é",
    "\u{202e}",
    "\0",
    "\n",
    "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
];

const URL_PIECES: &[&str] = &[
    "file://",
    "redis://",
    "rediss://",
    "redlock://",
    "etcd://",
    "zk://",
    "postgres://",
    "mysql://",
    "ftp://",
    "://",
    ":",
    "@",
    "/",
    "?",
    "&",
    "=",
    "#",
    "%",
    "%2",
    "%zz",
    "%40",
    "localhost",
    "127.0.0.1",
    "[::1]",
    "h",
    ":6379",
    ":0",
    ":99999",
    ",",
    "user",
    "pw",
    "hunter2",
    "..",
    " ",
    "\n",
    "sslmode=",
    "lockrun_schema=",
    "listen=",
    "lockrun_table_prefix=",
    "ssl-mode=",
    "cacert=",
    "é",
];

/// The password every generated URL carries; no other piece contains it.
const PASSWORD: &str = "Pw9Secret";

const SCHEMES: &[&str] = &[
    "redis://",
    "rediss://",
    "etcd://",
    "zk://",
    "postgres://",
    "postgresql://",
    "mysql://",
    "dynamodb://",
    "file://",
    "ftp://",
    "",
];

/// What may surround the password: the characters that end a URL's authority early, and more.
const PASSWORD_PIECES: &[&str] = &["/", "#", "?", "@", ":", "%", "%40", ",", "=", "&", " ", "x"];

/// Host, path and query pieces for URLs that carry [`PASSWORD`].
const REST_PIECES: &[&str] = &[
    "127.0.0.1",
    "h",
    ":6379",
    ":1",
    ",h:2",
    "/",
    "/db",
    "?",
    "&",
    "=",
    "#",
    "@",
    "%",
    "sslmode=require",
    "ssl-mode=REQUIRED",
    "cacert=",
];

impl Rng {
    /// A backend URL that carries [`PASSWORD`] in one of the forms a password takes.
    fn url_with_password(&mut self) -> String {
        let scheme = SCHEMES[self.below(SCHEMES.len())];
        let password = format!(
            "{}{PASSWORD}{}",
            self.string(PASSWORD_PIECES, 2),
            self.string(PASSWORD_PIECES, 2)
        );
        let rest = self.string(REST_PIECES, 4);
        // A lone userinfo is a password where redis-cli reads it so, and without a scheme;
        // elsewhere it is a user name.
        let lone_is_password = matches!(scheme, "" | "redis://" | "rediss://");
        match self.below(3) {
            1 if lone_is_password => format!("{scheme}{password}@{rest}"),
            2 => format!("{scheme}h:1/db?user=u&password={password}&{rest}"),
            _ => format!("{scheme}user:{password}@{rest}"),
        }
    }
}

const DURATION_PIECES: &[&str] = &[
    "0",
    "1",
    "9",
    "15",
    "500",
    "ms",
    "s",
    "m",
    "h",
    "d",
    "us",
    "ns",
    " ",
    ".",
    "-",
    "+",
    "e",
    "x",
    "99999999999999999999",
    "sec",
    "min",
];

#[test]
fn parsers_never_panic_on_random_input() {
    let mut rng = Rng(0x5eed_1234_abcd_ef01);
    for _ in 0..20_000 {
        let name = rng.string(NAME_PIECES, 12);
        if let Err(e) = LockName::parse(&name) {
            assert!(!e.contains('\n'), "{name:?}: {e:?}");
        }
        let url = rng.string(URL_PIECES, 10);
        if let Err(e) = BackendSpec::parse(&url) {
            assert!(!e.contains('\n') || url.contains('\n'), "{url:?}: {e:?}");
        }
        let url = rng.url_with_password();
        let shown = match BackendSpec::parse(&url) {
            Ok(spec) => spec.shown().to_owned(),
            Err(e) => e,
        };
        assert!(
            !shown.contains(PASSWORD),
            "{url:?} leaked its password: {shown}"
        );
        let duration = rng.string(DURATION_PIECES, 5);
        let _ = lockrun::config::duration("--ttl", &duration);
    }
}

#[test]
fn random_bad_input_through_the_binary_is_one_line_exit_64_and_runs_nothing() {
    let env = Scene::file();
    let marker = env.path("ran");
    let mut rng = Rng(0xfeed_0000_0000_0042);
    let mut tried = 0;
    while tried < 60 {
        let (flag, value) = match rng.below(3) {
            0 => ("--name", rng.string(NAME_PIECES, 6)),
            1 => ("--ttl", rng.string(DURATION_PIECES, 3)),
            _ => ("--backend", rng.url_with_password()),
        };
        // Only inputs the parsers refuse; the valid ones would run the command by design.
        let valid = match flag {
            "--name" => LockName::parse(&value).is_ok(),
            "--ttl" => lockrun::config::duration("--ttl", &value).is_ok(),
            _ => BackendSpec::parse(&value).is_ok(),
        };
        if valid || value.contains('\0') {
            continue;
        }
        tried += 1;
        let mut cmd = lockrun();
        if flag != "--backend" {
            cmd.arg("--backend").arg(env.url());
        }
        if flag != "--name" {
            cmd.args(["--name", "x"]);
        }
        let out = output(
            cmd.arg(flag)
                .arg(&value)
                .arg("--")
                .arg("touch")
                .arg(&marker),
        );
        let stderr = text(&out.stderr);
        assert_eq!(code(&out), 64, "{flag} {value:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{flag} {value:?}: {stderr}");
        assert!(
            !stderr.contains(PASSWORD),
            "{flag} {value:?} leaked: {stderr}"
        );
        if !value.contains('\n') {
            assert_eq!(stderr.lines().count(), 1, "{flag} {value:?}: {stderr}");
        }
        assert!(!marker.exists(), "{flag} {value:?} ran the command");
    }
}

/// Guards two ways a secret reached a usage error or a server: a value under a query key that
/// names a secret (`?auth=`, `?token=`, `&aws_secret_access_key=`) was echoed when lockrun
/// refused the unknown option, and credentials that are not UTF-8 once decoded were replaced
/// (`%FF` and `%FE` became the same password). Each is refused with 64 in one line that does not
/// contain the secret, and nothing runs.
#[test]
fn secret_options_and_credentials_that_are_not_utf8_are_refused_without_the_secret() {
    let env = Scene::file();
    let marker = env.path("ran");
    for url in [
        format!("zk://127.0.0.1:1?auth=u:{PASSWORD}"),
        format!("redlock://127.0.0.1:1,127.0.0.1:2,127.0.0.1:3?token={PASSWORD}"),
        format!("dynamodb://t?endpoint=http://127.0.0.1:1&aws_secret_access_key={PASSWORD}"),
        format!("zk://u:{PASSWORD}%FF@127.0.0.1:1"),
        format!("redis://:{PASSWORD}%80@127.0.0.1:1"),
        format!("postgres://u%FE:{PASSWORD}@127.0.0.1:1/db"),
    ] {
        let out = output(
            lockrun()
                .args(["--backend", &url, "--name", "x", "--", "touch"])
                .arg(&marker),
        );
        assert_refused(&out, &url, "", &marker);
    }
}

/// Asserts that `out` (of a run of `what`) is a usage error (64) in one line that names
/// `naming` and not [`PASSWORD`], and that the command, which would have made `marker`, never
/// ran.
fn assert_refused(out: &std::process::Output, what: &str, naming: &str, marker: &Path) {
    let stderr = text(&out.stderr);
    assert_eq!(code(out), 64, "{what}: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "{what}: {stderr}");
    assert!(stderr.contains(naming), "{what}: {stderr}");
    assert!(!stderr.contains(PASSWORD), "{what} leaked: {stderr}");
    assert!(!marker.exists(), "{what} ran the command");
}

/// Guards against a Redlock URL that names one server twice (`localhost` and `127.0.0.1` on one
/// port) being taken for a backend failure (69): its vote would count twice, which no retry
/// mends, so it is a usage error (64) in one line, for a run as for a look, and nothing runs.
/// Found by looking the names up; nothing is connected to.
#[test]
fn a_redlock_master_named_twice_under_two_names_is_a_usage_error() {
    let env = Scene::file();
    let marker = env.path("ran");
    let url = format!("redlock://:{PASSWORD}@localhost:1,127.0.0.1:1,127.0.0.2:1");
    let touch = marker.to_str().unwrap();
    for args in [
        vec!["--name", "x", "--", "touch", touch],
        vec!["status", "x"],
    ] {
        let out = output(lockrun().args(["--backend", &url]).args(&args));
        assert_refused(&out, &format!("{args:?}"), "same server", &marker);
    }
}

/// Guards against a TLS file that holds no certificate (or a `key=` without a key) being found
/// only at the handshake, as an unreachable backend (69), or blamed on the system: PostgreSQL
/// said "no trusted certificate authority … pass sslrootcert=PATH" for an `sslrootcert=` file
/// that held none. Each is a usage error (64) in one line naming its option, and nothing runs.
/// Certificates made by `openssl` pass the check: those runs get as far as connecting to a
/// loopback port nobody serves (69).
#[test]
fn tls_files_that_hold_no_certificate_or_key_are_usage_errors() {
    let env = Scene::file();
    let marker = env.path("ran");
    let garbage = env.path("garbage.pem");
    std::fs::write(&garbage, "not a certificate\n").unwrap();
    let urls = |ca: &Path, cert: &Path, key: &Path| {
        let (ca, cert, key) = (ca.display(), cert.display(), key.display());
        [
            (
                "cacert",
                format!("etcd://u:{PASSWORD}@127.0.0.1:1?cacert={ca}"),
            ),
            // With every file bad, the first named is the one refused.
            (
                "cacert",
                format!("etcd://127.0.0.1:1?cacert={ca}&cert={cert}&key={key}"),
            ),
            (
                "sslrootcert",
                format!(
                    "postgres://u:{PASSWORD}@127.0.0.1:1/db?sslmode=verify-full&sslrootcert={ca}"
                ),
            ),
            (
                "ssl-ca",
                format!("mysql://u:{PASSWORD}@127.0.0.1:1/db?ssl-mode=VERIFY_CA&ssl-ca={ca}"),
            ),
        ]
    };
    let run = |url: &str| {
        let touch = marker.to_str().unwrap();
        output(lockrun().args(["--backend", url, "--name", "x", "--", "touch", touch]))
    };
    for (option, url) in urls(&garbage, &garbage, &garbage) {
        assert_refused(&run(&url), &url, &format!("the {option}= file"), &marker);
    }
    let Some(certs) = Certificates::if_openssl() else {
        return;
    };
    let (ca, cert, key) = (
        certs.file("ca.crt"),
        certs.file("server.crt"),
        certs.file("server.key"),
    );
    // A good authority with a bad client certificate, then a good certificate with a bad key.
    for (option, cert, key) in [("cert", &garbage, &key), ("key", &cert, &garbage)] {
        let url = format!(
            "etcd://127.0.0.1:1?cacert={}&cert={}&key={}",
            ca.display(),
            cert.display(),
            key.display()
        );
        assert_refused(&run(&url), &url, &format!("the {option}= file"), &marker);
    }
    // The MySQL driver also reads a CA file that is one DER certificate.
    let der = certs.file("ca.der");
    let converted = std::process::Command::new("openssl")
        .args(["x509", "-outform", "der", "-in"])
        .arg(&ca)
        .arg("-out")
        .arg(&der)
        .status()
        .unwrap();
    assert!(converted.success());
    let der_url = format!(
        "mysql://u@127.0.0.1:1/db?ssl-mode=VERIFY_CA&ssl-ca={}",
        der.display()
    );
    for url in urls(&ca, &cert, &key)
        .into_iter()
        .map(|(_, url)| url)
        .chain([der_url])
    {
        let out = run(&url);
        assert_eq!(code(&out), 69, "{url}: {}", text(&out.stderr));
        assert!(!marker.exists(), "{url} ran the command");
    }
}
