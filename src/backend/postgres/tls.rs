//! The TLS connector for URLs that ask for TLS: rustls on the `ring` provider (no system C library),
//! verifying the server's certificate and host name against the system's trusted roots or the
//! `sslrootcert` file.

use std::sync::Arc;

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::backend::BackendError;

/// A connector trusting `roots` (a PEM file), or the system's roots when `None`.
pub fn connector(roots: Option<&std::path::Path>) -> Result<MakeRustlsConnect, BackendError> {
    let mut store = rustls::RootCertStore::empty();
    match roots {
        Some(path) => {
            let certs = CertificateDer::pem_file_iter(path).map_err(|e| {
                unusable(format!("cannot read sslrootcert {}: {e}", path.display()))
            })?;
            for cert in certs {
                let cert = cert.map_err(|e| {
                    unusable(format!("cannot read sslrootcert {}: {e}", path.display()))
                })?;
                store
                    .add(cert)
                    .map_err(|e| unusable(format!("bad certificate in {}: {e}", path.display())))?;
            }
        }
        None => {
            // Unreadable system certificates are skipped; an empty store is reported below.
            for cert in rustls_native_certs::load_native_certs().certs {
                let _ = store.add(cert);
            }
        }
    }
    if store.is_empty() {
        return Err(unusable(
            "no trusted certificate authority for TLS: install the system's CA certificates or pass sslrootcert=PATH"
                .into(),
        ));
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| unusable(format!("cannot set up TLS: {e}")))?
    .with_root_certificates(store)
    .with_no_client_auth();
    Ok(MakeRustlsConnect::new(config))
}

fn unusable(reason: String) -> BackendError {
    BackendError::Unsupported(reason)
}
