//! The TLS options for URLs that ask for TLS: rustls on the `ring` provider (no system C
//! library), trusting only the `ssl-ca` file or, without one, the system's roots (never a list
//! compiled into the binary), and checking the server's certificate — chain and host name — unless
//! `ssl-mode=REQUIRED` asked for encryption alone.

use mysql_async::SslOpts;

use super::settings::{Check, Tls};
use crate::backend::BackendError;

/// The client's TLS options for `tls`; `None` for a plain connection.
pub fn options(tls: &Tls) -> Result<Option<SslOpts>, BackendError> {
    let Tls::On { check, roots } = tls else {
        return Ok(None);
    };
    let trusted = match roots {
        Some(path) => vec![path.clone().into()],
        None => {
            // Unreadable system certificates are skipped; an empty store is reported below.
            let certs: Vec<_> = rustls_native_certs::load_native_certs()
                .certs
                .into_iter()
                .map(|der| der.as_ref().to_vec().into())
                .collect();
            if certs.is_empty() && *check != Check::Nothing {
                return Err(BackendError::Unsupported(
                    "no trusted certificate authority for TLS: install the system's CA \
                     certificates or pass ssl-ca=PATH"
                        .into(),
                ));
            }
            certs
        }
    };
    Ok(Some(
        SslOpts::default()
            .with_root_certs(trusted)
            .with_disable_built_in_roots(true)
            .with_danger_accept_invalid_certs(*check == Check::Nothing),
    ))
}
