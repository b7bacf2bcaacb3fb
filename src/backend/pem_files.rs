//! The TLS files a backend URL names (`cacert=`, `cert=`, `key=`, `sslrootcert=`, `ssl-ca=`),
//! checked before anything connects: each backend says what its file holds ([`Holds`]), and a
//! file that holds no certificate, a certificate that does not parse, or no private key where one
//! is wanted, is a usage error naming the option and the file, instead of a handshake failure
//! (exit 69) or, worse, a message blaming the system's certificate store.

use std::path::Path;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// What a TLS file a URL names must hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Holds {
    /// PEM certificates (a CA bundle, or a client certificate), every one well formed.
    Certificates,
    /// The same, or one DER certificate, the whole file (the MySQL driver reads either).
    CertificatesOrDer,
    /// A PEM private key.
    PrivateKey,
}

/// What is wrong with `contents`, the file `path` that option `option` names, if anything.
pub fn problem(option: &str, path: &Path, holds: Holds, contents: &[u8]) -> Option<String> {
    let shown = path.display();
    if holds == Holds::PrivateKey {
        return PrivateKeyDer::from_pem_slice(contents).err().map(|e| {
            format!("the {option}= file {shown} of --backend holds no private key ({e})")
        });
    }
    let certificates = match CertificateDer::pem_slice_iter(contents).collect::<Result<Vec<_>, _>>()
    {
        Ok(certificates) => certificates,
        Err(e) => {
            return Some(format!(
                "the {option}= file {shown} of --backend is not PEM ({e})"
            ));
        }
    };
    let mut store = rustls::RootCertStore::empty();
    if certificates.is_empty() {
        let what = match holds {
            // One DER certificate, the whole file.
            Holds::CertificatesOrDer => match store.add(CertificateDer::from(contents)) {
                Ok(()) => return None,
                Err(_) => "no PEM or DER certificate",
            },
            _ => "no PEM certificate",
        };
        return Some(format!(
            "the {option}= file {shown} of --backend holds {what}"
        ));
    }
    certificates.into_iter().find_map(|certificate| {
        store.add(certificate).err().map(|e| {
            format!("the {option}= file {shown} of --backend holds a certificate that does not parse ({e})")
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problem_with(option: &str, holds: Holds, text: &str) -> Option<String> {
        problem(option, Path::new("f.pem"), holds, text.as_bytes())
    }

    #[test]
    fn a_file_without_what_its_option_takes_is_named_with_its_option() {
        let err = problem_with("cacert", Holds::Certificates, "not a certificate\n").unwrap();
        assert!(
            err.contains("cacert= file") && err.contains("no PEM certificate"),
            "{err}"
        );
        let err = problem_with("sslrootcert", Holds::Certificates, "").unwrap();
        assert!(err.contains("no PEM certificate"), "{err}");
        let garbled = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        let err = problem_with("ssl-ca", Holds::CertificatesOrDer, garbled).unwrap();
        assert!(err.contains("does not parse"), "{err}");
        let err = problem_with("ssl-ca", Holds::CertificatesOrDer, "not a certificate\n").unwrap();
        assert!(err.contains("no PEM or DER certificate"), "{err}");
        let err = problem_with("key", Holds::PrivateKey, garbled).unwrap();
        assert!(
            err.contains("key= file") && err.contains("no private key"),
            "{err}"
        );
    }
}
