package breaker_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/backend"
)

func TestPolicyValidation(t *testing.T) {
	ok := breaker.Policy{FailureThreshold: 5, BreakDuration: time.Second}
	with := func(f func(*breaker.Policy)) breaker.Policy { p := ok; f(&p); return p }
	for _, tc := range []struct {
		name  string
		p     breaker.Policy
		field string
		msg   string
	}{
		{"negative threshold", with(func(p *breaker.Policy) { p.FailureThreshold = -1 }), "FailureThreshold", "must not be negative (got -1)"},
		{"threshold without break", with(func(p *breaker.Policy) { p.BreakDuration = 0 }), "BreakDuration", "must be positive when FailureThreshold is set"},
		{"negative break", with(func(p *breaker.Policy) { p.BreakDuration = -time.Second }), "BreakDuration", "must not be negative (got -1s)"},
		{"negative window", with(func(p *breaker.Policy) { p.FailureWindow = -1 }), "FailureWindow", "must not be negative (got -1ns)"},
		{"tiny window", with(func(p *breaker.Policy) { p.FailureWindow = time.Microsecond }), "FailureWindow", "must be at least 1ms (got 1µs)"},
		{"negative minimum calls", with(func(p *breaker.Policy) { p.MinimumCalls = -3 }), "MinimumCalls", "must not be negative (got -3)"},
		{"minimum calls without window", with(func(p *breaker.Policy) { p.MinimumCalls = 3 }), "MinimumCalls", "applies only in window mode; set FailureWindow"},
		{"ratio above one", with(func(p *breaker.Policy) { p.FailureWindow = time.Second; p.FailureRatio = 1.5 }), "FailureRatio", "must be within [0, 1] (got 1.5)"},
		{"negative ratio", with(func(p *breaker.Policy) { p.FailureWindow = time.Second; p.FailureRatio = -0.1 }), "FailureRatio", "must be within [0, 1] (got -0.1)"},
		{"NaN ratio", with(func(p *breaker.Policy) { p.FailureWindow = time.Second; p.FailureRatio = math.NaN() }), "FailureRatio", "must be within [0, 1] (got NaN)"},
		{"ratio without window", with(func(p *breaker.Policy) { p.FailureRatio = 0.5 }), "FailureRatio", "applies only in window mode; set FailureWindow"},
		{"negative slow call", with(func(p *breaker.Policy) { p.SlowCallDuration = -1 }), "SlowCallDuration", "must not be negative (got -1ns)"},
		{"negative probes", with(func(p *breaker.Policy) { p.HalfOpenMaxProbes = -1 }), "HalfOpenMaxProbes", "must not be negative (got -1)"},
		{"negative successes", with(func(p *breaker.Policy) { p.SuccessesToClose = -2 }), "SuccessesToClose", "must not be negative (got -2)"},
		{"negative lease", with(func(p *breaker.Policy) { p.ProbeLease = -1 }), "ProbeLease", "must not be negative (got -1ns)"},
		{"negative retry delay", with(func(p *breaker.Policy) { p.HalfOpenRetryDelay = -1 }), "HalfOpenRetryDelay", "must not be negative (got -1ns)"},
		{"max break below break", with(func(p *breaker.Policy) { p.MaxBreakDuration = time.Millisecond }), "MaxBreakDuration", "must not be below BreakDuration (1ms < 1s)"},
		{"negative max break", with(func(p *breaker.Policy) { p.MaxBreakDuration = -1 }), "MaxBreakDuration", "must not be negative (got -1ns)"},
		{"jitter too large", with(func(p *breaker.Policy) { p.Jitter = 0.6 }), "Jitter", "must be within [0, 0.5] (got 0.6)"},
		{"negative jitter", with(func(p *breaker.Policy) { p.Jitter = -0.1 }), "Jitter", "must be within [0, 0.5] (got -0.1)"},
		{"NaN jitter", with(func(p *breaker.Policy) { p.Jitter = math.NaN() }), "Jitter", "must be within [0, 0.5] (got NaN)"},
		{"negative max in flight", with(func(p *breaker.Policy) { p.MaxInFlight = -1 }), "MaxInFlight", "must not be negative (got -1)"},
		{"unknown scope", with(func(p *breaker.Policy) { p.Scope = 9 }), "Scope", "is not a known scope (got 9)"},
		{"unknown mode", with(func(p *breaker.Policy) { p.Mode = 7 }), "Mode", "is not a known mode (got 7)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.p.Validate()
			var pe *breaker.PolicyError
			if !errors.As(err, &pe) || !errors.As(err, new(*breaker.PolicyError)) {
				t.Fatalf("Validate: %v, want a *PolicyError", err)
			}
			if pe.Field != tc.field || pe.Reason != tc.msg {
				t.Fatalf("got %s %q, want %s %q", pe.Field, pe.Reason, tc.field, tc.msg)
			}
			if !strings.HasPrefix(err.Error(), "breaker: invalid policy: "+tc.field+" ") {
				t.Fatalf("message %q does not name the field first", err)
			}
			if _, err := breaker.New("x", tc.p); !errors.As(err, new(*breaker.PolicyError)) {
				t.Fatalf("New accepted the policy: %v", err)
			}
		})
	}
}

func TestValidPolicies(t *testing.T) {
	for _, p := range []breaker.Policy{
		{},
		{MaxInFlight: 10},
		{FailureThreshold: 1, BreakDuration: 1},
		{FailureThreshold: 5, BreakDuration: time.Second, FailureWindow: time.Minute, MinimumCalls: 10, FailureRatio: 0.5},
		{FailureThreshold: 5, BreakDuration: time.Second, MaxBreakDuration: time.Second, Jitter: 0.5},
	} {
		if err := p.Validate(); err != nil {
			t.Errorf("%+v: %v", p, err)
		}
	}
}

// Rule 13: the local breaker refuses shared scopes.
func TestLocalBreakerRefusesSharedScopes(t *testing.T) {
	for _, s := range []breaker.Scope{breaker.SharedDependency, breaker.SingleHost} {
		_, err := breaker.New("x", breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second, Scope: s})
		var pe *breaker.PolicyError
		if !errors.As(err, &pe) || pe.Field != "Scope" || !strings.Contains(err.Error(), s.String()) {
			t.Fatalf("scope %v: %v", s, err)
		}
	}
}

func TestFingerprintIsStableAndCoversEveryField(t *testing.T) {
	base := breaker.Policy{FailureThreshold: 5, BreakDuration: time.Second}
	// A golden value: a changed encoding would split fleets that share circuits.
	// sha256("brokerguard.policy.v1|5|1000000000|0|0|0|0|1|1|1000000000|1000000000|1000000000|0|0|0")[:16],
	// computed outside Go.
	if got, want := backend.Fingerprint(base), "d2035294a1132abcac6a452884fcc8f6"; got != want {
		t.Fatalf("fingerprint %s, want %s", got, want)
	}
	// Spelled-out defaults fingerprint like the zero values they replace.
	spelled := base
	spelled.HalfOpenMaxProbes, spelled.SuccessesToClose, spelled.ProbeLease, spelled.HalfOpenRetryDelay, spelled.MaxBreakDuration = 1, 1, time.Second, time.Second, time.Second
	if backend.Fingerprint(spelled) != backend.Fingerprint(base) {
		t.Fatal("normalized defaults change the fingerprint")
	}
	seen := map[string]string{backend.Fingerprint(base): "base"}
	for name, f := range map[string]func(*breaker.Policy){
		"FailureThreshold":   func(p *breaker.Policy) { p.FailureThreshold = 6 },
		"BreakDuration":      func(p *breaker.Policy) { p.BreakDuration = 2 * time.Second },
		"FailureWindow":      func(p *breaker.Policy) { p.FailureWindow = time.Minute },
		"MinimumCalls":       func(p *breaker.Policy) { p.FailureWindow = time.Minute; p.MinimumCalls = 3 },
		"FailureRatio":       func(p *breaker.Policy) { p.FailureWindow = time.Minute; p.FailureRatio = 0.5 },
		"SlowCallDuration":   func(p *breaker.Policy) { p.SlowCallDuration = time.Second },
		"HalfOpenMaxProbes":  func(p *breaker.Policy) { p.HalfOpenMaxProbes = 2 },
		"SuccessesToClose":   func(p *breaker.Policy) { p.SuccessesToClose = 2 },
		"ProbeLease":         func(p *breaker.Policy) { p.ProbeLease = time.Minute },
		"HalfOpenRetryDelay": func(p *breaker.Policy) { p.HalfOpenRetryDelay = time.Minute },
		"MaxBreakDuration":   func(p *breaker.Policy) { p.MaxBreakDuration = time.Minute },
		"Jitter":             func(p *breaker.Policy) { p.Jitter = 0.1 },
		"MaxInFlight":        func(p *breaker.Policy) { p.MaxInFlight = 1 },
		"Scope":              func(p *breaker.Policy) { p.Scope = breaker.SharedDependency },
		"Mode":               func(p *breaker.Policy) { p.Mode = breaker.Shadow },
		"Mode=FailOpen":      func(p *breaker.Policy) { p.Mode = breaker.FailOpen },
	} {
		p := base
		f(&p)
		fp := backend.Fingerprint(p)
		if other, dup := seen[fp]; dup {
			t.Errorf("changing %s gives the fingerprint of %s", name, other)
		}
		seen[fp] = name
	}
}

func FuzzPolicyValidate(f *testing.F) {
	f.Add(5, int64(time.Second), int64(0), 0, 0.0, int64(0), 0, 0, int64(0), int64(0), int64(0), 0.0, 0, uint8(0))
	f.Add(5, int64(time.Second), int64(time.Minute), 10, 0.5, int64(time.Second), 2, 3, int64(time.Second), int64(time.Second), int64(time.Hour), 0.3, 100, uint8(1))
	f.Fuzz(func(t *testing.T, threshold int, brk, win int64, minCalls int, ratio float64, slow int64, probes, successes int, lease, retry, maxBrk int64, jitter float64, maxInFlight int, scope uint8) {
		p := breaker.Policy{
			FailureThreshold: threshold, BreakDuration: time.Duration(brk), FailureWindow: time.Duration(win),
			MinimumCalls: minCalls, FailureRatio: ratio, SlowCallDuration: time.Duration(slow),
			HalfOpenMaxProbes: probes, SuccessesToClose: successes, ProbeLease: time.Duration(lease),
			HalfOpenRetryDelay: time.Duration(retry), MaxBreakDuration: time.Duration(maxBrk), Jitter: jitter,
			MaxInFlight: maxInFlight, Scope: breaker.Scope(scope),
		}
		err := p.Validate()
		if err != nil {
			var pe *breaker.PolicyError
			if !errors.As(err, &pe) || pe.Field == "" || pe.Reason == "" {
				t.Fatalf("Validate returned %v, not a *PolicyError naming a field", err)
			}
			return
		}
		// A policy that validates must build and behave: no panic, sane first state.
		if p.Scope != breaker.LocalProcess {
			return
		}
		b, err := breaker.New("fuzz", p)
		if err != nil {
			t.Fatalf("valid policy refused by New: %v", err)
		}
		for range 3 {
			if pm, err := b.Acquire(t.Context()); err == nil {
				pm.Complete(breaker.Failure)
			}
		}
		if n := backend.Normalize(p); n.HalfOpenMaxProbes < 1 || n.SuccessesToClose < 1 || n.MaxBreakDuration < n.BreakDuration {
			t.Fatalf("Normalized left a default unset: %+v", n)
		}
	})
}

// A nil jitter source would panic on the first trip, inside the circuit's lock: New
// refuses it rather than leave a circuit that blocks every caller after a recovered panic.
func TestNewRefusesANilRandom(t *testing.T) {
	p := breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second, Jitter: 0.2}
	_, err := breaker.New("kafka:orders", p, breaker.WithRandom(nil))
	if err == nil || !strings.Contains(err.Error(), "WithRandom(nil)") {
		t.Fatalf("New with WithRandom(nil) = %v; want an error naming WithRandom(nil)", err)
	}
}
