package registry_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// hang is a publisher whose broker never answers: it returns when the caller's
// context ends, with the context's error, as the SDKs do.
var hang = &fakePublisher{fn: func(ctx context.Context, _ transport.Destination) error {
	<-ctx.Done()
	return ctx.Err()
}}

// TestDeadlineRule runs a hung broker against callers with different deadlines. The
// clock is synctest's, so deadlines pass without sleeping.
func TestDeadlineRule(t *testing.T) {
	for _, tc := range []struct {
		name         string
		budget       time.Duration // the destination's MinCallBudget; 0 is the default
		ctx          func(context.Context) (context.Context, context.CancelFunc)
		wantFailures int
	}{
		{name: "deadline with a fair budget is a Failure", wantFailures: 1,
			ctx: func(c context.Context) (context.Context, context.CancelFunc) {
				return context.WithTimeout(c, 200*time.Millisecond)
			}},
		{name: "deadline at exactly the budget is a Failure", wantFailures: 1,
			ctx: func(c context.Context) (context.Context, context.CancelFunc) {
				return context.WithTimeout(c, registry.DefaultMinCallBudget)
			}},
		{name: "deadline shorter than the budget is no verdict", wantFailures: 0,
			ctx: func(c context.Context) (context.Context, context.CancelFunc) {
				return context.WithTimeout(c, 50*time.Millisecond)
			}},
		{name: "a budget set per destination", budget: 2 * time.Second, wantFailures: 0,
			ctx: func(c context.Context) (context.Context, context.CancelFunc) {
				return context.WithTimeout(c, time.Second)
			}},
		{name: "the caller's cancellation is no verdict", wantFailures: 0,
			ctx: func(c context.Context) (context.Context, context.CancelFunc) {
				c, cancel := context.WithCancel(c)
				time.AfterFunc(time.Second, cancel)
				return c, cancel
			}},
		{name: "a parent's deadline counts like the caller's own", wantFailures: 1,
			ctx: func(c context.Context) (context.Context, context.CancelFunc) {
				parent, cancelParent := context.WithTimeout(c, 300*time.Millisecond)
				child, cancel := context.WithCancel(parent)
				return child, func() { cancel(); cancelParent() }
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newRegistry(t, registry.WithOverride("kafka:orders", registry.Policy{Circuit: breaker.Policy{FailureThreshold: 5, BreakDuration: time.Second}, MinCallBudget: tc.budget}))
				ctx, cancel := tc.ctx(t.Context())
				defer cancel()
				err := r.Guard(hang, classify).Publish(ctx, orders, transport.Message{})
				if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
					t.Fatalf("publish returned %v", err)
				}
				if s := r.Snapshots()[orders]; s.Failures != tc.wantFailures {
					t.Fatalf("failures %d, want %d", s.Failures, tc.wantFailures)
				}
			})
		})
	}
}

// A hung broker opens the circuit of callers with 200ms deadlines under the default
// policy budget, in as many calls as the threshold.
func TestHungBrokerOpensWithShortDeadlines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRegistry(t, registry.WithOverride("kafka:orders", registry.Policy{Circuit: breaker.Policy{FailureThreshold: 3, BreakDuration: time.Minute}}))
		g := r.Guard(hang, classify)
		for i := range 3 {
			ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
			err := g.Publish(ctx, orders, transport.Message{})
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("call %d: %v", i, err)
			}
		}
		ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
		defer cancel()
		if err := g.Publish(ctx, orders, transport.Message{}); !errors.Is(err, breaker.ErrOpen) {
			t.Fatalf("after three hung calls: %v, want the circuit open", err)
		}
	})
}

// Outcome's rule for publishers that complete permits themselves, with Start taken
// from the registry.
func TestStartAndOutcome(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newRegistry(t, registry.WithOverride("kafka:refunds", registry.Policy{Circuit: breaker.Policy{Disabled: true}, MinCallBudget: time.Hour}))
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		fair, short := r.Start(ctx, orders), r.Start(ctx, refunds)
		none := r.Start(t.Context(), refunds) // no deadline: any deadline error is the broker's
		<-ctx.Done()
		for _, tc := range []struct {
			name  string
			start registry.Start
			want  breaker.Outcome
		}{
			{"fair budget", fair, breaker.Failure},
			{"short budget", short, breaker.Neutral},
			{"zero Start", registry.Start{}, breaker.Failure},
			{"no deadline", none, breaker.Failure},
		} {
			if got := registry.Outcome(ctx, tc.start, ctx.Err(), 1, classify); got != tc.want {
				t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
			}
		}
		if got := registry.Outcome(ctx, fair, nil, 1, classify); got != breaker.Success {
			t.Errorf("nil error after the deadline: %v", got)
		}
	})
}

// An empty publish is refused before a permit is taken: it never becomes the
// half-open probe, so it cannot close the circuit of a broker that is still down.
func TestEmptyPublishIsRefusedBeforeThePermit(t *testing.T) {
	clock := fakeclock.New(t0)
	r := newRegistry(t, registry.WithClock(clock),
		registry.WithOverride("kafka:orders", registry.Policy{Circuit: breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second, MaxInFlight: 1}}))
	// Like the adapters used to, it answers an empty publish without the broker.
	calls := 0
	down := publisherFunc(func(_ context.Context, _ transport.Destination, msgs ...transport.Message) error {
		if len(msgs) == 0 {
			return nil
		}
		calls++
		return errBroker
	})
	g := r.Guard(down, classify)
	ctx := context.Background()
	if err := g.Publish(ctx, orders, transport.Message{}); !errors.Is(err, errBroker) {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Second) // the break is over: the next call is the probe
	err := g.Publish(ctx, orders)
	if !errors.Is(err, registry.ErrNoMessages) || err.Error() != "registry: publish of no messages to kafka:orders: give at least one message" {
		t.Fatalf("empty publish: %v", err)
	}
	if s := r.Snapshots()[orders]; s.State != breaker.Open || s.InFlight != 0 {
		t.Fatalf("after an empty publish: %+v", s)
	}
	if err := g.Publish(ctx, orders, transport.Message{}); !errors.Is(err, errBroker) {
		t.Fatalf("the probe: %v", err)
	}
	if s := r.Snapshots()[orders]; s.State != breaker.Open || calls != 2 {
		t.Fatalf("a failed probe left %v", s.State)
	}
}

// A client that holds a call's messages before sending them (kafka-go's BatchTimeout)
// spends the caller's time without asking the broker anything: the deadline rule asks
// for the budget beyond the hold, so a healthy broker behind a 1s batch wait is not
// blamed for callers' 300ms deadlines, and a hung one is still blamed for 1.5s ones.
func TestCallHeldAsksTheBudgetBeyondTheHold(t *testing.T) {
	for _, tc := range []struct {
		deadline     time.Duration
		wantFailures int
	}{
		{300 * time.Millisecond, 0},
		{time.Second, 0},
		{1500 * time.Millisecond, 1},
	} {
		synctest.Test(t, func(t *testing.T) {
			r := newRegistry(t)
			ctx, cancel := context.WithTimeout(t.Context(), tc.deadline)
			defer cancel()
			err := r.CallHeld(ctx, orders, 1, time.Second, classify, func(ctx context.Context) error { return hang.Publish(ctx, orders) })
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("%v: %v", tc.deadline, err)
			}
			if s := r.Snapshots()[orders]; s.Failures != tc.wantFailures || s.InFlight != 0 {
				t.Fatalf("deadline %v after a 1s hold: failures %d in flight %d, want %d and 0", tc.deadline, s.Failures, s.InFlight, tc.wantFailures)
			}
		})
	}
}
