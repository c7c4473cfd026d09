package telemetry

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"

	"github.com/brokerguard/brokerguard/outbox"
)

// backlogReader observes the outbox backlog gauges from readings it reuses for an
// interval, and keeps the last good reading through failures.
type backlogReader struct {
	read     BacklogFunc
	interval time.Duration
	now      func() time.Time

	pending metric.Int64ObservableGauge
	oldest  metric.Float64ObservableGauge
	errors  metric.Int64ObservableCounter

	mu       sync.Mutex // guards the fields below; held across a reading, so that readers queue rather than query together
	last     []outbox.DestinationBacklog
	readAt   time.Time // when last was read
	tried    time.Time // when a reading was last attempted
	failures int64
}

func newBacklogReader(meter metric.Meter, f BacklogFunc, interval time.Duration, now func() time.Time) (*backlogReader, error) {
	b := &backlogReader{read: f, interval: interval, now: now}
	var e1, e2, e3 error
	b.pending, e1 = meter.Int64ObservableGauge("brokerguard.outbox.backlog", metric.WithUnit("{message}"),
		metric.WithDescription("Outbox messages pending for the destination."))
	b.oldest, e2 = meter.Float64ObservableGauge("brokerguard.outbox.oldest_pending_age", metric.WithUnit("s"),
		metric.WithDescription("How long the destination's oldest pending outbox message has waited."))
	b.errors, e3 = meter.Int64ObservableCounter("brokerguard.outbox.backlog.errors", metric.WithUnit("{error}"),
		metric.WithDescription("Failed readings of the outbox backlog; while they fail the backlog gauges repeat the last reading, aged."))
	if err := errors.Join(e1, e2, e3); err != nil {
		return nil, fmt.Errorf("telemetry: creating the outbox backlog instruments: %w", err)
	}
	return b, nil
}

// observe reads the backlog when the last attempt is older than the interval, and
// observes the last good reading, its ages grown by the time since it was taken: the
// oldest pending message can only have got older, unless it went out, which the next
// good reading shows. A failed reading is counted and handed to otel.Handle; it does
// not fail the collection, whose other instruments are fine.
func (b *backlogReader) observe(ctx context.Context, o metric.Observer) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	if b.tried.IsZero() || now.Sub(b.tried) >= b.interval {
		b.tried = now
		if rows, err := b.read(ctx); err != nil {
			b.failures++
			otel.Handle(fmt.Errorf("telemetry: reading the outbox backlog: %w", err))
		} else {
			b.last, b.readAt = rows, now
		}
	}
	aged := max(now.Sub(b.readAt), 0)
	for _, r := range b.last {
		if r.Pending <= 0 {
			continue
		}
		a := metric.WithAttributes(keySystem.String(messagingSystem(r.Destination.Broker)), keyDestination.String(r.Destination.Name))
		o.ObserveInt64(b.pending, r.Pending, a)
		o.ObserveFloat64(b.oldest, (r.Oldest + aged).Seconds(), a)
	}
	o.ObserveInt64(b.errors, b.failures)
	return nil
}
