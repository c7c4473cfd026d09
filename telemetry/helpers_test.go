package telemetry_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/telemetry"
	"github.com/brokerguard/brokerguard/transport"
)

var errDown = fmt.Errorf("broker down")

// fakePublisher fails the destinations told to fail, after the delay it was told
// (a broker that takes its time to answer, in tests that run in real time).
type fakePublisher struct {
	mu     sync.Mutex
	errs   map[transport.Destination]error
	delays map[transport.Destination]time.Duration
}

func (p *fakePublisher) Publish(_ context.Context, d transport.Destination, _ ...transport.Message) error {
	p.mu.Lock()
	err, delay := p.errs[d], p.delays[d]
	p.mu.Unlock()
	if delay > 0 {
		time.Sleep(delay)
	}
	return err
}

func (p *fakePublisher) set(d transport.Destination, err error) { p.setSlow(d, err, 0) }

// setSlow makes publishes to d return err after delay.
func (p *fakePublisher) setSlow(d transport.Destination, err error, delay time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.errs == nil {
		p.errs, p.delays = map[transport.Destination]error{}, map[transport.Destination]time.Duration{}
	}
	p.errs[d], p.delays[d] = err, delay
}

// env is a registry with a fake clock, built with a Recorder's options, Metrics on a
// ManualReader and a guarded publisher.
type env struct {
	t      *testing.T
	clock  *fakeclock.Clock
	reg    *registry.Registry
	rec    *telemetry.Recorder
	m      *telemetry.Metrics
	reader *sdkmetric.ManualReader
	raw    *fakePublisher
	pub    transport.Publisher
}

func newEnv(t *testing.T, p breaker.Policy, regOpts []registry.Option, opts ...telemetry.Option) *env {
	t.Helper()
	e := &env{t: t, clock: fakeclock.New(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)), rec: telemetry.NewRecorder(), raw: &fakePublisher{}}
	regOpts = append(append([]registry.Option{registry.WithClock(e.clock)}, e.rec.RegistryOptions()...), regOpts...)
	reg, err := registry.New(registry.Policy{Circuit: p}, regOpts...)
	if err != nil {
		t.Fatal(err)
	}
	e.reg = reg
	e.reader = sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(e.reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	opts = append([]telemetry.Option{telemetry.WithMeterProvider(mp), telemetry.WithRecorder(e.rec), telemetry.WithClock(e.clock)}, opts...)
	m, err := telemetry.New(reg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	e.m = m
	e.pub = reg.Guard(e.raw, nil)
	return e
}

// publish sends one message to d and returns the error.
func (e *env) publish(d transport.Destination) error {
	return e.pub.Publish(context.Background(), d, transport.Message{Value: []byte("m")})
}

// instrument describes a collected instrument.
type instrument struct {
	kind, unit string
	described  bool
}

// collection is one collection, flattened: series key -> value, and name -> instrument.
type collection struct {
	series      map[string]float64
	instruments map[string]instrument
}

// collect reads the meter's instruments; it fails the test on a collection error.
func (e *env) collect() collection {
	e.t.Helper()
	c, err := collectFrom(e.reader)
	if err != nil {
		e.t.Fatalf("collect: %v", err)
	}
	return c
}

func collectFrom(r *sdkmetric.ManualReader) (collection, error) {
	var rm metricdata.ResourceMetrics
	err := r.Collect(context.Background(), &rm)
	c := collection{series: map[string]float64{}, instruments: map[string]instrument{}}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != telemetry.MeterName {
			continue
		}
		for _, m := range sm.Metrics {
			var kind string
			add := func(attrs attribute.Set, v float64) { c.series[seriesKey(m.Name, attrs)] = v }
			switch d := m.Data.(type) {
			case metricdata.Gauge[int64]:
				kind = "gauge"
				for _, p := range d.DataPoints {
					add(p.Attributes, float64(p.Value))
				}
			case metricdata.Gauge[float64]:
				kind = "gauge"
				for _, p := range d.DataPoints {
					add(p.Attributes, p.Value)
				}
			case metricdata.Sum[int64]:
				kind = "updowncounter"
				if d.IsMonotonic {
					kind = "counter"
				}
				if d.Temporality != metricdata.CumulativeTemporality {
					kind += "(delta)"
				}
				for _, p := range d.DataPoints {
					add(p.Attributes, float64(p.Value))
				}
			default:
				kind = fmt.Sprintf("%T", m.Data)
			}
			c.instruments[m.Name] = instrument{kind: kind, unit: m.Unit, described: m.Description != ""}
		}
	}
	return c, err
}

// seriesKey spells a series as name{k=v,...} with the attributes sorted.
func seriesKey(name string, attrs attribute.Set) string {
	var kv []string
	for _, a := range attrs.ToSlice() {
		kv = append(kv, string(a.Key)+"="+a.Value.String())
	}
	slices.Sort(kv)
	return name + "{" + strings.Join(kv, ",") + "}"
}

// matching returns the series whose key starts with prefix.
func (c collection) matching(prefix string) map[string]float64 {
	out := map[string]float64{}
	for k, v := range c.series {
		if strings.HasPrefix(k, prefix) {
			out[k] = v
		}
	}
	return out
}

// forDest returns the series of destination d (system as the attribute spells it).
func (c collection) forDest(system, name string) map[string]float64 {
	out := map[string]float64{}
	for k, v := range c.series {
		if strings.Contains(k, "messaging.destination.name="+name+",") || strings.Contains(k, "messaging.destination.name="+name+"}") {
			if strings.Contains(k, "messaging.system="+system) {
				out[k] = v
			}
		}
	}
	return out
}

// equalSeries reports a difference between want and got, naming the series.
func equalSeries(t *testing.T, step string, want, got map[string]float64) {
	t.Helper()
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if g, ok := got[k]; !ok {
			t.Errorf("%s: series %s missing, want %v", step, k, want[k])
		} else if g != want[k] {
			t.Errorf("%s: %s = %v, want %v", step, k, g, want[k])
		}
	}
	for _, k := range slices.Sorted(maps.Keys(got)) {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: unexpected series %s = %v", step, k, got[k])
		}
	}
}

// destSeries builds the expected per-destination series of a circuit in Enforce
// mode: the state set from state, the unhealthy duration, and the counters in c.
func destSeries(system, name string, state breaker.State, unhealthy float64, c *counts) map[string]float64 {
	base := "messaging.destination.name=" + name + ",messaging.system=" + system
	out := map[string]float64{}
	for i, s := range []string{"closed", "open", "half_open"} {
		out["brokerguard.circuit.state{brokerguard.circuit.mode=enforce,brokerguard.circuit.state="+s+","+base+"}"] = b2f(int(state) == i)
	}
	out["brokerguard.circuit.unhealthy.duration{brokerguard.circuit.mode=enforce,"+base+"}"] = unhealthy
	if c == nil {
		return out
	}
	if len(c.calls) > 0 {
		for _, o := range []string{"published", "failed", "rejected", "neutral"} {
			out["brokerguard.circuit.calls{brokerguard.call.outcome="+o+","+base+"}"] = c.calls[o]
		}
	}
	if len(c.probes) > 0 {
		for _, o := range []string{"published", "failed", "neutral"} {
			out["brokerguard.circuit.probes{brokerguard.call.outcome="+o+","+base+"}"] = c.probes[o]
		}
	}
	if len(c.transitions) > 0 {
		for _, s := range []string{"closed", "open", "half_open"} {
			out["brokerguard.circuit.transitions{brokerguard.circuit.state="+s+","+base+"}"] = c.transitions[s]
		}
	}
	return out
}

// counts are the expected counter values of one destination; an empty map means the
// counter has no series yet.
type counts struct {
	calls, transitions, probes map[string]float64
}

func newCounts() *counts {
	return &counts{calls: map[string]float64{}, transitions: map[string]float64{}, probes: map[string]float64{}}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
