//! The table, created on first use: when a request finds it missing (and the URL did not say
//! `create=false`), lockrun creates it — on-demand capacity (`PAY_PER_REQUEST`), one string
//! partition key [`KEY`](super::item::KEY) — and waits until it is `ACTIVE`. Several lockruns
//! doing so at once is fine: the ones that lose the race wait for the winner's table. A
//! refusal names the permission the credentials lack (`dynamodb:CreateTable`).

use std::time::Duration;

use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType, TableStatus,
};

use super::item::KEY;
use super::link::{Failure, Link, REQUEST_TIMEOUT};
use crate::clock::BootInstant;

/// How long a new table may take to become usable (DynamoDB: usually seconds).
const READY_WITHIN: Duration = Duration::from_secs(60);
/// Pause between two looks at a table being created.
const LOOK_EVERY: Duration = Duration::from_millis(100);

/// Creates the table unless `create=false`, and waits until it can be used.
pub async fn ensure(link: &Link) -> Result<(), Failure> {
    if !link.create {
        return Err(Failure::NoTable);
    }
    crate::info!(
        "creating the DynamoDB table {} (first use; create=false prevents this)",
        link.table
    );
    let build = |e: aws_sdk_dynamodb::error::BuildError| Failure::Refused {
        code: "invalid request".into(),
        message: e.to_string(),
    };
    let attribute = AttributeDefinition::builder()
        .attribute_name(KEY)
        .attribute_type(ScalarAttributeType::S)
        .build()
        .map_err(build)?;
    let key = KeySchemaElement::builder()
        .attribute_name(KEY)
        .key_type(KeyType::Hash)
        .build()
        .map_err(build)?;
    let created = link
        .once(
            REQUEST_TIMEOUT,
            "dynamodb:CreateTable",
            link.client
                .create_table()
                .table_name(&link.table)
                .attribute_definitions(attribute)
                .key_schema(key)
                .billing_mode(BillingMode::PayPerRequest)
                .send(),
        )
        .await;
    match created {
        Ok(_) => {}
        // Someone else is creating it: wait for theirs.
        Err(Failure::Refused { code, .. }) if code == "ResourceInUseException" => {}
        Err(Failure::Refused { code, message }) => {
            return Err(Failure::Refused {
                code,
                message: format!(
                    "table {} does not exist and cannot be created: {message}",
                    link.table
                ),
            });
        }
        Err(e) => return Err(e),
    }
    let until = BootInstant::now() + READY_WITHIN;
    loop {
        let described = link
            .once(
                REQUEST_TIMEOUT,
                "dynamodb:DescribeTable",
                link.client.describe_table().table_name(&link.table).send(),
            )
            .await;
        match described {
            Ok(out) => {
                let status = out.table().and_then(|t| t.table_status());
                if status == Some(&TableStatus::Active) {
                    return Ok(());
                }
            }
            Err(Failure::NoTable) => {}
            Err(e) => return Err(e),
        }
        if BootInstant::now() >= until {
            return Err(Failure::Unanswered(format!(
                "table {} was not ready {} after it was created",
                link.table,
                crate::messages::duration(READY_WITHIN)
            )));
        }
        tokio::time::sleep(LOOK_EVERY).await;
    }
}
