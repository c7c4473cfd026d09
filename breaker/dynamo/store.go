package dynamo

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// store is what the state machine needs from the table: one item per identity,
// conditional writes on its version, and two counter updates that spare a read.
type store interface {
	// load returns the item of id, or errNotFound.
	load(ctx context.Context, id string) (item, error)
	// put stores it (whose version the caller has advanced) if the stored version is
	// still expected, or if expected is 0 and no item exists; else errConflict.
	put(ctx context.Context, it item, expected uint64) error
	// addFailure adds one to the failures of the closed item of id in generation gen
	// and returns the item written; errConflict when the item is not closed in gen.
	addFailure(ctx context.Context, id, fingerprint string, gen uint64) (item, error)
	// resetFailures sets the failures of the closed item of id in generation gen to
	// zero and returns the item written; errConflict when the item is not closed in
	// gen or has no failures to reset.
	resetFailures(ctx context.Context, id, fingerprint string, gen uint64) (item, error)
}

var (
	errNotFound = errors.New("dynamo: item not found")
	errConflict = errors.New("dynamo: conditional write lost to a concurrent change")
)

// api is the part of *dynamodb.Client the store uses.
type api interface {
	GetItem(context.Context, *dynamodb.GetItemInput, ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	PutItem(context.Context, *dynamodb.PutItemInput, ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	UpdateItem(context.Context, *dynamodb.UpdateItemInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
}

// tableStore keeps items in a DynamoDB table whose partition key is the string "id".
type tableStore struct {
	client api
	table  string
}

func key(id string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrID: str(id)}
}

func (s *tableStore) load(ctx context.Context, id string) (item, error) {
	out, err := s.client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      aws.String(s.table),
		Key:            key(id),
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return item{}, err
	}
	if len(out.Item) == 0 {
		return item{}, errNotFound
	}
	return decodeItem(id, out.Item)
}

func (s *tableStore) put(ctx context.Context, it item, expected uint64) error {
	in := &dynamodb.PutItemInput{
		TableName:                aws.String(s.table),
		Item:                     it.encode(),
		ExpressionAttributeNames: map[string]string{"#k": attrID},
		ConditionExpression:      aws.String("attribute_not_exists(#k)"),
	}
	if expected != 0 {
		in.ExpressionAttributeNames = map[string]string{"#v": attrVersion}
		in.ExpressionAttributeValues = map[string]types.AttributeValue{":v": unum(expected)}
		in.ConditionExpression = aws.String("#v = :v")
	}
	_, err := s.client.PutItem(ctx, in)
	return conflict(err)
}

func (s *tableStore) addFailure(ctx context.Context, id, fingerprint string, gen uint64) (item, error) {
	return s.update(ctx, id, fingerprint, gen, "ADD #f :one, #v :one", "")
}

func (s *tableStore) resetFailures(ctx context.Context, id, fingerprint string, gen uint64) (item, error) {
	return s.update(ctx, id, fingerprint, gen, "SET #f = :zero ADD #v :one", " AND #f > :zero")
}

// update applies expr to the closed item of id in generation gen (plus the extra
// condition) and decodes the item written.
func (s *tableStore) update(ctx context.Context, id, fingerprint string, gen uint64, expr, cond string) (item, error) {
	values := map[string]types.AttributeValue{
		":one": num(1), ":gen": unum(gen), ":closed": str("closed"), ":fp": str(fingerprint),
	}
	if strings.Contains(expr+cond, ":zero") { // DynamoDB refuses values the expressions do not use
		values[":zero"] = num(0)
	}
	out, err := s.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:        aws.String(s.table),
		Key:              key(id),
		UpdateExpression: aws.String(expr),
		ConditionExpression: aws.String("attribute_exists(#k) AND #g = :gen AND #s = :closed AND #fp = :fp" +
			cond),
		ExpressionAttributeNames: map[string]string{
			"#k": attrID, "#f": attrFailures, "#v": attrVersion, "#g": attrGeneration,
			"#s": attrState, "#fp": attrFingerprint,
		},
		ExpressionAttributeValues: values,
		ReturnValues:              types.ReturnValueAllNew,
	})
	if err != nil {
		return item{}, conflict(err)
	}
	return decodeItem(id, out.Attributes)
}

// conflict turns a failed condition into errConflict.
func conflict(err error) error {
	var failed *types.ConditionalCheckFailedException
	if errors.As(err, &failed) {
		return errConflict
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
