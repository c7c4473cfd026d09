package dynamo

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
)

// tableStore is the sharedstate.Driver of a table. Beside the conditional PutItem
// every driver has, it counts with UpdateItem (sharedstate.Counter): ADD one to the
// failures of the closed generation, or SET them to zero, in one request without a
// read and without racing other replicas' counts.
var (
	_ sharedstate.Driver  = (*tableStore)(nil)
	_ sharedstate.Counter = (*tableStore)(nil)
	_ sharedstate.Lister  = (*tableStore)(nil)
)

// api is the part of *dynamodb.Client the store uses.
type api interface {
	GetItem(context.Context, *dynamodb.GetItemInput, ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	PutItem(context.Context, *dynamodb.PutItemInput, ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	UpdateItem(context.Context, *dynamodb.UpdateItemInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	Scan(context.Context, *dynamodb.ScanInput, ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
}

// tableStore keeps items in a DynamoDB table whose partition key is the string "id".
type tableStore struct {
	client api
	table  string
}

func key(id string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrID: str(id)}
}

// Load reads the item of id with a strongly consistent read.
func (s *tableStore) Load(ctx context.Context, id string) (sharedstate.Record, error) {
	out, err := s.client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      aws.String(s.table),
		Key:            key(id),
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return sharedstate.Record{}, err
	}
	if len(out.Item) == 0 {
		return sharedstate.Record{}, sharedstate.ErrNotFound
	}
	return decodeItem(id, out.Item)
}

// Replace puts the whole item, conditional on the stored version (or on no item).
func (s *tableStore) Replace(ctx context.Context, id string, expect uint64, next sharedstate.Record) error {
	in := &dynamodb.PutItemInput{
		TableName:                aws.String(s.table),
		Item:                     encode(id, next),
		ExpressionAttributeNames: map[string]string{"#k": attrID},
		ConditionExpression:      aws.String("attribute_not_exists(#k)"),
	}
	if expect != 0 {
		in.ExpressionAttributeNames = map[string]string{"#v": attrVersion}
		in.ExpressionAttributeValues = map[string]types.AttributeValue{":v": unum(expect)}
		in.ConditionExpression = aws.String("#v = :v")
	}
	_, err := s.client.PutItem(ctx, in, retryThrottlesOnly)
	return conflict(err)
}

// listPage bounds the items one Scan request reads: a listing is many small requests
// rather than one that takes a large share of the table's read capacity at once.
const listPage = 100

// List implements sharedstate.Lister with a Scan of the key attribute alone, in pages
// of listPage items (a prefix is a filter: the whole table is still read). It is for
// operators' tools, never a circuit's decision.
func (s *tableStore) List(ctx context.Context, prefix string, yield func(id string) error) error {
	in := &dynamodb.ScanInput{
		TableName:                aws.String(s.table),
		ProjectionExpression:     aws.String("#k"),
		ExpressionAttributeNames: map[string]string{"#k": attrID},
		Limit:                    aws.Int32(listPage),
	}
	if prefix != "" {
		in.FilterExpression = aws.String("begins_with(#k, :p)")
		in.ExpressionAttributeValues = map[string]types.AttributeValue{":p": str(prefix)}
	}
	for {
		out, err := s.client.Scan(ctx, in)
		if err != nil {
			return fmt.Errorf("dynamo: list table %q: %w", s.table, err)
		}
		for _, item := range out.Items {
			id, ok := item[attrID].(*types.AttributeValueMemberS)
			if !ok || !strings.HasPrefix(id.Value, prefix) {
				continue // not a circuit's item
			}
			if err := yield(id.Value); err != nil {
				return err
			}
		}
		if len(out.LastEvaluatedKey) == 0 {
			return nil
		}
		in.ExclusiveStartKey = out.LastEvaluatedKey
	}
}

// AddFailure implements sharedstate.Counter with ADD.
func (s *tableStore) AddFailure(ctx context.Context, id string, c sharedstate.Closed) (sharedstate.Record, error) {
	return s.update(ctx, id, c, "ADD #f :one, #v :one", "")
}

// ResetFailures implements sharedstate.Counter with SET.
func (s *tableStore) ResetFailures(ctx context.Context, id string, c sharedstate.Closed) (sharedstate.Record, error) {
	return s.update(ctx, id, c, "SET #f = :zero ADD #v :one", " AND #f > :zero")
}

// update applies expr to the item of id if it is closed in c's generation, under
// c's fingerprint, with no override and fewer failures than c.Limit (plus the extra
// condition), and decodes the item written.
func (s *tableStore) update(ctx context.Context, id string, c sharedstate.Closed, expr, cond string) (sharedstate.Record, error) {
	values := map[string]types.AttributeValue{
		":one": num(1), ":gen": unum(c.Generation), ":closed": str("closed"), ":fp": str(c.Fingerprint),
		":limit": num(c.Limit),
	}
	if strings.Contains(expr+cond, ":zero") { // DynamoDB refuses values the expressions do not use
		values[":zero"] = num(0)
	}
	out, err := s.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:        aws.String(s.table),
		Key:              key(id),
		UpdateExpression: aws.String(expr),
		ConditionExpression: aws.String("attribute_exists(#k) AND #g = :gen AND #s = :closed AND #fp = :fp" +
			" AND attribute_not_exists(#o) AND #f < :limit" + cond),
		ExpressionAttributeNames: map[string]string{
			"#k": attrID, "#f": attrFailures, "#v": attrVersion, "#g": attrGeneration,
			"#s": attrState, "#fp": attrFingerprint, "#o": attrOverride,
		},
		ExpressionAttributeValues: values,
		ReturnValues:              types.ReturnValueAllNew,
	}, retryThrottlesOnly)
	if err != nil {
		return sharedstate.Record{}, conflict(err)
	}
	return decodeItem(id, out.Attributes)
}

// retryThrottlesOnly keeps the SDK from sending a conditional write again unless the
// table refused it unapplied (throttled). After a timeout, a dropped connection or a
// server error the write may have been applied, and its second attempt would fail its
// condition on the first one's write: the engine would be told ErrConflict, "nothing
// was written", and strand the probe lease it wrote, or a failure would be counted
// twice. Such an error goes to the engine instead, which reads the record to find out.
func retryThrottlesOnly(o *dynamodb.Options) {
	if r, ok := o.Retryer.(aws.RetryerV2); ok {
		o.Retryer = throttleRetryer{r}
	} else {
		o.Retryer = aws.NopRetryer{}
	}
}

type throttleRetryer struct{ aws.RetryerV2 }

func (r throttleRetryer) IsErrorRetryable(err error) bool {
	return retry.IsErrorThrottles(retry.DefaultThrottles).IsErrorThrottle(err) == aws.TrueTernary &&
		r.RetryerV2.IsErrorRetryable(err)
}

// conflict turns a failed condition into errConflict.
func conflict(err error) error {
	var failed *types.ConditionalCheckFailedException
	if errors.As(err, &failed) {
		return sharedstate.ErrConflict
	}
	return err
}

// CreateTable creates a table for shared circuits, with the string partition key "id"
// and on-demand billing, and waits (bounded by ctx) until it is active. A table that
// already exists is left as it is, and CreateTable returns nil once it is active.
func CreateTable(ctx context.Context, client *dynamodb.Client, table string) error {
	_, err := client.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String(table),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String(attrID), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String(attrID), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	})
	var inUse *types.ResourceInUseException
	if err != nil && !errors.As(err, &inUse) {
		return fmt.Errorf("dynamo: create table %q: %w", table, err)
	}
	waitFor := 2 * time.Minute
	if deadline, ok := ctx.Deadline(); ok {
		waitFor = time.Until(deadline)
	}
	w := dynamodb.NewTableExistsWaiter(client, func(o *dynamodb.TableExistsWaiterOptions) {
		o.MinDelay, o.MaxDelay = 100*time.Millisecond, 2*time.Second
	})
	if err := w.Wait(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)}, waitFor); err != nil {
		return fmt.Errorf("dynamo: wait for table %q: %w", table, err)
	}
	return nil
}
