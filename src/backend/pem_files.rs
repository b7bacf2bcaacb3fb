//! The PEM files a backend URL names for TLS (`cacert=`, `cert=`, `key=`, `sslrootcert=`,
//! `ssl-ca=`, which may also be one DER certificate), read before anything connects: a file that
//! holds no certificate, or a certificate that does not parse, or a `key=` without a private key,
//! is a usage error naming the option and the file, instead of a handshake failure (exit 69) or,
//! worse, a message blaming the system's certificate store.

use std::path::Path;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// The option whose file may also be one DER certificate (the MySQL driver takes either).
const DER_TOO: &str = "ssl-ca";

/// What is wrong with the file `path` that option `option` names, if anything: `key` must hold a
/// private key; any other option a CA bundle or a client certificate, every certificate in it
/// well formed.
pub fn problem(option: &str, path: &Path) -> Option<String> {
    let shown = path.display();
    if option == "key" {
        return PrivateKeyDer::from_pem_file(path).err().map(|e| {
            format!("the {option}= file {shown} of --backend holds no private key ({e})")
        });
    }
    let certificates = match CertificateDer::pem_file_iter(path) {
        Ok(found) => found.collect::<Result<Vec<_>, _>>(),
        Err(e) => Err(e),
    };
    let certificates = match certificates {
        Ok(certificates) => certificates,
        Err(e) => {
            return Some(format!(
                "the {option}= file {shown} of --backend is not PEM ({e})"
            ));
        }
    };
    if certificates.is_empty() && option == DER_TOO {
        // One DER certificate, the whole file, as the MySQL driver also reads it.
        let whole = std::fs::read(path).unwrap_or_default();
        return rustls::RootCertStore::empty()
            .add(CertificateDer::from(whole))
            .err()
            .map(|_| {
                format!("the {option}= file {shown} of --backend holds no PEM or DER certificate")
            });
    }
    if certificates.is_empty() {
        return Some(format!(
            "the {option}= file {shown} of --backend holds no PEM certificate"
        ));
    }
    let mut store = rustls::RootCertStore::empty();
    certificates.into_iter().find_map(|certificate| {
        store.add(certificate).err().map(|e| {
            format!("the {option}= file {shown} of --backend holds a certificate that does not parse ({e})")
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problem_with(option: &str, text: &str) -> Option<String> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.pem");
        std::fs::write(&path, text).unwrap();
        problem(option, &path)
    }

    #[test]
    fn a_file_without_what_its_option_takes_is_named_with_its_option() {
        let err = problem_with("cacert", "not a certificate\n").unwrap();
        assert!(
            err.contains("cacert= file") && err.contains("no PEM certificate"),
            "{err}"
        );
        let err = problem_with("sslrootcert", "").unwrap();
        assert!(err.contains("no PEM certificate"), "{err}");
        let garbled = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        let err = problem_with("ssl-ca", garbled).unwrap();
        assert!(err.contains("does not parse"), "{err}");
        let err = problem_with("ssl-ca", "not a certificate\n").unwrap();
        assert!(err.contains("no PEM or DER certificate"), "{err}");
        let err = problem_with("key", garbled).unwrap();
        assert!(
            err.contains("key= file") && err.contains("no private key"),
            "{err}"
        );
    }
}
