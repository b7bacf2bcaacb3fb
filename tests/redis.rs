//! What only the `redis://` backend has: `rediss://` with certificate checks. Everything it shares
//! with the other backends is in the conformance suite.

use crate::support::asserts::assert_said;
use crate::support::certs::Certificates;
use crate::support::lockrun::{lockrun, output};
use crate::support::redis_server::RedisServer;
use crate::support::single_server::SingleServer;
use crate::support::wait::{code, text};

#[test]
fn rediss_connects_with_a_trusted_certificate_and_refuses_an_unknown_one() {
    let Some(certs) = Certificates::if_openssl() else {
        return;
    };
    let server = RedisServer::with_tls(certs.dir());
    let url = format!("rediss://localhost:{}", server.port());
    let trusted = output(
        lockrun()
            .env("SSL_CERT_FILE", certs.file("ca.crt"))
            .args(["--backend", &url, "--name", "tls", "--", "sh", "-c"])
            .arg("test -n \"$FENCING_TOKEN\""),
    );
    assert_eq!(code(&trusted), 0, "{}", text(&trusted.stderr));
    let untrusted = output(
        lockrun()
            .env_remove("SSL_CERT_FILE")
            .env_remove("SSL_CERT_DIR")
            .args([
                "--backend",
                &url,
                "--name",
                "tls",
                "--",
                "touch",
                "/nonexistent/ran",
            ]),
    );
    assert_eq!(code(&untrusted), 69, "{}", text(&untrusted.stderr));
    assert_said(&untrusted, &format!("localhost:{}", server.port()));
}
