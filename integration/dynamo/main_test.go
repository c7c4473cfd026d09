// Package dynamo tests breaker/dynamo against a real DynamoDB protocol server: dynalite
// started by the harness, or DYNAMODB_ENDPOINT.
package dynamo

import (
	"context"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"
	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/dynamo"
	"github.com/brokerguard/brokerguard/internal/harness"
)

// One dynalite for the package (the outage test starts its own).
var (
	sharedEndpoint string
	sharedErr      error
)

func TestMain(m *testing.M) {
	var server *harness.DynaliteServer
	sharedEndpoint, sharedErr = harness.DynamoDB()
	if sharedEndpoint == "" && sharedErr == nil {
		if server, sharedErr = harness.StartDynalite(""); sharedErr == nil {
			sharedEndpoint = server.Endpoint()
		}
	}
	code := m.Run()
	if server != nil {
		_ = server.Close()
	}
	os.Exit(code)
}

// calls counts the DynamoDB requests a client sends, by operation.
type calls struct {
	mu   sync.Mutex
	byOp map[string]int
}

// install adds the counting middleware to a client's stack; it runs once per request
// attempt, after the operation name is known.
func (c *calls) install(o *dynamodb.Options) {
	o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
		return s.Finalize.Add(middleware.FinalizeMiddlewareFunc("brokerguard-count",
			func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
				c.mu.Lock()
				c.byOp[awsmiddleware.GetOperationName(ctx)]++
				c.mu.Unlock()
				return next.HandleFinalize(ctx, in)
			}), middleware.After)
	})
}

// total returns the requests counted for the operations named (all when none).
func (c *calls) total(ops ...string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for op, v := range c.byOp {
		if len(ops) == 0 {
			n += v
		}
		for _, want := range ops {
			if op == want {
				n += v
			}
		}
	}
	return n
}

// newClient returns a client of endpoint that counts its requests and does not retry,
// so that a stopped server fails a request at once.
func newClient(endpoint string) (*dynamodb.Client, *calls) {
	counter := &calls{byOp: map[string]int{}}
	client := harness.DynamoDBClient(endpoint, noRetries, counter.install)
	return client, counter
}

var (
	unsafeName = regexp.MustCompile(`[^a-zA-Z0-9_.-]+`)
	tables     atomic.Int64
)

// tableFor creates a table for the test on client and returns its name.
func tableFor(t testing.TB, client *dynamodb.Client) string {
	t.Helper()
	// A fresh table per call, so -count=N and DYNAMODB_ENDPOINT reuse start clean.
	table := "circuits-" + strconv.FormatInt(tables.Add(1), 10) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36) +
		"-" + strings.Trim(unsafeName.ReplaceAllString(t.Name(), "-"), "-")
	if len(table) > 255 {
		table = table[:255]
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := dynamo.CreateTable(ctx, client, table); err != nil {
		t.Fatal(err)
	}
	return table
}

// env is a test's client, request counter and table on the shared server.
type env struct {
	client *dynamodb.Client
	calls  *calls
	table  string
}

func setup(t testing.TB) env {
	t.Helper()
	harness.Require(t, harness.ServiceDynamoDB, sharedErr)
	client, counter := newClient(sharedEndpoint)
	return env{client: client, calls: counter, table: tableFor(t, client)}
}

const identity = "kafka:orders"

func sharedPolicy() breaker.Policy {
	return breaker.Policy{
		FailureThreshold:   3,
		BreakDuration:      10 * time.Second,
		ProbeLease:         5 * time.Second,
		HalfOpenRetryDelay: time.Second,
		Scope:              breaker.SharedDependency,
	}
}

func newCircuit(t testing.TB, e env, p breaker.Policy, opts ...dynamo.Option) *dynamo.Circuit {
	t.Helper()
	c, err := dynamo.New(e.client, e.table, identity, p, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// rawItem reads the stored item's attributes.
func rawItem(t testing.TB, e env) map[string]types.AttributeValue {
	t.Helper()
	out, err := e.client.GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName:      aws.String(e.table),
		Key:            map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: identity}},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		t.Fatal(err)
	}
	return out.Item
}

func attrS(t testing.TB, m map[string]types.AttributeValue, name string) string {
	t.Helper()
	switch v := m[name].(type) {
	case *types.AttributeValueMemberS:
		return v.Value
	case *types.AttributeValueMemberN:
		return v.Value
	}
	t.Fatalf("attribute %s = %#v; want S or N", name, m[name])
	return ""
}

// noRetries makes a client fail a request at once, as the tests of unreachable and
// refusing tables need.
func noRetries(o *dynamodb.Options) { o.Retryer = aws.NopRetryer{} }
