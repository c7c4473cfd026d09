package telemetry

import (
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/transport"
)

var _ outbox.UnusableHooks = (*Metrics)(nil)

// unusableInstruments creates the instruments of unusable destinations:
// brokerguard.circuit.unusable.duration (seconds since the registry first saw the
// destination unusable, 0 while it is usable) and brokerguard.outbox.unusable (holds
// of the destination by the outbox for being unusable).
func (m *Metrics) unusableInstruments(meter metric.Meter) error {
	var err error
	m.unusable, err = meter.Float64ObservableGauge("brokerguard.circuit.unusable.duration", metric.WithUnit("s"),
		metric.WithDescription("How long the destination has been unusable (missing, forbidden, misconfigured) although its broker answers; 0 while usable. Its circuit stays closed."))
	if err != nil {
		return err
	}
	m.outUnusable, err = meter.Int64ObservableCounter("brokerguard.outbox.unusable", metric.WithUnit("{hold}"),
		metric.WithDescription("Times the outbox held the destination because it is unusable; its rows spend no attempt."))
	return err
}

// observeUnusable observes d's unusable duration from the first collection that
// sees it unusable on (0 once it is usable again, so that alerts resolve; a
// destination never unusable has no series), and its outbox holds once there are
// some.
func (m *Metrics) observeUnusable(o metric.Observer, rec *record, s breaker.Snapshot, a *attrSets, now time.Time) {
	var d time.Duration
	if s.Unusable != "" {
		if !rec.unusableSeen.Load() {
			rec.unusableSeen.Store(true)
		}
		if !s.UnusableSince.IsZero() {
			d = max(now.Sub(s.UnusableSince), 0)
		}
	}
	if rec.unusableSeen.Load() {
		o.ObserveFloat64(m.unusable, d.Seconds(), a.dest)
	}
	if n := rec.unusableHolds.Load(); n > 0 {
		o.ObserveInt64(m.outUnusable, n, a.dest)
	}
}

// RecordUnusable counts one outbox hold of d for being unusable; the outbox calls it
// through its UnusableHooks interface. It does nothing on a nil or closed Metrics.
func (m *Metrics) RecordUnusable(d transport.Destination, _ string) {
	if m == nil || m.closed.Load() {
		return
	}
	m.rec.get(d).unusableHolds.Add(1)
}
