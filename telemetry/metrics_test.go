package telemetry_test

import (
	"context"
	"errors"
	"maps"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/telemetry"
	"github.com/brokerguard/brokerguard/transport"
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
