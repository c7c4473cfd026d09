package telemetry_test

import (
	"context"
	"errors"
	"maps"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/telemetry"
	"github.com/brokerguard/brokerguard/transport"
)

var orders = transport.Destination{Broker: "kafka", Name: "orders"}

// wantInstruments is every circuit instrument: its kind and unit.
var wantInstruments = map[string]instrument{
	"brokerguard.circuit.open":          {kind: "gauge", unit: "{circuit}", described: true},
	"brokerguard.circuit.failure_count": {kind: "gauge", unit: "{failure}", described: true},
	"brokerguard.circuit.state":         {kind: "gauge", unit: "{circuit}", described: true},
	"brokerguard.circuit.override":      {kind: "gauge", unit: "{circuit}", described: true},
	"brokerguard.circuit.failures":      {kind: "counter", unit: "{failure}", described: true},
	"brokerguard.circuit.transitions":   {kind: "counter", unit: "{transition}", described: true},
	"brokerguard.circuit.rejections":    {kind: "counter", unit: "{call}", described: true},
	"brokerguard.circuit.probes":        {kind: "counter", unit: "{call}", described: true},
}

// TestCycle drives one circuit closed -> open -> half-open -> open -> half-open ->
// closed and checks every series, and every instrument's kind and unit, after each step.
func TestCycle(t *testing.T) {
	e := newEnv(t, breaker.Policy{FailureThreshold: 2, BreakDuration: 10 * time.Second, SuccessesToClose: 2}, nil)
	want := newCounts()
	check := func(step string, state breaker.State, failureCount float64, withCounters bool) {
		t.Helper()
		c := e.collect()
		if got := c.series["brokerguard.circuit.failure_count{}"]; got != float64(e.reg.FailureCount()) {
			t.Errorf("%s: failure_count %v, registry says %d", step, got, e.reg.FailureCount())
		}
		ws := destSeries("kafka", "orders", state, nil)
		if withCounters {
			ws = destSeries("kafka", "orders", state, want)
		}
		ws["brokerguard.circuit.open{}"] = b2f(state != breaker.Closed)
		ws["brokerguard.circuit.failure_count{}"] = failureCount
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
	check("closed, healthy", breaker.Closed, 0, false)

	e.raw.set(orders, errDown)
	mustFail(e.publish(orders))
	want.failures = 1
	check("closed, one failure", breaker.Closed, 1, true)

	mustFail(e.publish(orders))
	want.failures, want.transitions["opened"] = 2, 1
	check("open", breaker.Open, 2, true)

	if err := e.publish(orders); !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("publish to an open circuit: %v", err)
	}
	want.rejections = 1
	check("open, rejected", breaker.Open, 2, true)

	e.clock.Advance(10 * time.Second)
	mustFail(e.publish(orders)) // the probe fails: open again
	want.failures, want.transitions["half_opened"], want.transitions["opened"], want.probes["failure"] = 3, 1, 2, 1
	check("probe failed", breaker.Open, 2, true)

	e.clock.Advance(10 * time.Second)
	e.raw.set(orders, nil)
	if err := e.publish(orders); err != nil { // first of two successes: still half-open
		t.Fatal(err)
	}
	want.transitions["half_opened"], want.probes["success"] = 2, 1
	check("half-open", breaker.HalfOpen, 2, true)

	if err := e.publish(orders); err != nil {
		t.Fatal(err)
	}
	want.transitions["closed"], want.probes["success"] = 1, 2
	check("closed again", breaker.Closed, 0, true)

	if err := e.publish(orders); err != nil { // a plain call again, not a probe
		t.Fatal(err)
	}
	check("closed, healthy again", breaker.Closed, 0, true)
}

// TestAggregateGauges checks that circuit.open is 1 while any circuit is open or
// half-open and that failure_count sums every circuit's evidence.
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
	maps.Copy(agg, c.matching("brokerguard.circuit.failure_count"))
	equalSeries(t, "one open, one closed with failures", map[string]float64{
		"brokerguard.circuit.open{}":          1,
		"brokerguard.circuit.failure_count{}": 5,
	}, agg)

	c1, err := e.reg.Circuit(orders)
	if err != nil {
		t.Fatal(err)
	}
	c1.(*breaker.Breaker).ForceClose(e.clock.Now().Add(time.Hour))
	c = e.collect()
	agg = c.matching("brokerguard.circuit.open")
	maps.Copy(agg, c.matching("brokerguard.circuit.failure_count"))
	equalSeries(t, "both closed", map[string]float64{
		"brokerguard.circuit.open{}":          0,
		"brokerguard.circuit.failure_count{}": 2,
	}, agg)
}

// TestOverride checks the override gauge and that the override's transitions count.
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
	base := "{messaging.destination.name=orders,messaging.system=kafka,"

	b.ForceOpen(e.clock.Now().Add(time.Hour))
	c := e.collect()
	equalSeries(t, "forced open", map[string]float64{"brokerguard.circuit.override" + base + "override=forced-open}": 1},
		c.matching("brokerguard.circuit.override"))
	if got := c.series["brokerguard.circuit.state"+base+"state=open}"]; got != 1 {
		t.Errorf("forced open: state open = %v, want 1", got)
	}
	if got := c.series["brokerguard.circuit.transitions"+base+"transition=opened}"]; got != 1 {
		t.Errorf("forced open: opened transitions = %v, want 1", got)
	}

	b.ForceClose(e.clock.Now().Add(time.Hour))
	c = e.collect()
	equalSeries(t, "forced closed", map[string]float64{"brokerguard.circuit.override" + base + "override=forced-closed}": 1},
		c.matching("brokerguard.circuit.override"))

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
		if got := c.forDest(system, "q"); len(got) != 4 { // three states and the outbox counter
			t.Errorf("broker %s: %d series with messaging.system=%s, want 4: %v", broker, len(got), system, got)
		}
	}
}

// TestInstrumentCounts checks what the instrumented publisher counts and what it
// leaves alone.
func TestInstrumentCounts(t *testing.T) {
	errBadInput := errors.New("bad input")
	classify := func(err error) breaker.Outcome {
		if errors.Is(err, errBadInput) {
			return breaker.Neutral
		}
		return breaker.Failure
	}
	e := newEnv(t, breaker.Policy{FailureThreshold: 5, BreakDuration: time.Minute}, []registry.Option{registry.WithMaxDestinations(1)})
	pub := e.m.Instrument(e.reg.Guard(e.raw, classify), classify)
	ctx := context.Background()

	e.raw.set(orders, errBadInput)
	if err := pub.Publish(ctx, orders, transport.Message{}); !errors.Is(err, errBadInput) {
		t.Fatal(err)
	}
	other := transport.Destination{Broker: "kafka", Name: "other"}
	if err := pub.Publish(ctx, other); !errors.Is(err, registry.ErrTooManyDestinations) {
		t.Fatalf("publish past the cap: %v", err)
	}
	if err := pub.Publish(ctx, transport.Destination{Broker: "Kafka", Name: "x"}); !errors.Is(err, transport.ErrInvalidDestination) {
		t.Fatalf("publish to an invalid destination: %v", err)
	}
	equalSeries(t, "neutral error, refused destinations", map[string]float64{}, e.collect().matching("brokerguard.circuit.failures"))

	e.raw.set(orders, &transport.BatchError{Destination: orders, Failed: []transport.MessageError{{Index: 1, Err: errDown}}})
	if err := pub.Publish(ctx, orders, transport.Message{}, transport.Message{}); err == nil {
		t.Fatal("want the batch error")
	}
	equalSeries(t, "batch with a failure", map[string]float64{
		"brokerguard.circuit.failures{messaging.destination.name=orders,messaging.system=kafka}": 1,
	}, e.collect().matching("brokerguard.circuit.failures"))
}

// TestEviction checks that an evicted destination's series end, that its counts
// start again when it comes back, and that the Recorder forgets it.
func TestEviction(t *testing.T) {
	e := newEnv(t, breaker.Policy{FailureThreshold: 5, BreakDuration: time.Minute},
		[]registry.Option{registry.WithIdleEviction(time.Minute)})
	busy := transport.Destination{Broker: "sqs", Name: "busy"}
	e.raw.set(orders, errDown)
	_ = e.publish(orders)
	if err := e.publish(busy); err != nil {
		t.Fatal(err)
	}
	c := e.collect()
	wantOrders := newCounts()
	wantOrders.failures = 1
	equalSeries(t, "before eviction", destSeries("kafka", "orders", breaker.Closed, wantOrders), c.forDest("kafka", "orders"))
	if telemetry.RecordCount(e.rec) != 2 {
		t.Fatalf("recorder holds %d destinations, want 2", telemetry.RecordCount(e.rec))
	}

	e.reg.EvictIdle() // marks both idle
	e.clock.Advance(time.Minute)
	_ = e.publish(busy)
	if n := e.reg.EvictIdle(); n != 1 {
		t.Fatalf("evicted %d, want 1", n)
	}
	c = e.collect()
	equalSeries(t, "after eviction", map[string]float64{}, c.forDest("kafka", "orders"))
	equalSeries(t, "after eviction, busy", destSeries("aws_sqs", "busy", breaker.Closed, nil), c.forDest("aws_sqs", "busy"))
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
	equalSeries(t, "back after eviction", destSeries("kafka", "orders", breaker.Closed, nil), e.collect().forDest("kafka", "orders"))
}

// TestClose checks that Close removes every observed instrument's series and stops
// RecordDispatch, and that a second Close does nothing.
func TestClose(t *testing.T) {
	pending := int64(7)
	e := newEnv(t, breaker.Policy{FailureThreshold: 1, BreakDuration: time.Minute}, nil,
		telemetry.WithOutboxBacklog(func(context.Context) (int64, time.Duration, error) { return pending, time.Second, nil }))
	e.raw.set(orders, errDown)
	_ = e.publish(orders)
	e.m.RecordDispatch(orders, 1, 0, 0, 0)
	if c := e.collect(); len(c.matching("brokerguard.circuit.")) == 0 || len(c.matching("brokerguard.outbox.backlog")) != 1 {
		t.Fatalf("before Close: %v", c.series)
	}
	if err := e.m.Close(); err != nil {
		t.Fatal(err)
	}
	e.m.RecordDispatch(orders, 5, 0, 0, 0)
	c := e.collect()
	equalSeries(t, "after Close", map[string]float64{
		// Synchronous counters keep their series; the dispatch after Close added nothing.
		"brokerguard.outbox.published{messaging.destination.name=orders,messaging.system=kafka}": 1,
	}, c.series)
	if err := e.m.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// TestOutbox checks the outbox counters and backlog gauges.
func TestOutbox(t *testing.T) {
	errDB := errors.New("database down")
	var backlogErr error
	e := newEnv(t, breaker.Policy{}, nil, telemetry.WithOutboxBacklog(func(ctx context.Context) (int64, time.Duration, error) {
		return 12, 90 * time.Second, backlogErr
	}))
	events := transport.Destination{Broker: "amqp", Name: "events"}
	e.m.RecordDispatch(orders, 3, 1, 0, 2)
	e.m.RecordDispatch(orders, 2, 0, 0, 0)
	e.m.RecordDispatch(events, 0, 4, 1, 0)
	c := e.collect()
	want := map[string]float64{
		"brokerguard.outbox.published{messaging.destination.name=orders,messaging.system=kafka}":   5,
		"brokerguard.outbox.deferred{messaging.destination.name=orders,messaging.system=kafka}":    1,
		"brokerguard.outbox.dead{messaging.destination.name=orders,messaging.system=kafka}":        2,
		"brokerguard.outbox.deferred{messaging.destination.name=events,messaging.system=rabbitmq}": 4,
		"brokerguard.outbox.failed{messaging.destination.name=events,messaging.system=rabbitmq}":   1,
		"brokerguard.outbox.backlog{}":            12,
		"brokerguard.outbox.oldest_pending_age{}": 90,
	}
	equalSeries(t, "dispatches", want, c.matching("brokerguard.outbox."))
	for name, w := range map[string]instrument{
		"brokerguard.outbox.published":          {kind: "counter", unit: "{message}", described: true},
		"brokerguard.outbox.deferred":           {kind: "counter", unit: "{message}", described: true},
		"brokerguard.outbox.failed":             {kind: "counter", unit: "{message}", described: true},
		"brokerguard.outbox.dead":               {kind: "counter", unit: "{message}", described: true},
		"brokerguard.outbox.backlog":            {kind: "gauge", unit: "{message}", described: true},
		"brokerguard.outbox.oldest_pending_age": {kind: "gauge", unit: "s", described: true},
	} {
		if got := c.instruments[name]; got != w {
			t.Errorf("instrument %s is %+v, want %+v", name, got, w)
		}
	}

	backlogErr = errDB
	c, err := collectFrom(e.reader)
	if !errors.Is(err, errDB) {
		t.Fatalf("collect with a failing backlog: %v, want the backlog's error", err)
	}
	delete(want, "brokerguard.outbox.backlog{}")
	delete(want, "brokerguard.outbox.oldest_pending_age{}")
	equalSeries(t, "backlog failing", want, c.matching("brokerguard.outbox."))
}

// TestNewErrors checks the arguments New refuses.
func TestNewErrors(t *testing.T) {
	reg, err := registry.New(breaker.Policy{})
	if err != nil {
		t.Fatal(err)
	}
	for name, f := range map[string]func() (*telemetry.Metrics, error){
		"nil registry":     func() (*telemetry.Metrics, error) { return telemetry.New(nil) },
		"nil provider":     func() (*telemetry.Metrics, error) { return telemetry.New(reg, telemetry.WithMeterProvider(nil)) },
		"nil recorder":     func() (*telemetry.Metrics, error) { return telemetry.New(reg, telemetry.WithRecorder(nil)) },
		"nil backlog func": func() (*telemetry.Metrics, error) { return telemetry.New(reg, telemetry.WithOutboxBacklog(nil)) },
	} {
		if m, err := f(); err == nil || m != nil {
			t.Errorf("%s: got %v, %v; want an error", name, m, err)
		}
	}
	var m *telemetry.Metrics
	m.RecordDispatch(orders, 1, 1, 1, 1) // a nil Metrics is a no-op hook
}

// The outbox calls its hook through an interface of its own with this method.
var _ interface {
	RecordDispatch(d transport.Destination, published, deferred, failed, dead int)
} = (*telemetry.Metrics)(nil)
