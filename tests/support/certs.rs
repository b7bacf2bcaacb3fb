//! Throw-away TLS certificates made with `openssl`: a private authority (`ca.crt`) and a server
//! certificate for `localhost` and `127.0.0.1` signed by it (`server.crt`, `server.key`, the key
//! mode 0600). Callers check [`super::tools::openssl`] first (or ask [`Certificates::if_openssl`]);
//! a failure here fails the test.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Certificates in a directory of their own, removed on drop.
pub struct Certificates {
    dir: tempfile::TempDir,
}

impl Certificates {
    /// A fresh set when the machine has a working `openssl` (see [`super::tools::openssl`]:
    /// `None` only where tests may skip).
    pub fn if_openssl() -> Option<Self> {
        super::tools::openssl().then(Self::make)
    }

    pub fn make() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        make_in(dir.path());
        Certificates { dir }
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A file of the set: `ca.crt`, `server.crt` or `server.key`.
    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

/// Makes the authority and the server certificate in `dir`.
pub fn make_in(dir: &Path) {
    let openssl = |line: &str| {
        let out = Command::new("openssl")
            .args(line.split(' '))
            .current_dir(dir)
            .output()
            .expect("run openssl");
        assert!(
            out.status.success(),
            "openssl {line} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let key = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    std::fs::write(
        dir.join("san.cnf"),
        "subjectAltName=DNS:localhost,IP:127.0.0.1\n",
    )
    .expect("write san.cnf");
    openssl(&format!(
        "req -x509 {key} -days 2 -keyout ca.key -out ca.crt -subj /CN=lockrun-test-ca"
    ));
    openssl(&format!(
        "req {key} -keyout server.key -out server.csr -subj /CN=localhost"
    ));
    openssl(
        "x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out server.crt \
         -days 2 -extfile san.cnf",
    );
    std::fs::set_permissions(
        dir.join("server.key"),
        std::fs::Permissions::from_mode(0o600),
    )
    .expect("key mode");
}
