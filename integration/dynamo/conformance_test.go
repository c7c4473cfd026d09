package dynamo

import (
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/circuittest"
	"github.com/brokerguard/brokerguard/breaker/dynamo"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
	"github.com/brokerguard/brokerguard/integration/harness"
)

// breakable fails every request while broken, as a table that cannot be reached.
type breakable struct{ broken atomic.Bool }

var errCut = errors.New("the path to the table is cut")

func (b *breakable) RoundTrip(r *http.Request) (*http.Response, error) {
	if b.broken.Load() {
		return nil, errCut
	}
	return http.DefaultTransport.RoundTrip(r)
}

// The conformance suite on dynalite: every replica has its own SDK client.
func TestConformance(t *testing.T) {
	harness.Require(t, harness.ServiceDynamoDB, sharedErr)
	path := &breakable{}
	circuittest.Run(t, circuittest.Backend{
		Scope:        breaker.SharedDependency,
		Shared:       true,
		MaxStaleness: dynamo.DefaultMaxStateStaleness,
		Break:        func(broken bool) { path.broken.Store(broken) },
		NewState: func(t *testing.T) func(circuittest.Config) (circuittest.Circuit, error) {
			e := setup(t)
			return func(cfg circuittest.Config) (circuittest.Circuit, error) {
				client := harness.DynamoDBClient(sharedEndpoint, noRetries, func(o *dynamodb.Options) {
					o.HTTPClient = &http.Client{Transport: path}
				})
				opts := []dynamo.Option{dynamo.WithClock(cfg.Clock), dynamo.WithBackendRetryDelay(time.Millisecond),
					dynamo.WithIOTimeout(10 * time.Second)}
				if cfg.Observer != nil {
					opts = append(opts, dynamo.WithObserver(cfg.Observer))
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
