//! [`Settings`] of the `dynamodb://` backend:
//! `dynamodb://TABLE[?region=REGION&endpoint=URL&create=true|false]`.
//!
//! Credentials never go in the URL: they come from the standard AWS chain (environment, shared
//! config and credentials files with `AWS_PROFILE`, SSO, web identity, ECS and EC2 roles). The
//! region comes from `region=` or from that chain; `endpoint=` (an `http://` or `https://` URL)
//! points at a local or compatible server, and then the region defaults to `us-east-1` when the
//! chain has none. `create=false` refuses to create a missing table (the default creates it).

use async_trait::async_trait;

use super::line::Dynamo;
use super::link::Link;
use crate::backend::url::{LoneUserinfo, Url, UrlForms, written_authority};
use crate::backend::waiting::networked::Networked;
use crate::backend::{Backend, BackendError};

/// One table, and how to reach it.
#[derive(Clone, Debug)]
pub struct Settings {
    pub url: Url,
    pub table: String,
    pub region: Option<String>,
    /// A local or compatible server, `scheme://host[:port]`.
    pub endpoint: Option<String>,
    /// Create the table on first use when it is missing.
    pub create: bool,
}

impl Settings {
    /// Parses a `dynamodb://` URL; the error is a reason fragment.
    pub fn parse(raw: &str) -> Result<Self, String> {
        // A table name with a character no host has would otherwise be reported as a bad host.
        let url =
            Url::split(raw, LoneUserinfo::User).map_err(|reason| {
                match written_authority(raw).filter(|table| !table.is_empty()) {
                    Some(table) if valid_table(table).is_err() => table_rule("the table name"),
                    _ => reason,
                }
            })?;
        if url.user.is_some() || url.password.is_some() {
            return Err(
                "credentials do not go in a dynamodb:// URL: they come from the \
                        standard AWS chain (environment, AWS_PROFILE, SSO, instance role)"
                    .into(),
            );
        }
        let table = match url.hosts.as_slice() {
            [one] if one.port.is_none() => one.host.clone(),
            [] => return Err("no table: write dynamodb://TABLE".into()),
            _ => return Err("give one table name: dynamodb://TABLE".into()),
        };
        valid_table(&table)?;
        if !url.path.is_empty() {
            return Err(format!(
                "unexpected path {:?}: dynamodb URLs end after the table",
                url.path
            ));
        }
        url.only_params(&["region", "endpoint", "create"])?;
        let region = url.param("region").map(str::to_owned);
        if let Some(region) = &region
            && !valid_region(region)
        {
            return Err("region= is not a region name (such as eu-west-1)".into());
        }
        let endpoint = url.param("endpoint").map(valid_endpoint).transpose()?;
        let create = match url.param("create") {
            None | Some("true") => true,
            Some("false") => false,
            Some(_) => return Err("create= is true or false".into()),
        };
        Ok(Settings {
            table,
            region,
            endpoint,
            create,
            url,
        })
    }
}

/// A region's name: lowercase letters, digits and `-`.
fn valid_region(region: &str) -> bool {
    (1..=64).contains(&region.len())
        && region
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// DynamoDB's rule for table names: 3 to 255 of `A-Z a-z 0-9 _ - .`.
fn valid_table(table: &str) -> Result<(), String> {
    let ok = (3..=255).contains(&table.len())
        && table
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    match ok {
        true => Ok(()),
        false => Err(table_rule(&format!("table name {table:?}"))),
    }
}

/// The table-name rule broken by `what`.
fn table_rule(what: &str) -> String {
    format!("{what} is not 3-255 letters, digits, '_', '-' or '.'")
}

/// `http://host[:port]` or `https://host[:port]`, without credentials or a path.
fn valid_endpoint(endpoint: &str) -> Result<String, String> {
    let bad = || "endpoint= is an http:// or https:// URL with a host (and a port)".to_owned();
    let parsed = url::Url::parse(endpoint).map_err(|_| bad())?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
        return Err(bad());
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err("endpoint= takes no credentials: they come from the AWS chain".into());
    }
    if parsed.path() != "/" || parsed.query().is_some() || parsed.fragment().is_some() {
        return Err(bad());
    }
    Ok(endpoint.trim_end_matches('/').to_owned())
}

#[async_trait]
impl crate::backend::Settings for Settings {
    fn forms(&self) -> &UrlForms {
        self.url.forms()
    }

    /// Loads the AWS configuration (region, credentials chain) and makes the client; nothing is
    /// sent yet: the first request tells whether the table answers.
    async fn open(&self) -> Result<Box<dyn Backend>, BackendError> {
        let link = Link::open(self).await?;
        Ok(Networked::boxed(Dynamo::new(link), self.shown()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::url::refused_without_password;

    #[test]
    fn reads_table_region_endpoint_and_create() {
        let s = Settings::parse(
            "dynamodb://locks?region=eu-west-1&endpoint=http://127.0.0.1:8000&create=false",
        )
        .unwrap();
        assert_eq!(s.table, "locks");
        assert_eq!(s.region.as_deref(), Some("eu-west-1"));
        assert_eq!(s.endpoint.as_deref(), Some("http://127.0.0.1:8000"));
        assert!(!s.create);
        let s = Settings::parse("dynamodb://my.Lock-table_1").unwrap();
        assert_eq!(s.table, "my.Lock-table_1");
        assert!(s.create && s.region.is_none() && s.endpoint.is_none());
    }

    #[test]
    fn rejects_what_it_cannot_use_without_showing_secrets() {
        refused_without_password(
            Settings::parse,
            &[
                "dynamodb://",
                "dynamodb://ab",
                "dynamodb://locks:8000",
                "dynamodb://a,b",
                "dynamodb://locks/x",
                "dynamodb://locks?table=x",
                "dynamodb://locks?create=yes",
                "dynamodb://locks?region=EU_WEST",
                "dynamodb://locks?endpoint=ftp://h",
                "dynamodb://locks?endpoint=http://h/path",
                "dynamodb://u:hunter2@locks",
            ],
        );
        for bad in ["dynamodb://bad!table", "dynamodb://bad table?create=false"] {
            let err = Settings::parse(bad).unwrap_err();
            assert!(
                err.starts_with("the table name is not 3-255"),
                "{bad}: {err}"
            );
        }
        let err = Settings::parse("dynamodb://locks?endpoint=http://u:hunter2@h:1").unwrap_err();
        assert!(!err.contains("hunter2"), "{err}");
    }
}
