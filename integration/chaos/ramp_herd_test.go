package chaos

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// recoveringBroker fails every publish until it recovers, then counts the publishes
// that reach it in 100 ms bins from the moment it recovered.
type recoveringBroker struct {
	clock     *fakeclock.Clock
	recovered time.Time
	bins      []atomic.Int64
}

var errBrokerDown = errors.New("chaos: broker down")

func (b *recoveringBroker) Publish(context.Context, transport.Destination, ...transport.Message) error {
	now := b.clock.Now()
	if now.Before(b.recovered) {
		return errBrokerDown
	}
	if i := int(now.Sub(b.recovered) / herdTick); i < len(b.bins) {
		b.bins[i].Add(1)
	}
	return nil
}

const (
	herdTick  = 100 * time.Millisecond
	herdRamp  = 2 * time.Second
	herdTicks = 26 // the ramp and half a second after it
)

// herdRun is what one run of the recovery herd saw per 100 ms after the close.
type herdRun struct {
	offered, broker []int // calls the callers made, and calls that reached the broker
	probes          int   // the probes that closed the circuits, at the instant of recovery
}

// runRecoveryHerd opens the circuit of each of 100 replicas (a registry each, guarding
// one broker), lets the broker recover after the break, closes every circuit with one
// probe, and then, every 100 ms, has each of 10,000 waiting callers publish once
// unless its last refusal told it to come back later.
func runRecoveryHerd(t *testing.T, p breaker.Policy) herdRun {
	t.Helper()
	start := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	clock := fakeclock.New(start)
	broker := &recoveringBroker{clock: clock, recovered: start.Add(breakTime), bins: make([]atomic.Int64, herdTicks)}
	dest := transport.Destination{Broker: "kafka", Name: "orders"}
	ctx := context.Background()
	pubs := make([]transport.Publisher, replicas)
	for i := range pubs {
		reg, err := registry.New(p, registry.WithClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		pubs[i] = reg.Guard(broker, nil)
		if err := pubs[i].Publish(ctx, dest, transport.Message{}); !errors.Is(err, errBrokerDown) {
			t.Fatalf("replica %d: publish to the broker that is down: %v", i, err)
		}
	}
	clock.Set(broker.recovered)
	run := herdRun{offered: make([]int, herdTicks), broker: make([]int, herdTicks)}
	for i, pub := range pubs { // each replica's probe closes its circuit
		if err := pub.Publish(ctx, dest, transport.Message{}); err != nil {
			t.Fatalf("replica %d: the probe after recovery: %v", i, err)
		}
		run.probes++
	}
	broker.bins[0].Store(0) // count the waiting callers only

	notBefore := make([]time.Time, replicas*perBreak) // every caller is due at the recovery
	for tick := range herdTicks {
		now := broker.recovered.Add(time.Duration(tick) * herdTick)
		clock.Set(now)
		var start sync.WaitGroup
		start.Add(1)
		var wg sync.WaitGroup
		for c := range notBefore {
			if notBefore[c].After(now) {
				continue
			}
			run.offered[tick]++
			wg.Go(func() {
				start.Wait() // the callers due at this tick come at once
				err := pubs[c/perBreak].Publish(ctx, dest, transport.Message{})
				var oe *breaker.OpenError
				switch {
				case err == nil:
				case errors.As(err, &oe) && oe.Ramping:
					notBefore[c] = oe.NotBefore
				default:
					t.Errorf("caller %d at %v: %v", c, now.Sub(broker.recovered), err)
				}
			})
		}
		start.Done()
		wg.Wait()
		run.broker[tick] = int(broker.bins[tick].Load())
	}
	return run
}

// The recovery herd with a ramp: 10,000 callers of 100 replicas come back when the
// broker recovers. Without a ramp the broker takes all 10,000 in the first 100 ms;
// with a 2 s linear ramp from 10 %, the calls that reach it in each 100 ms are the
// scheduled share of the calls made, to within 1 % of the full load (100 calls), and
// never more than the share of the full load.
func TestRecoveryHerdFollowsTheRamp(t *testing.T) {
	policy := breaker.Policy{FailureThreshold: 1, BreakDuration: breakTime}
	flat := runRecoveryHerd(t, policy)
	policy.RampDuration = herdRamp
	ramped := runRecoveryHerd(t, policy)
	const all, tolerance = replicas * perBreak, replicas * perBreak / 100

	var table strings.Builder
	tw := tabwriter.NewWriter(&table, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "after close\tshare\tramp: calls made\tramp: at broker\tschedule: share x made\twithout ramp: at broker\t")
	for tick := range herdTicks {
		since := time.Duration(tick) * herdTick
		share := policy.RampShare(since)
		want := share * float64(ramped.offered[tick])
		got := ramped.broker[tick]
		fmt.Fprintf(tw, "%v\t%.2f\t%d\t%d\t%.0f\t%d\t\n", since, share, ramped.offered[tick], got, want, flat.broker[tick])
		if math.Abs(float64(got)-want) > tolerance {
			t.Errorf("%v after close: %d calls reached the broker, the ramp's schedule says %.0f (+/- %d)", since, got, want, tolerance)
		}
		if float64(got) > share*all+tolerance {
			t.Errorf("%v after close: %d calls reached the broker, more than the share %.2f of %d", since, got, share, all)
		}
		if since >= herdRamp+herdRamp/8 && (ramped.offered[tick] != all || got != all) {
			t.Errorf("%v after close, past the ramp: %d of %d callers came, %d reached the broker", since, ramped.offered[tick], all, got)
		}
	}
	tw.Flush()
	t.Logf("recovery herd, 10,000 callers on 100 replicas, calls per 100 ms (plus %d probes at the close):\n%s", ramped.probes, table.String())
	if flat.broker[0] != all {
		t.Errorf("without a ramp %d calls reached the broker in the first 100 ms, want all %d", flat.broker[0], all)
	}
	if first := ramped.broker[0]; first > all/10+tolerance {
		t.Errorf("with the ramp %d calls reached the broker in the first 100 ms, want about %d", first, all/10)
	}
	record(result{"recovery herd with a 2s ramp: calls at the broker in the first 100ms", all, ramped.broker[0], 0, 0, 0})
	record(result{"recovery herd without a ramp: calls at the broker in the first 100ms", all, flat.broker[0], 0, 0, 0})
}
