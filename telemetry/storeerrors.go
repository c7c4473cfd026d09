package telemetry

import (
	"context"
	"fmt"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/brokerguard/brokerguard/outbox"
)

// keyOperation is the attribute of brokerguard.outbox.store.errors.
const keyOperation = attribute.Key("brokerguard.outbox.operation")

// storeOps are the values keyOperation takes, so that its cardinality is bounded: an
// operation the outbox does not name is counted as "other".
var storeOps = [...]string{
	outbox.OpClaim, outbox.OpMarkPublished, outbox.OpDefer, outbox.OpFail, outbox.OpHold,
	outbox.OpUnhold, outbox.OpRelease, outbox.OpBacklog, outbox.OpDeleteSettled, "other",
}

// storeErrors counts the outbox's failed store calls by operation (index in storeOps).
type storeErrors struct {
	counter metric.Int64ObservableCounter
	counts  [len(storeOps)]atomic.Int64
	attrs   [len(storeOps)]metric.ObserveOption
}

var _ outbox.StoreErrorHooks = (*Metrics)(nil)

// storeErrorInstruments creates brokerguard.outbox.store.errors and registers its
// callback.
func (m *Metrics) storeErrorInstruments(meter metric.Meter) error {
	s := &m.storeErrs
	var err error
	s.counter, err = meter.Int64ObservableCounter("brokerguard.outbox.store.errors", metric.WithUnit("{error}"),
		metric.WithDescription("Outbox store calls that failed or got no answer within the store timeout, by operation; the Processor retries after a backoff."))
	if err != nil {
		return fmt.Errorf("telemetry: creating the outbox store error counter: %w", err)
	}
	for i, op := range storeOps {
		s.attrs[i] = metric.WithAttributeSet(attribute.NewSet(keyOperation.String(op)))
	}
	r, err := meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		for i := range s.counts {
			// Every operation from the first error on, zeros included, so that rates
			// start from a known value.
			if n := s.counts[i].Load(); n > 0 || s.any() {
				o.ObserveInt64(s.counter, n, s.attrs[i])
			}
		}
		return nil
	}, s.counter)
	if err != nil {
		return fmt.Errorf("telemetry: registering the outbox store error callback: %w", err)
	}
	m.regs = append(m.regs, r)
	return nil
}

func (s *storeErrors) any() bool {
	for i := range s.counts {
		if s.counts[i].Load() > 0 {
			return true
		}
	}
	return false
}

// RecordStoreError counts one failed outbox store call (brokerguard.outbox.store.errors,
// by op). The outbox's Processor calls it through outbox.StoreErrorHooks when its
// Hooks are this Metrics. It does nothing on a nil or closed Metrics.
func (m *Metrics) RecordStoreError(op string) {
	if m == nil || m.closed.Load() {
		return
	}
	i := len(storeOps) - 1
	for j, known := range storeOps[:i] {
		if op == known {
			i = j
			break
		}
	}
	m.storeErrs.counts[i].Add(1)
}
