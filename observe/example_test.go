package observe_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/brokerguard/brokerguard/admin"
	"github.com/brokerguard/brokerguard/observe"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/telemetry"
	"github.com/brokerguard/brokerguard/transport"
)

// One call builds the registry, its metrics and its admin handler; an outage of one
// topic then shows on the admin API's timeline.
func ExampleNew() {
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	defer mp.Shutdown(context.Background())
	policy := registry.DefaultPolicy()
	policy.Circuit.FailureThreshold = 2
	obs, err := observe.New(policy,
		observe.WithRegistry(registry.WithMaxDestinations(1000)),
		observe.WithTelemetry(telemetry.WithMeterProvider(mp)),
		observe.WithAdmin(admin.WithMaxHold(time.Hour)))
	if err != nil {
		panic(err)
	}
	defer obs.Close()
	mux := http.NewServeMux()
	mux.Handle("/admin/", http.StripPrefix("/admin", obs.Admin))

	down := publisherFunc(func(context.Context, transport.Destination, ...transport.Message) error {
		return errors.New("connection refused")
	})
	pub := obs.Registry.Guard(down, nil)
	for range 2 {
		_ = pub.Publish(context.Background(), transport.Destination{Broker: "kafka", Name: "orders"}, transport.Message{Value: []byte("{}")})
	}

	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest("GET", "http://localhost/admin/api/transitions", nil))
	fmt.Println(rec.Code, strings.Contains(rec.Body.String(), `"kafka:orders"`), strings.Contains(rec.Body.String(), `"open"`))
	// Output: 200 true true
}

type publisherFunc func(context.Context, transport.Destination, ...transport.Message) error

func (f publisherFunc) Publish(ctx context.Context, d transport.Destination, msgs ...transport.Message) error {
	return f(ctx, d, msgs...)
}
