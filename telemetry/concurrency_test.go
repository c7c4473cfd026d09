package telemetry_test

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/transport"
)

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
