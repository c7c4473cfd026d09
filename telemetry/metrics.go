package telemetry

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/option"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// MeterName is the name of the meter every instrument is created on.
const MeterName = "github.com/brokerguard/brokerguard"

// SeriesPerDestination is the largest number of series one instrument has for one
// destination: brokerguard.circuit.calls, one per outcome.
const SeriesPerDestination = 4

// CardinalityLimit is the per-instrument cardinality limit a MeterProvider needs so
// that every series of maxDestinations live circuits is exported (the OpenTelemetry
// SDK's default, 2,000, holds only 500 destinations' calls). Give it to the provider:
//
//	sdkmetric.NewMeterProvider(sdkmetric.WithCardinalityLimit(telemetry.CardinalityLimit(registry.DefaultMaxDestinations)), ...)
//
// The one series more is the SDK's overflow series, which then stays empty.
func CardinalityLimit(maxDestinations int) int { return SeriesPerDestination*maxDestinations + 1 }

// BacklogFunc reports the outbox backlog per destination at collection time (the
// stores' BacklogByDestination).
type BacklogFunc func(ctx context.Context) ([]outbox.DestinationBacklog, error)

// DefaultBacklogInterval is how long a backlog reading is reused unless
// WithOutboxBacklog says otherwise: scrapes from several readers, or a fast scrape
// interval, do not each query the outbox table.
const DefaultBacklogInterval = 10 * time.Second

// Option configures New.
type Option func(*config) error

type config struct {
	provider        metric.MeterProvider
	recorder        *Recorder
	backlog         BacklogFunc
	backlogInterval time.Duration
	clock           breaker.Clock
}

// WithMeterProvider creates the instruments on mp instead of the global provider
// (otel.GetMeterProvider()).
func WithMeterProvider(mp metric.MeterProvider) Option {
	return option.Check(mp == nil, "telemetry: WithMeterProvider(nil)", func(c *config) { c.provider = mp })
}

// WithRecorder exports the counts of r, whose RegistryOptions the registry was built
// with. Without it New uses a Recorder of its own, which sees no transitions: the
// transition counter then stays empty and the unhealthy duration starts when a
// collection first sees the circuit unhealthy.
func WithRecorder(r *Recorder) Option {
	return option.Check(r == nil, "telemetry: WithRecorder(nil)", func(c *config) { c.recorder = r })
}

// WithClock makes the unhealthy duration and the backlog's ageing read time from c
// (default time.Now); give it the registry's clock.
func WithClock(c breaker.Clock) Option {
	return option.Check(c == nil, "telemetry: WithClock(nil)", func(cfg *config) { cfg.clock = c })
}

// WithOutboxBacklog adds the per-destination gauges brokerguard.outbox.backlog and
// brokerguard.outbox.oldest_pending_age, read from f at most once per interval
// (DefaultBacklogInterval when interval is 0). When f fails, the gauges keep the last
// reading, with its ages grown by the time since, and brokerguard.outbox.backlog.errors
// counts the failure, so that an age alert neither resolves nor goes silent while the
// database is unreachable.
func WithOutboxBacklog(f BacklogFunc, interval time.Duration) Option {
	return func(c *config) error {
		if f == nil {
			return errors.New("telemetry: WithOutboxBacklog(nil)")
		}
		if interval < 0 {
			return fmt.Errorf("telemetry: WithOutboxBacklog: negative interval %v", interval)
		}
		if interval == 0 {
			interval = DefaultBacklogInterval
		}
		c.backlog, c.backlogInterval = f, interval
		return nil
	}
}

// Metrics exports a registry's circuits, and an outbox's dispatches and backlog, as
// OpenTelemetry instruments on the meter MeterName, every one observed at collection
// time. Create it with New and stop it with Close. It is safe for concurrent use.
type Metrics struct {
	reg   *registry.Registry
	rec   *Recorder
	clock breaker.Clock

	open, failures                                metric.Int64ObservableGauge
	state, override                               metric.Int64ObservableUpDownCounter
	unhealthy                                     metric.Float64ObservableGauge
	calls, probes, transitions, bypassed          metric.Int64ObservableCounter
	rampRefused                                   metric.Int64ObservableCounter
	degraded                                      metric.Int64ObservableUpDownCounter // shared store refusing evidence
	isolated                                      metric.Int64ObservableGauge         // partitions.go's count, per destination
	isolations                                    metric.Int64ObservableCounter       // partitions isolated since start, per destination
	outPublished, outDeferred, outFailed, outDead metric.Int64ObservableCounter
	storeErrs                                     storeErrors                   // see storeerrors.go
	unusable                                      metric.Float64ObservableGauge // unusable.go
	outUnusable                                   metric.Int64ObservableCounter // unusable.go

	regs      []metric.Registration
	closeOnce sync.Once
	closed    atomic.Bool
}

// New creates the instruments for reg's circuits and registers the callbacks that
// observe them; see the package documentation for the list. It fails when reg is nil
// or does not count calls (registry.WithCallCounts, which Recorder.RegistryOptions
// includes), an option is invalid, or the meter refuses an instrument.
func New(reg *registry.Registry, opts ...Option) (*Metrics, error) {
	if reg == nil {
		return nil, errors.New("telemetry: nil registry")
	}
	if !reg.CountsCalls() {
		return nil, errors.New("telemetry: the registry does not count calls: build it with registry.WithCallCounts (Recorder.RegistryOptions includes it)")
	}
	var c config
	if err := option.Apply("telemetry: New", &c, opts); err != nil {
		return nil, err
	}
	if c.provider == nil {
		c.provider = otel.GetMeterProvider()
	}
	if c.recorder == nil {
		c.recorder = NewRecorder()
	}
	m := &Metrics{reg: reg, rec: c.recorder, clock: c.clock}
	meter := c.provider.Meter(MeterName, metric.WithInstrumentationVersion(version()))
	if err := m.instruments(meter, &c); err != nil {
		_ = m.Close()
		return nil, err
	}
	return m, nil
}

// version is this module's version as the binary's build information records it.
func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == MeterName {
				return d.Version
			}
		}
		if bi.Main.Path == MeterName {
			return bi.Main.Version
		}
	}
	return "(devel)"
}

func (m *Metrics) now() time.Time {
	if m.clock != nil {
		return m.clock.Now()
	}
	return time.Now()
}

// instruments creates every instrument on meter and registers the callbacks.
func (m *Metrics) instruments(meter metric.Meter, c *config) error {
	var errs []error
	gauge := func(name, unit, desc string) metric.Int64ObservableGauge {
		g, err := meter.Int64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return g
	}
	upDown := func(name, unit, desc string) metric.Int64ObservableUpDownCounter {
		u, err := meter.Int64ObservableUpDownCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return u
	}
	counter := func(name, unit, desc string) metric.Int64ObservableCounter {
		k, err := meter.Int64ObservableCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return k
	}
	m.open = gauge("brokerguard.circuit.open", "{circuit}",
		"Live circuits that are open or half-open.")
	m.failures = gauge("brokerguard.circuit.failures", "{failure}",
		"Sum of the current failure evidence of every live circuit.")
	m.state = upDown("brokerguard.circuit.state", "1",
		"1 for the state the destination's circuit is in, 0 for the other states.")
	m.override = upDown("brokerguard.circuit.override", "1",
		"1 while an operator override holds the destination's circuit; absent without one.")
	var err error
	m.unhealthy, err = meter.Float64ObservableGauge("brokerguard.circuit.unhealthy.duration", metric.WithUnit("s"),
		metric.WithDescription("How long the destination's circuit has been open or half-open without closing in between (probes included); 0 while closed or held by an override."))
	errs = append(errs, err)
	m.calls = counter("brokerguard.circuit.calls", "{call}",
		"Calls made through the destination's circuit, by outcome: published, failed, rejected, neutral.")
	m.probes = counter("brokerguard.circuit.probes", "{call}",
		"Calls the destination's circuit admitted as half-open probes, by outcome.")
	m.transitions = counter("brokerguard.circuit.transitions", "{transition}",
		"Changes of state of the destination's circuit, by the state entered.")
	m.bypassed = counter("brokerguard.circuit.bypassed", "{call}",
		"Calls a Shadow or FailOpen circuit admitted although Enforce would have refused them.")
	m.rampRefused = counter("brokerguard.circuit.ramp.refused", "{call}",
		"Calls the destination's circuit turned away while ramping up after recovery; they are rejected calls too.")
	m.degraded = upDown("brokerguard.circuit.shared.degraded", "1",
		"1 while the destination's shared store refuses its evidence and this replica also decides on its own; absent otherwise.")
	m.isolated = gauge("brokerguard.circuit.partitions.isolated", "{partition}",
		"Partitions of the destination isolated under its circuit (Kafka); absent while none is.")
	m.isolations = counter("brokerguard.circuit.partitions.isolations", "{isolation}",
		"Times a partition of the destination was isolated under its circuit (Kafka), each isolation once; absent until one was.")
	m.outPublished = counter("brokerguard.outbox.published", "{message}", "Outbox messages published.")
	m.outDeferred = counter("brokerguard.outbox.deferred", "{message}",
		"Outbox messages deferred because the destination's circuit was not closed.")
	m.outFailed = counter("brokerguard.outbox.failed", "{message}",
		"Outbox messages whose publish failed and will be retried.")
	m.outDead = counter("brokerguard.outbox.dead", "{message}", "Outbox messages given up on.")
	errs = append(errs, m.unusableInstruments(meter))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("telemetry: creating instruments: %w", err)
	}
	r, err := meter.RegisterCallback(m.observeCircuits, m.open, m.failures, m.state, m.override, m.unhealthy,
		m.calls, m.probes, m.transitions, m.bypassed, m.rampRefused, m.degraded, m.isolated, m.isolations, m.outPublished, m.outDeferred, m.outFailed, m.outDead, m.unusable, m.outUnusable)
	if err != nil {
		return fmt.Errorf("telemetry: registering the circuit callback: %w", err)
	}
	m.regs = append(m.regs, r)
	if err := m.storeErrorInstruments(meter); err != nil {
		return err
	}
	if err := m.policyInstruments(meter); err != nil {
		return err
	}
	if c.backlog == nil {
		return nil
	}
	b, err := newBacklogReader(meter, c.backlog, c.backlogInterval, m.now)
	if err != nil {
		return err
	}
	r, err = meter.RegisterCallback(b.observe, b.pending, b.oldest, b.errors)
	if err != nil {
		return fmt.Errorf("telemetry: registering the outbox backlog callback: %w", err)
	}
	m.regs = append(m.regs, r)
	return nil
}

// observeCircuits reads every live circuit once and observes the circuit and outbox
// instruments. Destinations the registry evicted are not live, so their series end.
func (m *Metrics) observeCircuits(_ context.Context, o metric.Observer) error {
	now := m.now()
	live := m.reg.Report()
	var open, failures int64
	for _, c := range live {
		rec := m.rec.get(c.Destination)
		s := c.Snapshot
		a := rec.attrSets(c.Destination, s.Mode)
		failures += int64(s.Failures)
		if s.State != breaker.Closed {
			open++
		}
		for i := range a.state {
			o.ObserveInt64(m.state, b2i(int(s.State) == i), a.state[i])
		}
		o.ObserveFloat64(m.unhealthy, rec.unhealthyFor(s, now).Seconds(), a.mode)
		if s.Override == breaker.ForcedOpen || s.Override == breaker.ForcedClosed {
			o.ObserveInt64(m.override, 1, a.override[s.Override])
		}
		if s.Mode != breaker.Enforce {
			o.ObserveInt64(m.bypassed, int64(s.Bypassed), a.mode)
		}
		if s.RampRefused > 0 { // only destinations whose policy ramps, once it has refused
			o.ObserveInt64(m.rampRefused, int64(s.RampRefused), a.dest)
		}
		if !s.DegradedSince.IsZero() {
			o.ObserveInt64(m.degraded, 1, a.dest)
		}
		if n := len(c.IsolatedPartitions); n > 0 { // a count per destination: bounded cardinality
			o.ObserveInt64(m.isolated, int64(n), a.dest)
		}
		if n := rec.isolations.Load(); n > 0 {
			o.ObserveInt64(m.isolations, n, a.dest)
		}
		if n := c.Calls; n.Total() > 0 { // every outcome at once, zeros included, so rates start from a known value
			for i, v := range [...]uint64{n.Published, n.Failed, n.Rejected, n.Neutral} {
				o.ObserveInt64(m.calls, int64(v), a.calls[i])
			}
			if p := [...]uint64{n.ProbesPublished, n.ProbesFailed, n.ProbesNeutral}; p != [3]uint64{} {
				for i, v := range p {
					o.ObserveInt64(m.probes, int64(v), a.probe[i])
				}
			}
		}
		if rec.transitioned.Load() {
			for i := range rec.transitions {
				o.ObserveInt64(m.transitions, rec.transitions[i].Load(), a.transition[i])
			}
		}
		if rec.dispatched.Load() {
			for i, c := range [...]metric.Int64ObservableCounter{m.outPublished, m.outDeferred, m.outFailed, m.outDead} {
				o.ObserveInt64(c, rec.outbox[i].Load(), a.dest)
			}
		}
		m.observeUnusable(o, rec, s, a, now)
	}
	o.ObserveInt64(m.open, open)
	o.ObserveInt64(m.failures, failures)
	m.rec.prune(live)
	return nil
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// RecordDispatch counts one outbox dispatch to d: messages published, deferred
// (circuit not closed), failed (to be retried) and dead (given up on). The outbox
// calls it through its Hooks interface. The counts are exported with d's live
// circuit and end with it. Non-positive counts add nothing; it does nothing on a nil
// or closed Metrics.
func (m *Metrics) RecordDispatch(d transport.Destination, published, deferred, failed, dead int) {
	if m == nil || m.closed.Load() {
		return
	}
	rec := m.rec.get(d)
	for i, n := range [...]int{published, deferred, failed, dead} {
		if n > 0 {
			rec.outbox[i].Add(int64(n))
			rec.markDispatched()
		}
	}
}

// Close unregisters the callbacks, so that no instrument is observed any more, and
// makes RecordDispatch do nothing. The Recorder keeps counting. Calling Close again
// does nothing.
func (m *Metrics) Close() error {
	var err error
	m.closeOnce.Do(func() {
		m.closed.Store(true)
		var errs []error
		for _, r := range m.regs {
			errs = append(errs, r.Unregister())
		}
		if e := errors.Join(errs...); e != nil {
			err = fmt.Errorf("telemetry: unregistering callbacks: %w", e)
		}
	})
	return err
}
