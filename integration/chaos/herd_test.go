// Package chaos shows that nothing is lost under faults, load and bad input: broker
// outages, dispatcher crashes, recovery herds and malformed input. `make chaos` runs it.
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
	"github.com/brokerguard/brokerguard/breaker/backend"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

const (
	replicas  = 100 // local breakers, one per simulated replica
	perBreak  = 100 // goroutines per breaker: 10,000 in all
	breakTime = time.Second
)

// herd opens one breaker per replica at t0 and returns them with their shared clock.
func herd(t *testing.T, p breaker.Policy) ([]*breaker.Breaker, *fakeclock.Clock, time.Time) {
	t.Helper()
	t0 := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	clock := fakeclock.New(t0)
	bs := make([]*breaker.Breaker, replicas)
	for i := range bs {
		b, err := breaker.New(fmt.Sprint("replica-", i), p, breaker.WithClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		pm, _ := b.Acquire(context.Background())
		pm.Complete(breaker.Failure)
		if b.State() != breaker.Open {
			t.Fatal("breaker did not open")
		}
		bs[i] = b
	}
	return bs, clock, t0
}

// release lets every goroutine of every breaker call Acquire once per step, advancing
// the clock before each step, and records for each breaker the probes it admitted and
// when. Probes are held, never completed: a second probe would be a herd.
func release(t *testing.T, bs []*breaker.Breaker, clock *fakeclock.Clock, steps int, step time.Duration) (probes []int, firstProbe []time.Time) {
	probes = make([]int, len(bs))
	firstProbe = make([]time.Time, len(bs))
	var mu sync.Mutex
	var admitted atomic.Int64
	for s := range steps {
		now := clock.Advance(step)
		if s == 0 {
			now = clock.Now()
		}
		var start sync.WaitGroup
		start.Add(1)
		var wg sync.WaitGroup
		for i, b := range bs {
			for range perBreak {
				wg.Go(func() {
					start.Wait() // all 10,000 released at once
					p, err := b.Acquire(context.Background())
					if err != nil {
						return
					}
					admitted.Add(1)
					if !p.Probe() {
						t.Errorf("replica %d admitted a call that is not a probe", i)
					}
					mu.Lock()
					probes[i]++
					if firstProbe[i].IsZero() {
						firstProbe[i] = now
					}
					mu.Unlock()
				})
			}
		}
		start.Done()
		wg.Wait()
	}
	return probes, firstProbe
}

func TestRecoveryHerdGetsExactlyOneProbePerBreaker(t *testing.T) {
	bs, clock, t0 := herd(t, breaker.Policy{FailureThreshold: 1, BreakDuration: breakTime})
	clock.Set(t0.Add(breakTime)) // the instant every circuit may half-open
	probes, _ := release(t, bs, clock, 1, 0)
	for i, n := range probes {
		if n != 1 {
			t.Errorf("replica %d admitted %d probes, want exactly 1", i, n)
		}
	}
	record(result{"recovery herd: 10,000 calls on 100 breakers (probes admitted)", replicas * perBreak, sum(probes), 0, 0, 0})
}

func sum(ns []int) (s int) {
	for _, n := range ns {
		s += n
	}
	return s
}

func TestJitterSpreadsTheFleetsProbes(t *testing.T) {
	const jitter = 0.2
	bs, clock, t0 := herd(t, breaker.Policy{FailureThreshold: 1, BreakDuration: breakTime, Jitter: jitter})
	lo := t0.Add(breakTime - time.Duration(jitter*float64(breakTime)))
	span := time.Duration(2 * jitter * float64(breakTime))
	clock.Set(lo)
	const steps = 50
	probes, first := release(t, bs, clock, steps+1, span/steps)
	var earliest, latest time.Time
	for i, n := range probes {
		if n != 1 {
			t.Fatalf("replica %d admitted %d probes, want exactly 1", i, n)
		}
		if earliest.IsZero() || first[i].Before(earliest) {
			earliest = first[i]
		}
		if first[i].After(latest) {
			latest = first[i]
		}
	}
	spread := float64(latest.Sub(earliest)) / float64(span)
	t.Logf("probe times spread over %.0f%% of the jitter range %v", 100*spread, span)
	if spread < 0.4 {
		t.Fatalf("probes spread over %.0f%% of the jitter range, want at least 40%%", 100*spread)
	}
}

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
// probe, and then has 10,000 waiting callers come back (rampTicks).
func runRecoveryHerd(t *testing.T, p breaker.Policy) herdRun {
	t.Helper()
	start := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	clock := fakeclock.New(start)
	broker := &recoveringBroker{clock: clock, recovered: start.Add(breakTime), bins: make([]atomic.Int64, herdTicks)}
	dest := transport.Destination{Broker: "kafka", Name: "orders"}
	ctx := context.Background()
	pubs := make([]transport.Publisher, replicas)
	for i := range pubs {
		reg, err := registry.New(registry.Policy{Circuit: p}, registry.WithClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		pubs[i] = reg.Guard(broker, nil)
		if err := pubs[i].Publish(ctx, dest, transport.Message{}); !errors.Is(err, errBrokerDown) {
			t.Fatalf("replica %d: publish to the broker that is down: %v", i, err)
		}
	}
	clock.Set(broker.recovered)
	run := herdRun{}
	for i, pub := range pubs { // each replica's probe closes its circuit
		if err := pub.Publish(ctx, dest, transport.Message{}); err != nil {
			t.Fatalf("replica %d: the probe after recovery: %v", i, err)
		}
		run.probes++
	}
	broker.bins[0].Store(0) // count the waiting callers only
	run.offered = rampTicks(t, clock, broker.recovered, replicas*perBreak, func(c int) error {
		return pubs[c/perBreak].Publish(ctx, dest, transport.Message{})
	})
	run.broker = broker.counts()
	return run
}

func (b *recoveringBroker) counts() []int {
	out := make([]int, len(b.bins))
	for i := range b.bins {
		out[i] = int(b.bins[i].Load())
	}
	return out
}

// rampTicks has callers come back after the close at closed: every 100 ms, each caller
// due calls call(caller) once, all of them at once, unless a ramp's refusal told it to
// come back later. It returns the calls made per tick.
func rampTicks(t *testing.T, clock *fakeclock.Clock, closed time.Time, callers int, call func(caller int) error) []int {
	offered := make([]int, herdTicks)
	notBefore := make([]time.Time, callers) // every caller is due at the close
	for tick := range herdTicks {
		now := closed.Add(time.Duration(tick) * herdTick)
		clock.Set(now)
		var start sync.WaitGroup
		start.Add(1)
		var wg sync.WaitGroup
		for c := range notBefore {
			if notBefore[c].After(now) {
				continue
			}
			offered[tick]++
			wg.Go(func() {
				start.Wait() // the callers due at this tick come at once
				err := call(c)
				var oe *breaker.OpenError
				switch {
				case err == nil:
				case errors.As(err, &oe) && oe.Ramping:
					notBefore[c] = oe.NotBefore
				default:
					t.Errorf("caller %d at %v: %v", c, now.Sub(closed), err)
				}
			})
		}
		start.Done()
		wg.Wait()
	}
	return offered
}

// checkRamp compares the calls that reached the broker per 100 ms after the close
// with the ramp's schedule: the share of the calls made, to within tolerance, and
// never more than the share of all callers. It returns the table, beside the run
// without a ramp when there is one.
func checkRamp(t *testing.T, policy breaker.Policy, ramped herdRun, flat []int, all, tolerance int) string {
	t.Helper()
	var table strings.Builder
	tw := tabwriter.NewWriter(&table, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "after close\tshare\tramp: calls made\tramp: at broker\tschedule: share x made\t")
	if flat != nil {
		fmt.Fprint(tw, "without ramp: at broker\t")
	}
	fmt.Fprintln(tw)
	for tick := range herdTicks {
		since := time.Duration(tick) * herdTick
		share := backend.RampShare(policy, since)
		want := share * float64(ramped.offered[tick])
		got := ramped.broker[tick]
		fmt.Fprintf(tw, "%v\t%.2f\t%d\t%d\t%.0f\t", since, share, ramped.offered[tick], got, want)
		if flat != nil {
			fmt.Fprintf(tw, "%d\t", flat[tick])
		}
		fmt.Fprintln(tw)
		if math.Abs(float64(got)-want) > float64(tolerance) {
			t.Errorf("%v after close: %d calls reached the broker, the ramp's schedule says %.0f (+/- %d)", since, got, want, tolerance)
		}
		if float64(got) > share*float64(all)+float64(tolerance) {
			t.Errorf("%v after close: %d calls reached the broker, more than the share %.2f of %d", since, got, share, all)
		}
		if since >= policy.RampDuration+policy.RampDuration/8 && (ramped.offered[tick] != all || got != all) {
			t.Errorf("%v after close, past the ramp: %d of %d callers came, %d reached the broker", since, ramped.offered[tick], all, got)
		}
	}
	tw.Flush()
	return table.String()
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
	table := checkRamp(t, policy, ramped, flat.broker, all, tolerance)
	t.Logf("recovery herd, 10,000 callers on 100 replicas, calls per 100 ms (plus %d probes at the close):\n%s", ramped.probes, table)
	if flat.broker[0] != all {
		t.Errorf("without a ramp %d calls reached the broker in the first 100 ms, want all %d", flat.broker[0], all)
	}
	if first := ramped.broker[0]; first > all/10+tolerance {
		t.Errorf("with the ramp %d calls reached the broker in the first 100 ms, want about %d", first, all/10)
	}
	record(result{"recovery herd with a 2s ramp: calls at the broker in the first 100ms", all, ramped.broker[0], 0, 0, 0})
	record(result{"recovery herd without a ramp: calls at the broker in the first 100ms", all, flat.broker[0], 0, 0, 0})
}
