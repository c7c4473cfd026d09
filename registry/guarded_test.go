package registry_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// adapterLike is a publisher that takes its circuit itself through Registry.Call, as
// the adapters do, and says so (registry.Guarded).
type adapterLike struct {
	reg  *registry.Registry
	down bool
}

func (a *adapterLike) GuardedBy() *registry.Registry { return a.reg }

func (a *adapterLike) Publish(ctx context.Context, d transport.Destination, msgs ...transport.Message) error {
	return a.reg.Call(ctx, d, len(msgs), nil, func(context.Context) error {
		if a.down {
			return errors.New("broker down")
		}
		return nil
	})
}

// The scenario: a guarded publisher guarded again by its own registry, an
// outage, then a healthy broker. Guard hands back the publisher itself, so the
// circuit closes on the first probe instead of staying half-open for good.
func TestGuardTwiceRecoversAfterOutage(t *testing.T) {
	clock := fakeclock.New(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	reg, err := registry.New(registry.Policy{Circuit: breaker.Policy{FailureThreshold: 2, BreakDuration: time.Second}}, registry.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	inner := &adapterLike{reg: reg, down: true}
	pub := reg.Guard(inner, nil)
	if pub != transport.Publisher(inner) {
		t.Fatalf("Guard wrapped a publisher its own registry guards: %T", pub)
	}
	if again := reg.Guard(reg.Guard(pub, nil), nil); again != pub {
		t.Fatalf("Guard of Guard's own publisher wrapped it again: %T", again)
	}
	d := transport.Destination{Broker: "kafka", Name: "orders"}
	ctx := context.Background()
	for range 3 {
		pub.Publish(ctx, d, transport.Message{})
	}
	if err := pub.Publish(ctx, d, transport.Message{}); !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("after the outage: %v, want the circuit open", err)
	}
	inner.down = false
	clock.Advance(2 * time.Second)
	published := 0
	for range 20 {
		if pub.Publish(ctx, d, transport.Message{}) == nil {
			published++
		}
	}
	if c, _ := reg.Lookup(d); published != 20 || c.Snapshot().State != breaker.Closed {
		t.Fatalf("healthy broker after the break: %d of 20 published, circuit %v", published, c.Snapshot().State)
	}
}

// The wrapper Guard returns is itself recognised, and a publisher guarded by another
// registry is refused when it is guarded, with a message that names the fix.
func TestGuardRefusesAnotherRegistrysPublisher(t *testing.T) {
	a, _ := registry.New(registry.DefaultPolicy())
	b, _ := registry.New(registry.DefaultPolicy())
	for _, pub := range []transport.Publisher{&adapterLike{reg: a}, a.Guard(failing{}, nil)} {
		func() {
			defer func() {
				msg, _ := recover().(string)
				if !strings.Contains(msg, "already guarded by another registry") || !strings.Contains(msg, "build it with this registry") {
					t.Errorf("Guard by another registry: panic %q", msg)
				}
			}()
			b.Guard(pub, nil)
		}()
	}
}

// The zero Policy would protect nothing: it is refused as the default and as an
// override, with an error naming the fix; Disabled says it on purpose.
func TestZeroPolicyRefused(t *testing.T) {
	_, err := registry.New(registry.Policy{Circuit: breaker.Policy{}})
	var pe *breaker.PolicyError
	if !errors.As(err, &pe) || pe.Field != "FailureThreshold" || !errors.As(err, new(*breaker.PolicyError)) ||
		!strings.Contains(err.Error(), "registry.DefaultPolicy()") || !strings.Contains(err.Error(), "Disabled") {
		t.Fatalf("registry.New(Policy{}): %v", err)
	}
	if _, err := registry.New(registry.DefaultPolicy(), registry.WithOverride("kafka:audit", registry.Policy{Circuit: breaker.Policy{MaxInFlight: 4}})); err == nil ||
		!strings.Contains(err.Error(), `override "kafka:audit"`) {
		t.Fatalf("an override that never opens: %v", err)
	}
	bulkhead := breaker.DisabledPolicy()
	bulkhead.MaxInFlight = 4
	reg, err := registry.New(registry.Policy{Circuit: breaker.DisabledPolicy()}, registry.WithOverride("kafka:audit", registry.Policy{Circuit: bulkhead}))
	if err != nil {
		t.Fatalf("Disabled on purpose: %v", err)
	}
	if _, err := registry.New(registry.Policy{Circuit: breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second, Disabled: true}}); err == nil {
		t.Fatal("Disabled with a FailureThreshold was accepted")
	}
	d := transport.Destination{Broker: "kafka", Name: "orders"}
	pub := reg.Guard(&failing{}, nil)
	for range 100 {
		pub.Publish(context.Background(), d, transport.Message{})
	}
	if c, _ := reg.Lookup(d); c.Snapshot().State != breaker.Closed {
		t.Fatalf("a disabled circuit is %v", c.Snapshot().State)
	}
}

type failing struct{}

func (failing) Publish(context.Context, transport.Destination, ...transport.Message) error {
	return errors.New("down")
}
