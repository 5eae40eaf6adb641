//! Where the unit accounting watches the store's calls: an SDK interceptor that
//! [`DynamoStore::with_accounting`](super::DynamoStore::with_accounting) attaches to the store's
//! client, so the store's request code is the same whether accounting is on or off.
//!
//! Every call passes the interceptor twice:
//!
//! 1. **Before serialization**, it asks for `ConsumedCapacity` per index, and on `UpdateItem` for
//!    the new image (the store sends only the changed attributes: the image is how the
//!    accounting learns what was written). Serialization consumes the input, so it also keeps
//!    what the figures need from it in the call's interceptor state, as a [`Call`].
//! 2. **After the execution** (once per call, however many attempts it took), if the call
//!    succeeded, it hands that [`Call`] and the output to [`Accounting`]. A failed call, a
//!    refused condition among them, is not counted.
//!
//! Operations the store does not send pass through untouched and uncounted.

use std::sync::Arc;

use aws_sdk_dynamodb::config::interceptors::{
    BeforeSerializationInterceptorContextMut, FinalizerInterceptorContextRef,
};
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_sdk_dynamodb::error::BoxError;
use aws_sdk_dynamodb::operation::batch_get_item::{BatchGetItemInput, BatchGetItemOutput};
use aws_sdk_dynamodb::operation::delete_item::{DeleteItemInput, DeleteItemOutput};
use aws_sdk_dynamodb::operation::get_item::{GetItemInput, GetItemOutput};
use aws_sdk_dynamodb::operation::put_item::{PutItemInput, PutItemOutput};
use aws_sdk_dynamodb::operation::query::{QueryInput, QueryOutput};
use aws_sdk_dynamodb::operation::transact_write_items::{
    TransactWriteItemsInput, TransactWriteItemsOutput,
};
use aws_sdk_dynamodb::operation::update_item::{UpdateItemInput, UpdateItemOutput};
use aws_sdk_dynamodb::types::{ReturnConsumedCapacity, ReturnValue};
use aws_smithy_types::config_bag::{Storable, StoreReplace};

use super::schema::Item;
use super::units::Accounting;

/// Feeds one store's [`Accounting`] from the calls of the client it is attached to.
#[derive(Debug)]
pub(crate) struct AccountingInterceptor {
    accounting: Arc<Accounting>,
}

impl AccountingInterceptor {
    pub(crate) fn new(accounting: Arc<Accounting>) -> Self {
        Self { accounting }
    }
}

/// What a call's figures need from its input, kept from before serialization until the output.
#[derive(Debug)]
enum Call {
    /// A `PutItem` of this item.
    Put(Item),
    /// A `TransactWriteItems` putting the first items and deleting the items at the second's
    /// keys (the store sends no other kind of action).
    Transact(Vec<Item>, Vec<Item>),
    /// An `UpdateItem` asking for the new image, which is what the accounting takes as written.
    /// One whose caller asked for other attributes keeps them and is not counted.
    Update,
    /// A `DeleteItem` of the item at this key.
    Delete(Item),
    /// A `GetItem`.
    GetItem { consistent: bool },
    /// One page of a `Query` of the table (`index: None`) or of an index.
    Query {
        index: Option<String>,
        consistent: bool,
    },
    /// A `BatchGetItem`; consistent when every table's keys are read consistently (the store
    /// reads one table).
    BatchGetItem { consistent: bool },
}

impl Storable for Call {
    type Storer = StoreReplace<Self>;
}

/// `ReturnConsumedCapacity` for every call: per index, so that the figures can say where the
/// units went on real DynamoDB.
const CAPACITY: Option<ReturnConsumedCapacity> = Some(ReturnConsumedCapacity::Indexes);

/// Asks for the capacity (and, on `UpdateItem`, the new image) and says what to keep, or `None`
/// for an operation the store does not send.
fn prepare(context: &mut BeforeSerializationInterceptorContextMut<'_>) -> Option<Call> {
    let input = context.input_mut();
    if let Some(input) = input.downcast_mut::<PutItemInput>() {
        input.return_consumed_capacity = CAPACITY;
        return Some(Call::Put(input.item.clone().unwrap_or_default()));
    }
    if let Some(input) = input.downcast_mut::<TransactWriteItemsInput>() {
        input.return_consumed_capacity = CAPACITY;
        let actions = input.transact_items.iter().flatten();
        let puts = actions.clone().filter_map(|action| action.put());
        let deletes = actions.filter_map(|action| action.delete());
        return Some(Call::Transact(
            puts.map(|put| put.item.clone()).collect(),
            deletes.map(|delete| delete.key.clone()).collect(),
        ));
    }
    if let Some(input) = input.downcast_mut::<UpdateItemInput>() {
        input.return_consumed_capacity = CAPACITY;
        return match input.return_values {
            None | Some(ReturnValue::None) => {
                input.return_values = Some(ReturnValue::AllNew);
                Some(Call::Update)
            }
            Some(ReturnValue::AllNew) => Some(Call::Update),
            Some(_) => None,
        };
    }
    if let Some(input) = input.downcast_mut::<DeleteItemInput>() {
        input.return_consumed_capacity = CAPACITY;
        return Some(Call::Delete(input.key.clone().unwrap_or_default()));
    }
    if let Some(input) = input.downcast_mut::<GetItemInput>() {
        input.return_consumed_capacity = CAPACITY;
        return Some(Call::GetItem {
            consistent: input.consistent_read.unwrap_or(false),
        });
    }
    if let Some(input) = input.downcast_mut::<QueryInput>() {
        input.return_consumed_capacity = CAPACITY;
        return Some(Call::Query {
            index: input.index_name.clone(),
            consistent: input.consistent_read.unwrap_or(false),
        });
    }
    if let Some(input) = input.downcast_mut::<BatchGetItemInput>() {
        input.return_consumed_capacity = CAPACITY;
        let mut tables = input.request_items.iter().flat_map(|items| items.values());
        return Some(Call::BatchGetItem {
            consistent: tables.all(|keys| keys.consistent_read.unwrap_or(false)),
        });
    }
    None
}

impl Call {
    /// Counts this call if it succeeded. An output of another operation than the input's (which
    /// the SDK never gives) is not counted.
    fn count(&self, accounting: &Accounting, context: &FinalizerInterceptorContextRef<'_>) {
        let Some(Ok(output)) = context.output_or_error() else {
            return;
        };
        match self {
            Call::Put(item) => {
                if let Some(output) = output.downcast_ref::<PutItemOutput>() {
                    let capacity = output.consumed_capacity().map(std::slice::from_ref);
                    accounting.wrote(&[item], false, capacity.unwrap_or_default());
                }
            }
            Call::Transact(items, deleted) => {
                if let Some(output) = output.downcast_ref::<TransactWriteItemsOutput>() {
                    let items: Vec<&Item> = items.iter().collect();
                    accounting.wrote(&items, true, output.consumed_capacity());
                    accounting.deleted_in_transaction(deleted);
                }
            }
            Call::Update => {
                let output = output.downcast_ref::<UpdateItemOutput>();
                if let Some((output, item)) = output.and_then(|o| Some((o, o.attributes()?))) {
                    let capacity = output.consumed_capacity().map(std::slice::from_ref);
                    accounting.wrote(&[item], false, capacity.unwrap_or_default());
                }
            }
            Call::Delete(key) => {
                if let Some(output) = output.downcast_ref::<DeleteItemOutput>() {
                    accounting.deleted(key, output.consumed_capacity());
                }
            }
            Call::GetItem { consistent } => {
                if let Some(output) = output.downcast_ref::<GetItemOutput>() {
                    let items = output.item().map(std::slice::from_ref);
                    let capacity = output.consumed_capacity();
                    let items = items.unwrap_or_default();
                    accounting.read("GetItem", items, *consistent, true, capacity);
                }
            }
            Call::Query { index, consistent } => {
                if let Some(output) = output.downcast_ref::<QueryOutput>() {
                    let source = format!("Query {}", index.as_deref().unwrap_or("table"));
                    // Items of an index are projections, not what is stored in the table.
                    let whole = index.is_none();
                    let capacity = output.consumed_capacity();
                    accounting.read(&source, output.items(), *consistent, whole, capacity);
                }
            }
            Call::BatchGetItem { consistent } => {
                if let Some(output) = output.downcast_ref::<BatchGetItemOutput>() {
                    let tables = output.responses().into_iter().flat_map(|r| r.values());
                    let items: Vec<Item> = tables.flatten().cloned().collect();
                    accounting.read_batch(&items, *consistent, output.consumed_capacity());
                }
            }
        }
    }
}

impl Intercept for AccountingInterceptor {
    fn name(&self) -> &'static str {
        "trainyard capacity accounting"
    }

    fn modify_before_serialization(
        &self,
        context: &mut BeforeSerializationInterceptorContextMut<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        if let Some(call) = prepare(context) {
            cfg.interceptor_state().store_put(call);
        }
        Ok(())
    }

    fn read_after_execution(
        &self,
        context: &FinalizerInterceptorContextRef<'_>,
        _runtime_components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        // The figures never fail a call: whatever cannot be read is left uncounted.
        if let Some(call) = cfg.load::<Call>() {
            call.count(&self.accounting, context);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    //! Against a stand-in DynamoDB endpoint on a free loopback port that answers as told and
    //! keeps what it was sent: what the interceptor changes in a request, and what it counts.
    // Test support: a broken set-up should fail loudly where it broke.
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use axum::http::StatusCode;
    use serde_json::{Value, json};
    use trainyard_app::ports::{SchedulingStore, StoreError};

    use crate::dynamodb::stand_in::stand_in;

    /// What `UpdateItem` answers when asked for the new image: a small job item (one KB, in no
    /// index) and one reported unit.
    fn updated() -> (StatusCode, Value) {
        let item = json!({"pk": {"S": "JOB#1"}, "sk": {"S": "JOB"}, "version": {"N": "2"}});
        let capacity = json!({"TableName": "jobs", "CapacityUnits": 1.0});
        (
            StatusCode::OK,
            json!({"Attributes": item, "ConsumedCapacity": capacity}),
        )
    }

    #[tokio::test]
    async fn without_accounting_the_requests_ask_for_nothing_more() {
        let (store, script) = stand_in(vec![(StatusCode::OK, json!({}))]).await;
        store.set_status_reason("1", 1, None).await.unwrap();
        let request = script.lock().unwrap().requests[0].clone();
        assert_eq!(request.get("ReturnConsumedCapacity"), None, "{request}");
        assert_eq!(request.get("ReturnValues"), None, "{request}");
        assert_eq!(store.consumed().requests, 0);
    }

    #[tokio::test]
    async fn an_update_asks_for_its_capacity_and_new_image_and_counts_the_image_as_written() {
        let (store, script) = stand_in(vec![updated()]).await;
        let store = store.with_accounting();
        store.set_status_reason("1", 1, None).await.unwrap();
        let request = script.lock().unwrap().requests[0].clone();
        assert_eq!(request["ReturnConsumedCapacity"], "INDEXES", "{request}");
        assert_eq!(request["ReturnValues"], "ALL_NEW", "{request}");
        let consumed = store.consumed();
        assert_eq!(consumed.requests, 1);
        assert_eq!(consumed.reported.write, 1.0);
        assert_eq!(consumed.estimated.write, 1.0);
        assert_eq!(consumed.writes_by_target["table"], 1.0);
    }

    #[tokio::test]
    async fn a_refused_condition_is_not_counted() {
        let refused = json!({
            "__type": "com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException",
            "message": "The conditional request failed",
        });
        let (store, _) = stand_in(vec![(StatusCode::BAD_REQUEST, refused)]).await;
        let store = store.with_accounting();
        let result = store.set_status_reason("1", 1, None).await;
        assert!(matches!(result, Err(StoreError::Conflict)), "{result:?}");
        assert_eq!(store.consumed(), crate::dynamodb::Consumed::default());
    }

    #[tokio::test]
    async fn a_call_is_counted_once_however_many_attempts_it_took() {
        let throttled = json!({
            "__type": "com.amazonaws.dynamodb.v20120810#ThrottlingException",
            "message": "slow down",
        });
        let answers = vec![(StatusCode::BAD_REQUEST, throttled), updated()];
        let (store, script) = stand_in(answers).await;
        // Turned on twice, it still counts each call once.
        let store = store.with_accounting().with_accounting();
        store.set_status_reason("1", 1, None).await.unwrap();
        assert_eq!(script.lock().unwrap().requests.len(), 2, "retried");
        let consumed = store.consumed();
        assert_eq!((consumed.requests, consumed.estimated.write), (1, 1.0));
    }
}
