package telemetry

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// MeterName is the name of the meter every instrument is created on.
const MeterName = "github.com/brokerguard/brokerguard"

// BacklogFunc reports the outbox backlog at collection time: how many messages are
// pending and how long the oldest of them has waited.
type BacklogFunc func(ctx context.Context) (pending int64, oldest time.Duration, err error)

// Option configures New.
type Option func(*config) error

type config struct {
	provider metric.MeterProvider
	recorder *Recorder
	backlog  BacklogFunc
}

// WithMeterProvider creates the instruments on mp instead of the global provider
// (otel.GetMeterProvider()).
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) error {
		if mp == nil {
			return errors.New("telemetry: WithMeterProvider(nil)")
		}
		c.provider = mp
		return nil
	}
}

// WithRecorder exports the counts of r, whose ObserveTransition the registry was
// given with registry.WithObserver. Without it New uses a Recorder of its own, which
// sees no transitions: the transition and probe counters then stay empty.
func WithRecorder(r *Recorder) Option {
	return func(c *config) error {
		if r == nil {
			return errors.New("telemetry: WithRecorder(nil)")
		}
		c.recorder = r
		return nil
	}
}

// WithOutboxBacklog adds the gauges brokerguard.outbox.backlog and
// brokerguard.outbox.oldest_pending_age, read from f at each collection. An error
// from f skips both gauges for that collection and is returned to the reader.
func WithOutboxBacklog(f BacklogFunc) Option {
	return func(c *config) error {
		if f == nil {
			return errors.New("telemetry: WithOutboxBacklog(nil)")
		}
		c.backlog = f
		return nil
	}
}

// Metrics exports a registry's circuits, and an outbox's dispatches, as
// OpenTelemetry instruments on the meter MeterName. Gauges are observed at
// collection time from the registry's snapshots; counters come from its Recorder and
// from RecordDispatch. Create it with New and stop it with Close. It is safe for
// concurrent use.
type Metrics struct {
	reg *registry.Registry
	rec *Recorder

	state, override, open, failureCount           metric.Int64ObservableGauge
	failures, transitions, rejections, probes     metric.Int64ObservableCounter
	bypassed                                      metric.Int64ObservableCounter
	outPublished, outDeferred, outFailed, outDead metric.Int64Counter
	backlog                                       metric.Int64ObservableGauge
	oldest                                        metric.Float64ObservableGauge

	regs      []metric.Registration
	closeOnce sync.Once
	closed    atomic.Bool
}

// New creates the instruments for reg's circuits and registers the callbacks that
// observe them; see the package documentation for the list. It fails when reg is
// nil, an option is invalid, or the meter refuses an instrument.
func New(reg *registry.Registry, opts ...Option) (*Metrics, error) {
	if reg == nil {
		return nil, errors.New("telemetry: nil registry")
	}
	var c config
	for _, o := range opts {
		if err := o(&c); err != nil {
			return nil, err
		}
	}
	if c.provider == nil {
		c.provider = otel.GetMeterProvider()
	}
	if c.recorder == nil {
		c.recorder = NewRecorder()
	}
	m := &Metrics{reg: reg, rec: c.recorder}
	if err := m.instruments(c.provider.Meter(MeterName), c.backlog); err != nil {
		_ = m.Close()
		return nil, err
	}
	return m, nil
}

// instruments creates every instrument on meter and registers the callbacks.
func (m *Metrics) instruments(meter metric.Meter, backlog BacklogFunc) error {
	var errs []error
	gauge := func(name, unit, desc string) metric.Int64ObservableGauge {
		g, err := meter.Int64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return g
	}
	observed := func(name, unit, desc string) metric.Int64ObservableCounter {
		c, err := meter.Int64ObservableCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := meter.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	m.open = gauge("brokerguard.circuit.open", "{circuit}",
		"1 while any circuit is open or half-open, else 0.")
	m.failureCount = gauge("brokerguard.circuit.failure_count", "{failure}",
		"Sum of the current failure evidence of every circuit.")
	m.state = gauge("brokerguard.circuit.state", "{circuit}",
		"1 for the state the destination's circuit is in, 0 for the other states.")
	m.override = gauge("brokerguard.circuit.override", "{circuit}",
		"1 while an operator override holds the destination's circuit; absent without one.")
	m.failures = observed("brokerguard.circuit.failures", "{failure}",
		"Publishes whose outcome was a failure for the destination's circuit.")
	m.transitions = observed("brokerguard.circuit.transitions", "{transition}",
		"Transitions of the destination's circuit, by the state entered.")
	m.rejections = observed("brokerguard.circuit.rejections", "{call}",
		"Publishes the destination's circuit rejected.")
	m.probes = observed("brokerguard.circuit.probes", "{call}",
		"Publishes an enforcing circuit admitted while it was open or half-open, by outcome.")
	m.bypassed = observed("brokerguard.circuit.bypassed", "{call}",
		"Calls a Shadow (kind=would_reject) or FailOpen (kind=bypass) circuit admitted although Enforce would have refused them.")
	m.outPublished = counter("brokerguard.outbox.published", "{message}",
		"Outbox messages published.")
	m.outDeferred = counter("brokerguard.outbox.deferred", "{message}",
		"Outbox messages deferred because the destination's circuit was not closed.")
	m.outFailed = counter("brokerguard.outbox.failed", "{message}",
		"Outbox messages whose publish failed and will be retried.")
	m.outDead = counter("brokerguard.outbox.dead", "{message}",
		"Outbox messages given up on.")
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("telemetry: creating instruments: %w", err)
	}
	r, err := meter.RegisterCallback(m.observeCircuits,
		m.open, m.failureCount, m.state, m.override, m.failures, m.transitions, m.rejections, m.probes, m.bypassed)
	if err != nil {
		return fmt.Errorf("telemetry: registering the circuit callback: %w", err)
	}
	m.regs = append(m.regs, r)
	if backlog == nil {
		return nil
	}
	var errB, errO error
	m.backlog, errB = meter.Int64ObservableGauge("brokerguard.outbox.backlog",
		metric.WithUnit("{message}"), metric.WithDescription("Outbox messages pending."))
	m.oldest, errO = meter.Float64ObservableGauge("brokerguard.outbox.oldest_pending_age",
		metric.WithUnit("s"), metric.WithDescription("How long the oldest pending outbox message has waited."))
	if err := errors.Join(errB, errO); err != nil {
		return fmt.Errorf("telemetry: creating the outbox gauges: %w", err)
	}
	r, err = meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		pending, oldest, err := backlog(ctx)
		if err != nil {
			return fmt.Errorf("telemetry: outbox backlog: %w", err)
		}
		o.ObserveInt64(m.backlog, pending)
		o.ObserveFloat64(m.oldest, oldest.Seconds())
		return nil
	}, m.backlog, m.oldest)
	if err != nil {
		return fmt.Errorf("telemetry: registering the outbox callback: %w", err)
	}
	m.regs = append(m.regs, r)
	return nil
}

// observeCircuits reads every live circuit once and observes the circuit
// instruments. Destinations the registry evicted are not live, so their series end.
func (m *Metrics) observeCircuits(_ context.Context, o metric.Observer) error {
	live := m.reg.Snapshots()
	var open, failures int64
	for d, s := range live {
		rec := m.rec.get(d)
		a := rec.attrs
		if s.State != breaker.Closed {
			open = 1
		}
		failures += int64(s.Failures)
		for i := range a.state {
			o.ObserveInt64(m.state, b2i(int(s.State) == i), a.state[i])
		}
		if s.Override == breaker.ForcedOpen || s.Override == breaker.ForcedClosed {
			o.ObserveInt64(m.override, 1, a.override[s.Override])
		}
		if s.Mode == breaker.Shadow || s.Mode == breaker.FailOpen {
			o.ObserveInt64(m.bypassed, int64(s.Bypassed), a.bypass[s.Mode])
		}
		if !rec.active.Load() {
			continue // no series until something happened to the destination
		}
		o.ObserveInt64(m.failures, rec.failures.Load(), a.dest)
		o.ObserveInt64(m.rejections, rec.rejections.Load(), a.dest)
		for i := range rec.transitions {
			o.ObserveInt64(m.transitions, rec.transitions[i].Load(), a.transition[i])
		}
		for i := range rec.probes {
			o.ObserveInt64(m.probes, rec.probes[i].Load(), a.probe[i])
		}
	}
	o.ObserveInt64(m.open, open)
	o.ObserveInt64(m.failureCount, failures)
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
// calls it through a small interface of its own. Non-positive counts add nothing; it
// does nothing on a nil or closed Metrics.
func (m *Metrics) RecordDispatch(d transport.Destination, published, deferred, failed, dead int) {
	if m == nil || m.closed.Load() {
		return
	}
	attrs := m.rec.get(d).attrs.dest
	ctx := context.Background()
	for _, c := range [...]struct {
		counter metric.Int64Counter
		n       int
	}{{m.outPublished, published}, {m.outDeferred, deferred}, {m.outFailed, failed}, {m.outDead, dead}} {
		if c.n > 0 {
			c.counter.Add(ctx, int64(c.n), attrs)
		}
	}
}

// Close unregisters the callbacks, so that the gauges and circuit counters are no
// longer observed, and makes RecordDispatch do nothing. The Recorder keeps counting.
// Calling Close again does nothing.
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
