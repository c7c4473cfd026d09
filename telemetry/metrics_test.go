package telemetry_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/circuittest"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/sqs"
	"github.com/brokerguard/brokerguard/sqs/sqstest"
	"github.com/brokerguard/brokerguard/telemetry"
	"github.com/brokerguard/brokerguard/transport"
	promclient "github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/otlptranslator"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/resource"
)

var orders = transport.Destination{Broker: "kafka", Name: "orders"}

// wantInstruments is every circuit instrument: its kind and unit.
var wantInstruments = map[string]instrument{
	"brokerguard.circuit.open":               {kind: "gauge", unit: "{circuit}", described: true},
	"brokerguard.circuit.failures":           {kind: "gauge", unit: "{failure}", described: true},
	"brokerguard.circuit.state":              {kind: "updowncounter", unit: "1", described: true},
	"brokerguard.circuit.override":           {kind: "updowncounter", unit: "1", described: true},
	"brokerguard.circuit.unhealthy.duration": {kind: "gauge", unit: "s", described: true},
	"brokerguard.circuit.calls":              {kind: "counter", unit: "{call}", described: true},
	"brokerguard.circuit.transitions":        {kind: "counter", unit: "{transition}", described: true},
	"brokerguard.circuit.probes":             {kind: "counter", unit: "{call}", described: true},
}

// TestCycle drives one circuit closed -> open -> half-open -> open -> half-open ->
// closed and checks every series, and every instrument's kind and unit, after each
// step. The unhealthy duration runs from the opening to the closing, through the
// probes.
func TestCycle(t *testing.T) {
	e := newEnv(t, breaker.Policy{FailureThreshold: 2, BreakDuration: 10 * time.Second, SuccessesToClose: 2}, nil)
	want := newCounts()
	check := func(step string, state breaker.State, failures, unhealthy float64) {
		t.Helper()
		c := e.collect()
		ws := destSeries("kafka", "orders", state, unhealthy, want)
		ws["brokerguard.circuit.open{}"] = b2f(state != breaker.Closed)
		ws["brokerguard.circuit.failures{}"] = failures
		equalSeries(t, step, ws, c.series)
		for name, in := range c.instruments {
			if w, ok := wantInstruments[name]; !ok {
				t.Errorf("%s: unexpected instrument %s", step, name)
			} else if in != w {
				t.Errorf("%s: instrument %s is %+v, want %+v", step, name, in, w)
			}
		}
	}
	mustFail := func(err error) {
		t.Helper()
		if !errors.Is(err, errDown) {
			t.Fatalf("publish: %v, want the broker's error", err)
		}
	}

	if err := e.publish(orders); err != nil {
		t.Fatal(err)
	}
	want.calls["published"] = 1
	check("closed, healthy", breaker.Closed, 0, 0)

	e.raw.set(orders, errDown)
	mustFail(e.publish(orders))
	want.calls["failed"] = 1
	check("closed, one failure", breaker.Closed, 1, 0)

	mustFail(e.publish(orders))
	want.calls["failed"], want.transitions["open"] = 2, 1
	check("open", breaker.Open, 2, 0)

	e.clock.Advance(4 * time.Second)
	if err := e.publish(orders); !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("publish to an open circuit: %v", err)
	}
	want.calls["rejected"] = 1
	check("open, rejected", breaker.Open, 2, 4)

	e.clock.Advance(6 * time.Second)
	mustFail(e.publish(orders)) // the probe fails: open again
	want.calls["failed"], want.transitions["half_open"], want.transitions["open"] = 3, 1, 2
	want.probes["failed"] = 1
	check("probe failed", breaker.Open, 2, 10)

	e.clock.Advance(10 * time.Second)
	e.raw.set(orders, nil)
	if err := e.publish(orders); err != nil { // first of two successes: still half-open
		t.Fatal(err)
	}
	want.calls["published"], want.transitions["half_open"], want.probes["published"] = 2, 2, 1
	check("half-open", breaker.HalfOpen, 2, 20)

	if err := e.publish(orders); err != nil {
		t.Fatal(err)
	}
	want.calls["published"], want.transitions["closed"], want.probes["published"] = 3, 1, 2
	check("closed again", breaker.Closed, 0, 0)

	e.clock.Advance(time.Minute)
	if err := e.publish(orders); err != nil { // a plain call again, not a probe
		t.Fatal(err)
	}
	want.calls["published"] = 4
	check("closed, healthy again", breaker.Closed, 0, 0)
}

// TestAggregateGauges checks that circuit.open counts the open and half-open circuits
// and that circuit.failures sums every circuit's evidence.
func TestAggregateGauges(t *testing.T) {
	e := newEnv(t, breaker.Policy{FailureThreshold: 3, BreakDuration: time.Minute}, nil)
	payments := transport.Destination{Broker: "amqp", Name: "payments"}
	e.raw.set(orders, errDown)
	e.raw.set(payments, errDown)
	for range 3 {
		_ = e.publish(orders)
	}
	_ = e.publish(payments)
	_ = e.publish(payments)

	c := e.collect()
	agg := c.matching("brokerguard.circuit.open")
	maps.Copy(agg, c.matching("brokerguard.circuit.failures"))
	equalSeries(t, "one open, one closed with failures", map[string]float64{
		"brokerguard.circuit.open{}":     1,
		"brokerguard.circuit.failures{}": 5,
	}, agg)

	c1, err := e.reg.Circuit(orders)
	if err != nil {
		t.Fatal(err)
	}
	c1.(*breaker.Breaker).ForceClose(e.clock.Now().Add(time.Hour))
	c = e.collect()
	agg = c.matching("brokerguard.circuit.open")
	maps.Copy(agg, c.matching("brokerguard.circuit.failures"))
	equalSeries(t, "both closed", map[string]float64{
		"brokerguard.circuit.open{}":     0,
		"brokerguard.circuit.failures{}": 2,
	}, agg)
}

// TestOverride checks the override series, that forcing an open circuit open again
// is not a second opening, that a forced-open circuit is not "unhealthy" (an operator
// holds it), and that failures a ForceClose ignores are not counted as failures.
func TestOverride(t *testing.T) {
	e := newEnv(t, breaker.Policy{FailureThreshold: 3, BreakDuration: time.Minute}, nil)
	if err := e.publish(orders); err != nil {
		t.Fatal(err)
	}
	c1, err := e.reg.Circuit(orders)
	if err != nil {
		t.Fatal(err)
	}
	b := c1.(*breaker.Breaker)
	base := "messaging.destination.name=orders,messaging.system=kafka"

	b.ForceOpen(e.clock.Now().Add(time.Hour))
	b.ForceOpen(e.clock.Now().Add(2 * time.Hour)) // extends the hold: no new opening
	e.clock.Advance(10 * time.Minute)
	c := e.collect()
	equalSeries(t, "forced open", map[string]float64{"brokerguard.circuit.override{brokerguard.circuit.override=forced_open," + base + "}": 1},
		c.matching("brokerguard.circuit.override"))
	if got := c.series["brokerguard.circuit.state{brokerguard.circuit.mode=enforce,brokerguard.circuit.state=open,"+base+"}"]; got != 1 {
		t.Errorf("forced open: state open = %v, want 1", got)
	}
	if got := c.series["brokerguard.circuit.transitions{brokerguard.circuit.state=open,"+base+"}"]; got != 1 {
		t.Errorf("forced open twice: %v openings, want 1", got)
	}
	if got := c.series["brokerguard.circuit.unhealthy.duration{brokerguard.circuit.mode=enforce,"+base+"}"]; got != 0 {
		t.Errorf("forced open: unhealthy for %vs, want 0 (an operator's hold)", got)
	}

	b.ForceClose(e.clock.Now().Add(time.Hour))
	e.raw.set(orders, errDown)
	for range 5 {
		_ = e.publish(orders) // ignored: the circuit is held closed
	}
	c = e.collect()
	equalSeries(t, "forced closed", map[string]float64{"brokerguard.circuit.override{brokerguard.circuit.override=forced_closed," + base + "}": 1},
		c.matching("brokerguard.circuit.override"))
	equalSeries(t, "failures ignored under ForceClose", map[string]float64{
		"brokerguard.circuit.calls{brokerguard.call.outcome=published," + base + "}": 1,
		"brokerguard.circuit.calls{brokerguard.call.outcome=failed," + base + "}":    0,
		"brokerguard.circuit.calls{brokerguard.call.outcome=rejected," + base + "}":  0,
		"brokerguard.circuit.calls{brokerguard.call.outcome=neutral," + base + "}":   5,
	}, c.matching("brokerguard.circuit.calls"))

	b.ClearOverride()
	c = e.collect()
	equalSeries(t, "cleared", map[string]float64{}, c.matching("brokerguard.circuit.override"))
}

// TestMessagingSystem checks the messaging.system value of each broker kind.
func TestMessagingSystem(t *testing.T) {
	e := newEnv(t, breaker.Policy{FailureThreshold: 1, BreakDuration: time.Minute}, nil)
	for broker, system := range map[string]string{"kafka": "kafka", "amqp": "rabbitmq", "sqs": "aws_sqs", "nats": "nats"} {
		d := transport.Destination{Broker: broker, Name: "q"}
		if err := e.publish(d); err != nil {
			t.Fatal(err)
		}
		e.m.RecordDispatch(d, 1, 0, 0, 0)
		c := e.collect()
		// three states, the unhealthy duration, four call outcomes, four outbox counters
		if got := c.forDest(system, "q"); len(got) != 12 {
			t.Errorf("broker %s: %d series with messaging.system=%s, want 12: %v", broker, len(got), system, got)
		}
	}
}

// TestCallsByOutcome checks what the calls counter counts and what it leaves alone.
func TestCallsByOutcome(t *testing.T) {
	errBadInput := errors.New("bad input")
	classify := func(err error) breaker.Outcome {
		if errors.Is(err, errBadInput) {
			return breaker.Neutral
		}
		return breaker.Failure
	}
	e := newEnv(t, breaker.Policy{FailureThreshold: 5, BreakDuration: time.Minute}, []registry.Option{registry.WithMaxDestinations(1)})
	pub := e.reg.Guard(e.raw, classify)
	ctx := context.Background()

	e.raw.set(orders, errBadInput)
	if err := pub.Publish(ctx, orders, transport.Message{}); !errors.Is(err, errBadInput) {
		t.Fatal(err)
	}
	if err := pub.Publish(ctx, transport.Destination{Broker: "kafka", Name: "other"}, transport.Message{}); !errors.Is(err, registry.ErrTooManyDestinations) {
		t.Fatalf("publish past the cap: %v", err)
	}
	e.raw.set(orders, &transport.BatchError{Destination: orders, Failed: []transport.MessageError{{Index: 1, Err: errDown}}})
	if err := pub.Publish(ctx, orders, transport.Message{}, transport.Message{}); err == nil {
		t.Fatal("want the batch error")
	}
	e.raw.set(orders, &transport.BatchError{Destination: orders, Failed: []transport.MessageError{{Index: 1, Err: errBadInput}}})
	if err := pub.Publish(ctx, orders, transport.Message{}, transport.Message{}); err == nil {
		t.Fatal("want the batch error")
	}
	base := "messaging.destination.name=orders,messaging.system=kafka}"
	equalSeries(t, "calls", map[string]float64{
		"brokerguard.circuit.calls{brokerguard.call.outcome=published," + base: 1, // half the batch went out
		"brokerguard.circuit.calls{brokerguard.call.outcome=failed," + base:    1,
		"brokerguard.circuit.calls{brokerguard.call.outcome=rejected," + base:  0,
		"brokerguard.circuit.calls{brokerguard.call.outcome=neutral," + base:   1,
	}, e.collect().matching("brokerguard.circuit.calls"))
}

// TestEviction checks that an evicted destination's series end, outbox counters
// included, that its counts start again when it comes back, and that the Recorder
// forgets it.
func TestEviction(t *testing.T) {
	e := newEnv(t, breaker.Policy{FailureThreshold: 5, BreakDuration: time.Minute},
		[]registry.Option{registry.WithIdleEviction(time.Minute)})
	busy := transport.Destination{Broker: "sqs", Name: "busy"}
	e.raw.set(orders, errDown)
	_ = e.publish(orders)
	e.m.RecordDispatch(orders, 0, 0, 1, 0)
	if err := e.publish(busy); err != nil {
		t.Fatal(err)
	}
	c := e.collect()
	wantOrders := newCounts()
	wantOrders.calls["failed"] = 1
	w := destSeries("kafka", "orders", breaker.Closed, 0, wantOrders)
	for _, k := range []string{"published", "deferred", "failed", "dead"} {
		w["brokerguard.outbox."+k+"{messaging.destination.name=orders,messaging.system=kafka}"] = b2f(k == "failed")
	}
	equalSeries(t, "before eviction", w, c.forDest("kafka", "orders"))
	if telemetry.RecordCount(e.rec) != 2 {
		t.Fatalf("recorder holds %d destinations, want 2", telemetry.RecordCount(e.rec))
	}

	// A circuit holding failure evidence is never evicted (registry.WithIdleEviction):
	// a success clears the evidence, so orders can go.
	e.raw.set(orders, nil)
	if err := e.publish(orders); err != nil {
		t.Fatal(err)
	}
	e.reg.EvictIdle() // marks both idle
	e.clock.Advance(time.Minute)
	_ = e.publish(busy)
	if n := e.reg.EvictIdle(); n != 1 {
		t.Fatalf("evicted %d, want 1", n)
	}
	c = e.collect()
	equalSeries(t, "after eviction", map[string]float64{}, c.forDest("kafka", "orders"))
	wantBusy := newCounts()
	wantBusy.calls["published"] = 2
	equalSeries(t, "after eviction, busy", destSeries("aws_sqs", "busy", breaker.Closed, 0, wantBusy), c.forDest("aws_sqs", "busy"))
	if telemetry.RecordCount(e.rec) != 2 {
		t.Fatalf("one collection after eviction: recorder holds %d destinations, want 2 (forgotten at the second)", telemetry.RecordCount(e.rec))
	}
	e.collect()
	if telemetry.RecordCount(e.rec) != 1 {
		t.Fatalf("two collections after eviction: recorder holds %d destinations, want 1", telemetry.RecordCount(e.rec))
	}

	e.raw.set(orders, nil)
	if err := e.publish(orders); err != nil {
		t.Fatal(err)
	}
	wantOrders = newCounts()
	wantOrders.calls["published"] = 1
	equalSeries(t, "back after eviction", destSeries("kafka", "orders", breaker.Closed, 0, wantOrders), e.collect().forDest("kafka", "orders"))
}

// TestClose checks that Close removes every series and stops RecordDispatch, and
// that a second Close does nothing.
func TestClose(t *testing.T) {
	e := newEnv(t, breaker.Policy{FailureThreshold: 1, BreakDuration: time.Minute}, nil,
		telemetry.WithOutboxBacklog(backlogOf(outbox.DestinationBacklog{Destination: orders, Pending: 7, Oldest: time.Second}), 0))
	e.raw.set(orders, errDown)
	_ = e.publish(orders)
	e.m.RecordDispatch(orders, 1, 0, 0, 0)
	if c := e.collect(); len(c.matching("brokerguard.circuit.")) == 0 || len(c.matching("brokerguard.outbox.backlog{")) != 1 {
		t.Fatalf("before Close: %v", c.series)
	}
	if err := e.m.Close(); err != nil {
		t.Fatal(err)
	}
	e.m.RecordDispatch(orders, 5, 0, 0, 0)
	equalSeries(t, "after Close", map[string]float64{}, e.collect().series)
	if err := e.m.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// backlogOf returns a BacklogFunc that reports rows.
func backlogOf(rows ...outbox.DestinationBacklog) telemetry.BacklogFunc {
	return func(context.Context) ([]outbox.DestinationBacklog, error) { return rows, nil }
}

// TestOutbox checks the outbox counters and the per-destination backlog gauges.
func TestOutbox(t *testing.T) {
	events := transport.Destination{Broker: "amqp", Name: "events"}
	e := newEnv(t, breaker.DisabledPolicy(), nil, telemetry.WithOutboxBacklog(backlogOf(
		outbox.DestinationBacklog{Destination: orders, Pending: 12, Oldest: 90 * time.Second},
		outbox.DestinationBacklog{Destination: events, Pending: 1, Oldest: time.Second},
	), 0))
	for _, d := range []transport.Destination{orders, events} {
		if err := e.publish(d); err != nil {
			t.Fatal(err)
		}
	}
	e.m.RecordDispatch(orders, 3, 1, 0, 2)
	e.m.RecordDispatch(orders, 2, 0, 0, 0)
	e.m.RecordDispatch(events, 0, 4, 1, 0)
	c := e.collect()
	o, ev := "{messaging.destination.name=orders,messaging.system=kafka}", "{messaging.destination.name=events,messaging.system=rabbitmq}"
	equalSeries(t, "dispatches", map[string]float64{
		"brokerguard.outbox.published" + o: 5, "brokerguard.outbox.deferred" + o: 1,
		"brokerguard.outbox.failed" + o: 0, "brokerguard.outbox.dead" + o: 2,
		"brokerguard.outbox.published" + ev: 0, "brokerguard.outbox.deferred" + ev: 4,
		"brokerguard.outbox.failed" + ev: 1, "brokerguard.outbox.dead" + ev: 0,
		"brokerguard.outbox.backlog" + o: 12, "brokerguard.outbox.oldest_pending_age" + o: 90,
		"brokerguard.outbox.backlog" + ev: 1, "brokerguard.outbox.oldest_pending_age" + ev: 1,
		"brokerguard.outbox.backlog.errors{}": 0,
	}, c.matching("brokerguard.outbox."))
	for name, w := range map[string]instrument{
		"brokerguard.outbox.published":          {kind: "counter", unit: "{message}", described: true},
		"brokerguard.outbox.deferred":           {kind: "counter", unit: "{message}", described: true},
		"brokerguard.outbox.failed":             {kind: "counter", unit: "{message}", described: true},
		"brokerguard.outbox.dead":               {kind: "counter", unit: "{message}", described: true},
		"brokerguard.outbox.backlog":            {kind: "gauge", unit: "{message}", described: true},
		"brokerguard.outbox.oldest_pending_age": {kind: "gauge", unit: "s", described: true},
		"brokerguard.outbox.backlog.errors":     {kind: "counter", unit: "{error}", described: true},
	} {
		if got := c.instruments[name]; got != w {
			t.Errorf("instrument %s is %+v, want %+v", name, got, w)
		}
	}
}

// TestBacklogThroughAnOutage checks that a failing backlog reading neither removes
// the gauges nor freezes the age (an age alert must not resolve while the database
// is down), that the failures are counted, and that readings are reused for the
// interval rather than made at every collection.
func TestBacklogThroughAnOutage(t *testing.T) {
	errDB := errors.New("database down")
	var (
		reads int
		fail  bool
	)
	read := func(context.Context) ([]outbox.DestinationBacklog, error) {
		reads++
		if fail {
			return nil, errDB
		}
		return []outbox.DestinationBacklog{{Destination: orders, Pending: 3, Oldest: 100 * time.Second}}, nil
	}
	e := newEnv(t, breaker.DisabledPolicy(), nil, telemetry.WithOutboxBacklog(read, 10*time.Second))
	o := "{messaging.destination.name=orders,messaging.system=kafka}"
	backlog := func(step string, pending, age, errs float64) {
		t.Helper()
		equalSeries(t, step, map[string]float64{
			"brokerguard.outbox.backlog" + o: pending, "brokerguard.outbox.oldest_pending_age" + o: age,
			"brokerguard.outbox.backlog.errors{}": errs,
		}, e.collect().matching("brokerguard.outbox."))
	}
	backlog("first reading", 3, 100, 0)
	e.clock.Advance(5 * time.Second)
	backlog("within the interval: reused, aged", 3, 105, 0)
	if reads != 1 {
		t.Fatalf("%d readings within one interval, want 1", reads)
	}
	fail = true
	e.clock.Advance(5 * time.Second)
	backlog("database down", 3, 110, 1)
	e.clock.Advance(50 * time.Second)
	backlog("still down", 3, 160, 2)
	fail = false
	e.clock.Advance(10 * time.Second)
	backlog("back", 3, 100, 2)
	if reads != 4 {
		t.Fatalf("%d readings, want 4", reads)
	}
}

// TestNewErrors checks the arguments New refuses.
func TestNewErrors(t *testing.T) {
	rec := telemetry.NewRecorder()
	reg, err := registry.New(registry.Policy{Circuit: breaker.DisabledPolicy()}, rec.RegistryOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	uncounted, err := registry.New(registry.Policy{Circuit: breaker.DisabledPolicy()})
	if err != nil {
		t.Fatal(err)
	}
	for name, f := range map[string]func() (*telemetry.Metrics, error){
		"nil registry":                 func() (*telemetry.Metrics, error) { return telemetry.New(nil) },
		"registry without call counts": func() (*telemetry.Metrics, error) { return telemetry.New(uncounted) },
		"nil provider":                 func() (*telemetry.Metrics, error) { return telemetry.New(reg, telemetry.WithMeterProvider(nil)) },
		"nil recorder":                 func() (*telemetry.Metrics, error) { return telemetry.New(reg, telemetry.WithRecorder(nil)) },
		"nil clock":                    func() (*telemetry.Metrics, error) { return telemetry.New(reg, telemetry.WithClock(nil)) },
		"nil backlog func":             func() (*telemetry.Metrics, error) { return telemetry.New(reg, telemetry.WithOutboxBacklog(nil, 0)) },
		"negative backlog interval": func() (*telemetry.Metrics, error) {
			return telemetry.New(reg, telemetry.WithOutboxBacklog(backlogOf(), -time.Second))
		},
	} {
		if m, err := f(); err == nil || m != nil {
			t.Errorf("%s: got %v, %v; want an error", name, m, err)
		}
	}
	var m *telemetry.Metrics
	m.RecordDispatch(orders, 1, 1, 1, 1) // a nil Metrics is a no-op hook
}

// The outbox calls its hook through its Hooks interface.
var _ outbox.Hooks = (*telemetry.Metrics)(nil)

// The meter carries this module's version (from the binary's build information), so
// that a backend can tell which brokerguard produced the series.
func TestMeterVersion(t *testing.T) {
	e := newEnv(t, breaker.DisabledPolicy(), nil)
	if err := e.publish(orders); err != nil {
		t.Fatal(err)
	}
	var rm metricdata.ResourceMetrics
	if err := e.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name == telemetry.MeterName && sm.Scope.Version != "" {
			return
		}
	}
	t.Fatalf("no scope %s with a version in %+v", telemetry.MeterName, rm.ScopeMetrics)
}

// TestEveryLiveCircuitExported fills the registry to its default cap, 10,000 live
// circuits, a third of them open, and checks that a scrape through the Prometheus
// exporter has every one of them in every per-destination instrument, and nothing in
// the SDK's overflow series, when the provider's cardinality limit is
// telemetry.CardinalityLimit of the cap. With the SDK's default limit (2,000 series per
// instrument) a scrape of 1,000 destinations already loses some to the overflow
// series: the limit is what keeps the cap's promise.
func TestEveryLiveCircuitExported(t *testing.T) {
	if testing.Short() {
		t.Skip("scrapes 10,000 circuits, a minute or more under the race detector; run without -short (make test does)")
	}
	for _, tc := range []struct {
		name  string
		n     int // live circuits
		limit int // 0: telemetry.CardinalityLimit of the default cap
		all   bool
	}{
		{name: "telemetry.CardinalityLimit", n: registry.DefaultMaxDestinations, all: true},
		{name: "SDK default limit", n: 1000, limit: 2000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := tc.n
			s := newPromService(t, promConfig{policy: breaker.Policy{FailureThreshold: 1, BreakDuration: time.Minute}, limit: tc.limit})
			dests := make([]transport.Destination, n)
			for i := range dests {
				dests[i] = transport.Destination{Broker: "kafka", Name: fmt.Sprintf("topic-%05d", i)}
				if i%3 == 0 {
					s.raw.set(dests[i], errDown)
				}
				_ = s.publish(dests[i])
			}
			if err := s.publish(transport.Destination{Broker: "kafka", Name: "one-too-many"}); tc.all && !errors.Is(err, registry.ErrTooManyDestinations) {
				t.Fatalf("publish past the cap: %v", err)
			}
			body := s.scrapeBody(t)
			perDest := map[string]map[string]int{} // metric -> destination -> series
			for line := range strings.Lines(body) {
				name, rest, ok := strings.Cut(line, "{")
				if !ok || !strings.HasPrefix(name, "brokerguard_circuit_") {
					continue
				}
				_, d, ok := strings.Cut(rest, `messaging_destination_name="`)
				if !ok {
					continue
				}
				d, _, _ = strings.Cut(d, `"`)
				if perDest[name] == nil {
					perDest[name] = map[string]int{}
				}
				perDest[name][d]++
			}
			for metric, series := range map[string]int{
				"brokerguard_circuit_state":                      3,
				"brokerguard_circuit_unhealthy_duration_seconds": 1,
				"brokerguard_circuit_calls_total":                4,
			} {
				got, full := perDest[metric], 0
				for _, k := range got {
					if k == series {
						full++
					}
				}
				if tc.all && (len(got) != n || full != n) {
					t.Errorf("%s: %d destinations, %d with all %d series; want all %d", metric, len(got), full, series, n)
				}
				if !tc.all && full == n {
					t.Errorf("%s: every destination exported under the SDK's default limit; the test no longer shows why the limit is needed", metric)
				}
			}
			if overflow := strings.Contains(body, `otel_metric_overflow="true"`); overflow != !tc.all {
				t.Errorf("overflow series present: %v, want %v", overflow, !tc.all)
			}
			if tc.all && !hasLine(body, fmt.Sprintf("brokerguard_circuit_open %d", (n+2)/3)) {
				t.Errorf("brokerguard_circuit_open is not %d", (n+2)/3)
			}
		})
	}
}

// TestConcurrentPublishAndCollect publishes from several goroutines while the clock
// moves and a reader collects, then checks that every failure and rejection the
// callers saw was counted once.
func TestConcurrentPublishAndCollect(t *testing.T) {
	e := newEnv(t, breaker.Policy{FailureThreshold: 3, BreakDuration: time.Second}, nil)
	healthy := transport.Destination{Broker: "kafka", Name: "healthy"}
	e.raw.set(orders, errDown)
	var failures, rejections atomic.Int64
	stop := make(chan struct{})
	var collector, publishers sync.WaitGroup
	collector.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
				e.collect()
			}
		}
	})
	for range 4 {
		publishers.Go(func() {
			for i := range 300 {
				if i%50 == 0 {
					e.clock.Advance(time.Second) // lets the open circuit admit probes
				}
				err := e.publish(orders)
				switch {
				case errors.Is(err, errDown):
					failures.Add(1)
				case errors.Is(err, breaker.ErrOpen):
					rejections.Add(1)
				default:
					t.Errorf("publish to orders: %v", err)
				}
				if err := e.publish(healthy); err != nil {
					t.Errorf("publish to healthy: %v", err)
				}
			}
		})
	}
	publishers.Wait()
	close(stop)
	collector.Wait()

	c := e.collect()
	calls := func(outcome string) float64 {
		return c.series["brokerguard.circuit.calls{brokerguard.call.outcome="+outcome+",messaging.destination.name=orders,messaging.system=kafka}"]
	}
	// A failure the circuit took is "failed"; one it no longer could (completed after
	// another caller's failure opened the circuit) is "neutral".
	if got, want := calls("failed")+calls("neutral"), float64(failures.Load()); got != want || calls("failed") < 3 {
		t.Errorf("failed %v + neutral %v calls counted, callers saw %v failures", calls("failed"), calls("neutral"), want)
	}
	if got, want := calls("rejected"), float64(rejections.Load()); got != want {
		t.Errorf("rejections counted %v, callers saw %v", got, want)
	}
	if rejections.Load() == 0 || failures.Load() <= 3 {
		t.Errorf("the run did not exercise the circuit: %d failures, %d rejections", failures.Load(), rejections.Load())
	}
	if n := len(c.forDest("kafka", "healthy")); n != 8 {
		t.Errorf("healthy destination has %d series, want its 3 state series, its unhealthy duration and 4 call outcomes", n)
	}
}

// A shared circuit whose store refuses its failures reports itself degraded, and its
// local opening shows as an open state: the unhealthy alert can fire.
func TestSharedDegraded(t *testing.T) {
	store := &circuittest.MemoryDriver{}
	var e *env
	factory := func(d transport.Destination, p breaker.Policy) (breaker.Circuit, error) {
		return sharedstate.New(sharedstate.Config{Identity: d.String(), Policy: p, Scope: breaker.SharedDependency,
			Driver: store, Clock: e.clock})
	}
	p := breaker.Policy{FailureThreshold: 2, BreakDuration: time.Minute, Scope: breaker.SharedDependency}
	e = newEnv(t, p, []registry.Option{registry.WithCircuitFactory(breaker.SharedDependency, factory)})
	orders := transport.Destination{Broker: "kafka", Name: "orders"}
	e.publish(orders)
	d := "messaging.destination.name=orders,messaging.system=kafka}"
	if got := e.collect().matching("brokerguard.circuit.shared.degraded"); len(got) != 0 {
		t.Fatalf("a healthy store: %v; want no degraded series", got)
	}
	store.RefuseWrites(errDown)
	e.raw.set(orders, errDown)
	e.publish(orders)
	e.publish(orders)
	c := e.collect()
	equalSeries(t, "degraded", map[string]float64{"brokerguard.circuit.shared.degraded{" + d: 1},
		c.matching("brokerguard.circuit.shared.degraded"))
	if got := c.series["brokerguard.circuit.state{brokerguard.circuit.mode=enforce,brokerguard.circuit.state=open,"+d]; got != 1 {
		t.Errorf("state open = %v after the threshold with writes refused; want 1", got)
	}
	if inst := c.instruments["brokerguard.circuit.shared.degraded"]; inst.kind != "updowncounter" || inst.unit != "1" || !inst.described {
		t.Fatalf("instrument %+v", inst)
	}
}

// Rollout modes show in telemetry: every circuit series that describes the circuit
// carries its mode, so that alerts can tell an enforcing circuit from one that lets
// traffic through; what Shadow would have rejected and what FailOpen let through are
// counted per destination; an enforcing circuit has no such series. Those calls are
// not probes, and their outcomes, which the circuit ignores, are not failures.
func TestModes(t *testing.T) {
	failing := breaker.Policy{FailureThreshold: 1, BreakDuration: time.Hour}
	shadow, failOpen := failing, failing
	shadow.Mode, failOpen.Mode = breaker.Shadow, breaker.FailOpen
	e := newEnv(t, failing, []registry.Option{
		registry.WithOverride("kafka:shadowed", registry.Policy{Circuit: shadow}),
		registry.WithOverride("amqp:audit", registry.Policy{Circuit: failOpen}),
	})
	shadowed := transport.Destination{Broker: "kafka", Name: "shadowed"}
	audit := transport.Destination{Broker: "amqp", Name: "audit"}
	enforced := transport.Destination{Broker: "kafka", Name: "enforced"}
	for _, d := range []transport.Destination{shadowed, audit, enforced} {
		e.raw.set(d, errDown)
	}
	for range 3 { // the first call of each opens its circuit; the next two would be refused
		for _, d := range []transport.Destination{shadowed, audit, enforced} {
			e.publish(d)
		}
	}
	e.clock.Advance(time.Minute)
	c := e.collect()
	sh, au := "messaging.destination.name=shadowed,messaging.system=kafka}", "messaging.destination.name=audit,messaging.system=rabbitmq}"
	equalSeries(t, "bypassed", map[string]float64{
		"brokerguard.circuit.bypassed{brokerguard.circuit.mode=shadow," + sh:    2,
		"brokerguard.circuit.bypassed{brokerguard.circuit.mode=fail_open," + au: 2,
	}, c.matching("brokerguard.circuit.bypassed"))
	equalSeries(t, "unhealthy, by mode", map[string]float64{
		"brokerguard.circuit.unhealthy.duration{brokerguard.circuit.mode=shadow," + sh:                                                        60,
		"brokerguard.circuit.unhealthy.duration{brokerguard.circuit.mode=fail_open," + au:                                                     60,
		"brokerguard.circuit.unhealthy.duration{brokerguard.circuit.mode=enforce,messaging.destination.name=enforced,messaging.system=kafka}": 60,
	}, c.matching("brokerguard.circuit.unhealthy.duration"))
	for _, d := range []string{sh, au} {
		if got := c.series["brokerguard.circuit.state{brokerguard.circuit.mode="+map[string]string{sh: "shadow", au: "fail_open"}[d]+",brokerguard.circuit.state=open,"+d]; got != 1 {
			t.Errorf("%s: open = %v, want 1 with its mode", d, got)
		}
		if got := c.series["brokerguard.circuit.calls{brokerguard.call.outcome=failed,"+d]; got != 1 {
			t.Errorf("%s: %v failed calls, want 1 (the opening one; the circuit ignored the others)", d, got)
		}
		if got := c.series["brokerguard.circuit.calls{brokerguard.call.outcome=neutral,"+d]; got != 2 {
			t.Errorf("%s: %v neutral calls, want 2", d, got)
		}
	}
	if n := len(c.matching("brokerguard.circuit.probes")); n != 0 {
		t.Errorf("%d probe series; bypasses are not probes", n)
	}
	if inst := c.instruments["brokerguard.circuit.bypassed"]; inst.kind != "counter" || inst.unit != "{call}" || !inst.described {
		t.Fatalf("instrument %+v", inst)
	}
}

// The isolated partitions of a destination are one count per destination, present
// only while some are isolated; the isolations are counted, and are not transitions
// of the destination's circuit.
func TestIsolatedPartitionsGauge(t *testing.T) {
	e := newEnv(t, breaker.Policy{FailureThreshold: 5, BreakDuration: time.Second}, nil)
	orders := transport.Destination{Broker: "kafka", Name: "orders"}
	e.publish(orders)
	ps, err := e.reg.Partitions(orders)
	if err != nil {
		t.Fatal(err)
	}
	ps.SetCount(6)
	for _, p := range []int{1, 4} {
		for range 5 { // the policy's FailureThreshold
			ps.Complete(p, breaker.Failure)
		}
	}
	d := "messaging.destination.name=orders,messaging.system=kafka}"
	equalSeries(t, "isolated partitions", map[string]float64{"brokerguard.circuit.partitions.isolated{" + d: 2},
		e.collect().matching("brokerguard.circuit.partitions.isolated"))
	ps.Complete(1, breaker.Success)
	ps.Complete(4, breaker.Success)
	c := e.collect()
	equalSeries(t, "isolated partitions", map[string]float64{}, c.matching("brokerguard.circuit.partitions.isolated{"))
	equalSeries(t, "partition isolations", map[string]float64{"brokerguard.circuit.partitions.isolations{" + d: 2},
		c.matching("brokerguard.circuit.partitions.isolations"))
	equalSeries(t, "circuit transitions", map[string]float64{}, c.matching("brokerguard.circuit.transitions"))
}

// Calls a circuit turns away while ramping up after recovery are counted per
// destination, and are rejected calls too; a destination that never ramped has no
// ramp series.
func TestRampRefusals(t *testing.T) {
	e := newEnv(t, breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second, RampDuration: time.Minute}, nil)
	orders := transport.Destination{Broker: "kafka", Name: "orders"}
	steady := transport.Destination{Broker: "kafka", Name: "steady"}
	e.publish(steady)
	e.raw.set(orders, errDown)
	e.publish(orders) // opens
	e.raw.set(orders, nil)
	e.clock.Advance(time.Second)
	e.publish(orders) // the probe closes: the ramp starts at 10 %
	refused := 0
	for range 100 {
		if err := e.publish(orders); rampRefusal(err) {
			refused++
		}
	}
	if refused < 80 {
		t.Fatalf("the ramp refused %d of 100 publishes, want about 90", refused)
	}
	c := e.collect()
	d := "messaging.destination.name=orders,messaging.system=kafka}"
	equalSeries(t, "ramp refusals", map[string]float64{"brokerguard.circuit.ramp.refused{" + d: float64(refused)},
		c.matching("brokerguard.circuit.ramp.refused"))
	if got := c.series["brokerguard.circuit.calls{brokerguard.call.outcome=rejected,"+d]; got != float64(refused) {
		t.Errorf("%v rejected calls, want the %d ramp refusals", got, refused)
	}
	if inst := c.instruments["brokerguard.circuit.ramp.refused"]; inst.kind != "counter" || inst.unit != "{call}" || !inst.described {
		t.Fatalf("instrument %+v", inst)
	}
}

// An SQS queue has one identity whether publishes name it or give its URL: the calls
// are counted under the queue's name, with its circuit, and no series is filed under
// the URL. The SQS server is the in-process test server, driven by the real SDK.
func TestSQSQueueByURLOrName(t *testing.T) {
	srv, err := sqstest.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	client := awssqs.New(awssqs.Options{
		BaseEndpoint: aws.String(srv.URL()), Region: "us-east-1", RetryMaxAttempts: 1,
		Credentials: credentials.NewStaticCredentialsProvider("AKID", "secret", ""),
	})
	ctx := context.Background()
	if _, err := client.CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("invoices")}); err != nil {
		t.Fatal(err)
	}
	s := newPromService(t, promConfig{policy: breaker.Policy{FailureThreshold: 2, BreakDuration: time.Minute}})
	pub, err := sqs.NewPublisher(client, s.reg)
	if err != nil {
		t.Fatal(err)
	}
	byName := transport.Destination{Broker: "sqs", Name: "invoices"}
	byURL := transport.Destination{Broker: "sqs", Name: srv.QueueURL("invoices")}
	msg := transport.Message{Value: []byte("invoice")}
	for _, d := range []transport.Destination{byName, byURL, byURL} {
		if err := pub.Publish(ctx, d, msg); err != nil {
			t.Fatalf("publish to %s: %v", d, err)
		}
	}
	srv.SetFault("invoices", sqstest.ServiceUnavailable)
	for _, d := range []transport.Destination{byURL, byName, byURL} { // two failures open the circuit; the third is rejected
		if err := pub.Publish(ctx, d, msg); err == nil {
			t.Fatalf("publish to %s succeeded during the fault", d)
		}
	}
	body := s.scrapeBody(t)
	lbl := `messaging_destination_name="invoices",messaging_system="aws_sqs"`
	for _, want := range []string{
		`brokerguard_circuit_calls_total{brokerguard_call_outcome="published",` + lbl + `} 3`,
		`brokerguard_circuit_calls_total{brokerguard_call_outcome="failed",` + lbl + `} 2`,
		`brokerguard_circuit_calls_total{brokerguard_call_outcome="rejected",` + lbl + `} 1`,
		`brokerguard_circuit_state{brokerguard_circuit_mode="enforce",brokerguard_circuit_state="open",` + lbl + `} 1`,
	} {
		if !hasLine(body, want) {
			t.Errorf("scrape lacks %q", want)
		}
	}
	if strings.Contains(body, "http://") {
		t.Errorf("a series is filed under the queue URL")
	}
	if t.Failed() {
		t.Logf("scraped:\n%s", body)
	}
}

// promService is a service exporting its metrics the way docs/telemetry.md says: the
// OpenTelemetry Prometheus exporter, a resource naming the service, no scope labels,
// and the cardinality limit for the registry's cap.
type promService struct {
	clock *fakeclock.Clock
	reg   *registry.Registry
	m     *telemetry.Metrics
	raw   *fakePublisher
	pub   transport.Publisher
	url   string // of /metrics
}

// promConfig says how to build a promService.
type promConfig struct {
	policy  breaker.Policy
	regOpts []registry.Option
	opts    []telemetry.Option
	limit   int // the provider's cardinality limit; 0: telemetry.CardinalityLimit of the registry's default cap
}

func newPromService(t testing.TB, cfg promConfig) *promService {
	t.Helper()
	s := &promService{clock: fakeclock.New(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)), raw: &fakePublisher{}}
	rec := telemetry.NewRecorder()
	regOpts := append(append([]registry.Option{registry.WithClock(s.clock)}, rec.RegistryOptions()...), cfg.regOpts...)
	reg, err := registry.New(registry.Policy{Circuit: cfg.policy}, regOpts...)
	if err != nil {
		t.Fatal(err)
	}
	s.reg = reg
	promReg := promclient.NewRegistry()
	exporter, err := prometheus.New(prometheus.WithRegisterer(promReg), prometheus.WithoutScopeInfo(),
		prometheus.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes))
	if err != nil {
		t.Fatal(err)
	}
	limit := cfg.limit
	if limit == 0 {
		limit = telemetry.CardinalityLimit(registry.DefaultMaxDestinations)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter), sdkmetric.WithCardinalityLimit(limit),
		sdkmetric.WithResource(resource.NewSchemaless(attribute.String("service.name", "brokerguard-test"))))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	opts := append([]telemetry.Option{telemetry.WithRecorder(rec), telemetry.WithMeterProvider(mp), telemetry.WithClock(s.clock)}, cfg.opts...)
	m, err := telemetry.New(reg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	s.m = m
	s.pub = reg.Guard(s.raw, nil)
	srv := httptest.NewUnstartedServer(promhttp.HandlerFor(promReg, promhttp.HandlerOpts{}))
	srv.Start()
	t.Cleanup(srv.Close)
	s.url = srv.URL + "/metrics"
	return s
}

func (s *promService) publish(d transport.Destination) error {
	return s.pub.Publish(context.Background(), d, transport.Message{Value: []byte("m")})
}

// scrapeBody GETs the service's /metrics.
func (s *promService) scrapeBody(t testing.TB) string {
	t.Helper()
	resp, err := http.Get(s.url)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}

// TestPrometheusExposition checks the names, types and units of every instrument as
// Prometheus scrapes them: no suffix Prometheus reserves on a gauge, counters ending
// in _total, seconds in the name, the service named, no scope labels.
func TestPrometheusExposition(t *testing.T) {
	payments := transport.Destination{Broker: "sqs", Name: "payments"}
	s := newPromService(t, promConfig{
		policy: breaker.Policy{FailureThreshold: 2, BreakDuration: 30 * time.Second},
		regOpts: []registry.Option{registry.WithOverride("sqs:payments",
			registry.Policy{Circuit: breaker.Policy{FailureThreshold: 2, BreakDuration: 30 * time.Second, Mode: breaker.FailOpen}})},
		opts: []telemetry.Option{telemetry.WithOutboxBacklog(backlogOf(outbox.DestinationBacklog{Destination: payments, Pending: 4, Oldest: 1500 * time.Millisecond}), 0)},
	})
	s.raw.set(payments, errDown)
	for range 3 {
		_ = s.publish(payments)
	}
	s.clock.Advance(5 * time.Second)
	s.m.RecordDispatch(payments, 0, 6, 0, 0)
	body := s.scrapeBody(t)

	lbl := `messaging_destination_name="payments",messaging_system="aws_sqs"`
	for _, want := range []string{
		"# TYPE brokerguard_circuit_open gauge",
		"brokerguard_circuit_open 1",
		"# TYPE brokerguard_circuit_failures gauge",
		"brokerguard_circuit_failures 2",
		"# TYPE brokerguard_circuit_state gauge",
		`brokerguard_circuit_state{brokerguard_circuit_mode="fail_open",brokerguard_circuit_state="open",` + lbl + `} 1`,
		`brokerguard_circuit_state{brokerguard_circuit_mode="fail_open",brokerguard_circuit_state="half_open",` + lbl + `} 0`,
		"# TYPE brokerguard_circuit_unhealthy_duration_seconds gauge",
		`brokerguard_circuit_unhealthy_duration_seconds{brokerguard_circuit_mode="fail_open",` + lbl + `} 5`,
		"# TYPE brokerguard_circuit_calls_total counter",
		`brokerguard_circuit_calls_total{brokerguard_call_outcome="failed",` + lbl + `} 2`,
		`brokerguard_circuit_calls_total{brokerguard_call_outcome="neutral",` + lbl + `} 1`,
		`brokerguard_circuit_calls_total{brokerguard_call_outcome="rejected",` + lbl + `} 0`,
		`brokerguard_circuit_calls_total{brokerguard_call_outcome="published",` + lbl + `} 0`,
		"# TYPE brokerguard_circuit_transitions_total counter",
		`brokerguard_circuit_transitions_total{brokerguard_circuit_state="open",` + lbl + `} 1`,
		"# TYPE brokerguard_circuit_bypassed_total counter",
		`brokerguard_circuit_bypassed_total{brokerguard_circuit_mode="fail_open",` + lbl + `} 1`,
		"# TYPE brokerguard_outbox_deferred_total counter",
		"brokerguard_outbox_deferred_total{" + lbl + "} 6",
		"# TYPE brokerguard_outbox_backlog gauge",
		"brokerguard_outbox_backlog{" + lbl + "} 4",
		"# TYPE brokerguard_outbox_oldest_pending_age_seconds gauge",
		"brokerguard_outbox_oldest_pending_age_seconds{" + lbl + "} 1.5",
		"# TYPE brokerguard_outbox_backlog_errors_total counter",
		"brokerguard_outbox_backlog_errors_total 0",
		`target_info{service_name="brokerguard-test"} 1`,
	} {
		if !hasLine(body, want) {
			t.Errorf("scrape lacks the line %q", want)
		}
	}
	for _, bad := range []string{"otel_scope_", "_ratio", "_count ", "unknown_service", "otel_metric_overflow"} {
		if strings.Contains(body, bad) {
			t.Errorf("scrape contains %q", bad)
		}
	}
	if t.Failed() {
		t.Logf("scraped:\n%s", body)
	}
}

func hasLine(body, line string) bool {
	for l := range strings.Lines(body) {
		if strings.TrimRight(l, "\n") == line {
			return true
		}
	}
	return false
}

// rampRefusal reports whether err is a ramping circuit's refusal.
func rampRefusal(err error) bool {
	oe, ok := errors.AsType[*breaker.OpenError](err)
	return ok && oe.Ramping
}
