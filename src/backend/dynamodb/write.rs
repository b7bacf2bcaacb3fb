//! Sending an [`Update`]: every change lockrun makes to an existing or new item by key is one
//! `UpdateItem` carrying the update's expressions and placeholders as built, sent within a
//! deadline, with a failed condition an answer rather than an error.

use std::time::Duration;

use aws_sdk_dynamodb::operation::update_item::UpdateItemOutput;
use aws_sdk_dynamodb::types::ReturnValue;

use super::expr::Update;
use super::item::{self, LockItem};
use super::link::{Failure, Link, REQUEST_TIMEOUT, conditional};
use crate::name::LockName;

/// Applies `u` to the item whose key is `key`, within `limit`; false when its condition did not
/// hold.
pub async fn update(
    link: &Link,
    key: String,
    u: &Update,
    limit: Duration,
) -> Result<bool, Failure> {
    Ok(send(link, key, u, limit, None).await?.is_some())
}

/// Applies `u` to `name`'s lock item; the item as the write left it, `None` when its condition
/// did not hold.
pub async fn update_lock(
    link: &Link,
    name: &LockName,
    u: &Update,
) -> Result<Option<LockItem>, Failure> {
    let out = send(
        link,
        item::lock_key(name),
        u,
        REQUEST_TIMEOUT,
        Some(ReturnValue::AllNew),
    )
    .await?;
    Ok(out.map(|out| LockItem::parse(out.attributes())))
}

/// The request itself; `returns` says what the answer carries (nothing when `None`).
async fn send(
    link: &Link,
    key: String,
    u: &Update,
    limit: Duration,
    returns: Option<ReturnValue>,
) -> Result<Option<UpdateItemOutput>, Failure> {
    let key = item::key_of(key);
    conditional(
        link.send(limit, "dynamodb:UpdateItem", || {
            link.client
                .update_item()
                .table_name(&link.table)
                .set_key(Some(key.clone()))
                .update_expression(u.update_expression())
                .set_condition_expression(u.condition_expression())
                .set_expression_attribute_names(u.expr.names())
                .set_expression_attribute_values(u.expr.values())
                .set_return_values(returns.clone())
                .send()
        })
        .await,
    )
}
