package sharedstate_test

// The options every backend takes, and Apply (options.go).

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
)

// ownSettings stands for a backend's own settings; otherSettings for another backend's.
type ownSettings struct{ ttl time.Duration }

type otherSettings struct{}

func withTTL(d time.Duration) sharedstate.Option {
	return sharedstate.DriverOption(func(o *ownSettings) error {
		if d <= 0 {
			return errors.New("TTL must be positive")
		}
		o.ttl = d
		return nil
	})
}

func TestApplyRefusesEachBadOptionNamingIt(t *testing.T) {
	for _, tt := range []struct {
		name string
		opt  sharedstate.Option
		want string
	}{
		{"nil option", nil, "option 1 is nil"},
		{"nil clock", sharedstate.WithClock(nil), "WithClock(nil)"},
		{"nil random", sharedstate.WithRandom(nil), "WithRandom(nil)"},
		{"nil observer", sharedstate.WithObserver(nil), "WithObserver(nil)"},
		{"negative staleness", sharedstate.WithMaxStaleness(-time.Second), "MaxStaleness"},
		{"negative retry delay", sharedstate.WithRetryDelay(-1), "RetryDelay"},
		{"zero I/O timeout", sharedstate.WithIOTimeout(0), "IOTimeout"},
		{"negative I/O timeout", sharedstate.WithIOTimeout(-time.Second), "IOTimeout"},
		{"unknown store failure mode", sharedstate.WithStoreFailure(7), "WithStoreFailure(7)"},
		{"the backend's own option out of range", withTTL(0), "TTL must be positive"},
		{"another backend's option", sharedstate.DriverOption(func(*otherSettings) error { return nil }), "another backend"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := sharedstate.Apply(sharedstate.Config{}, &ownSettings{}, []sharedstate.Option{tt.opt})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Apply = %v; want an error naming %q", err, tt.want)
			}
		})
	}
}

func TestApplySetsTheConfigOverTheBackendsDefaults(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	random := func() float64 { return 0.5 }
	var seen, handled int
	base := sharedstate.Config{MaxStaleness: 250 * time.Millisecond, RetryDelay: time.Second, IOTimeout: time.Second, Owner: "base"}
	own := ownSettings{ttl: time.Hour}
	cfg, prefix, err := sharedstate.Apply(base, &own, []sharedstate.Option{
		sharedstate.WithClock(clock), sharedstate.WithRandom(random), sharedstate.WithOwner("replica-1"),
		sharedstate.WithIOTimeout(3 * time.Second), sharedstate.WithStoreFailure(sharedstate.FailClosed),
		sharedstate.WithObserver(func(breaker.Transition) { seen++ }), sharedstate.WithObserver(func(breaker.Transition) { seen += 10 }),
		sharedstate.WithErrorHandler(func(error) { handled++ }), sharedstate.WithIdentityPrefix("billing/"),
		withTTL(time.Minute),
	})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Clock != clock || cfg.Random() != 0.5 || cfg.Owner != "replica-1" || cfg.IOTimeout != 3*time.Second ||
		cfg.OnStoreFailure != sharedstate.FailClosed || prefix != "billing/" || own.ttl != time.Minute {
		t.Fatalf("Apply = %+v, prefix %q, own %+v; want every option's value", cfg, prefix, own)
	}
	if cfg.MaxStaleness != base.MaxStaleness || cfg.RetryDelay != base.RetryDelay {
		t.Fatalf("MaxStaleness %v, RetryDelay %v; want the backend's defaults %v, %v kept", cfg.MaxStaleness, cfg.RetryDelay, base.MaxStaleness, base.RetryDelay)
	}
	for _, f := range cfg.Observers {
		f(breaker.Transition{})
	}
	cfg.OnError(errors.New("lost"))
	if seen != 11 || handled != 1 {
		t.Fatalf("observers saw %d, handler %d; want both observers (11) and the handler (1)", seen, handled)
	}
}

// The options' 0 means "none", which Config spells as a negative value (its 0 is the
// default); a positive value passes as it is.
func TestZeroStalenessAndRetryDelayMeanNone(t *testing.T) {
	for _, tt := range []struct {
		give, want time.Duration
	}{{0, -1}, {time.Second, time.Second}} {
		cfg, _, err := sharedstate.Apply(sharedstate.Config{}, &ownSettings{}, []sharedstate.Option{
			sharedstate.WithMaxStaleness(tt.give), sharedstate.WithRetryDelay(tt.give)})
		if err != nil || cfg.MaxStaleness != tt.want || cfg.RetryDelay != tt.want {
			t.Errorf("WithMaxStaleness/WithRetryDelay(%v): %v, %v, %v; want %v", tt.give, cfg.MaxStaleness, cfg.RetryDelay, err, tt.want)
		}
	}
}
