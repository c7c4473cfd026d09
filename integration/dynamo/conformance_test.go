package dynamo

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/circuittest"
	"github.com/brokerguard/brokerguard/breaker/dynamo"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
	"github.com/brokerguard/brokerguard/internal/harness"
)

// breakable fails every request while broken, as a table that cannot be reached, and
// while throttled answers every write (PutItem, UpdateItem) as DynamoDB answers a
// throttled request, which dynalite cannot be made to do: reads go on.
type breakable struct{ broken, throttled atomic.Bool }

// throttle is DynamoDB's answer to a throttled request.
func throttle(r *http.Request) *http.Response {
	body := `{"__type":"com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException",` +
		`"message":"The level of configured provisioned throughput for the table was exceeded."}`
	return &http.Response{StatusCode: http.StatusBadRequest, Status: "400 Bad Request", Request: r,
		Header:        http.Header{"Content-Type": {"application/x-amz-json-1.0"}},
		Body:          io.NopCloser(strings.NewReader(body)),
		ContentLength: int64(len(body))}
}

var errCut = errors.New("the path to the table is cut")

func (b *breakable) RoundTrip(r *http.Request) (*http.Response, error) {
	if b.broken.Load() {
		return nil, errCut
	}
	if target := r.Header.Get("X-Amz-Target"); b.throttled.Load() &&
		(strings.HasSuffix(target, ".PutItem") || strings.HasSuffix(target, ".UpdateItem")) {
		return throttle(r), nil
	}
	return http.DefaultTransport.RoundTrip(r)
}

// The conformance suite on dynalite: every replica has its own SDK client.
func TestConformance(t *testing.T) {
	harness.Require(t, harness.ServiceDynamoDB, sharedErr)
	path := &breakable{}
	var forget env // the table of the running test, for Forget
	circuittest.Run(t, circuittest.Backend{
		Scope:        breaker.SharedDependency,
		Shared:       true,
		MaxStaleness: sharedstate.DefaultMaxStaleness,
		Break:        func(broken bool) { path.broken.Store(broken) },
		RefuseWrites: func(refuse bool) { path.throttled.Store(refuse) },
		Forget: func() {
			_, err := forget.client.DeleteItem(context.Background(), &dynamodb.DeleteItemInput{TableName: &forget.table,
				Key: map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: identity}}})
			if err != nil {
				panic(err)
			}
		},
		NewState: func(t *testing.T) func(circuittest.Config) (circuittest.Circuit, error) {
			e := setup(t)
			forget = e
			return func(cfg circuittest.Config) (circuittest.Circuit, error) {
				client := harness.DynamoDBClient(sharedEndpoint, noRetries, func(o *dynamodb.Options) {
					o.HTTPClient = &http.Client{Transport: path}
				})
				opts := []dynamo.Option{sharedstate.WithClock(cfg.Clock), sharedstate.WithRetryDelay(time.Millisecond),
					sharedstate.WithIOTimeout(10 * time.Second)}
				if cfg.Observer != nil {
					opts = append(opts, sharedstate.WithObserver(cfg.Observer))
				}
				return dynamo.New(client, e.table, identity, cfg.Policy, opts...)
			}
		},
	})
}

// The item codec and the table's conditions, on dynalite.
func TestDriverContract(t *testing.T) {
	harness.Require(t, harness.ServiceDynamoDB, sharedErr)
	circuittest.TestDriver(t, func(t *testing.T) sharedstate.Driver {
		e := setup(t)
		return dynamo.NewDriver(e.client, e.table)
	})
}
