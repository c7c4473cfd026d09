package breaker_test

import (
	"errors"
	"testing"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/backend"
)

// An OpenError says which circuit refused and until when, whether it was built by
// NewOpenError or as a literal; only a ramp's refusal has Ramping set, and every one is
// ErrOpen.
func TestOpenErrorMessageAndKinds(t *testing.T) {
	made := backend.NewOpenError("kafka:orders", breaker.LocalProcess, t0)
	literal := &breaker.OpenError{Identity: "kafka:orders", NotBefore: t0}
	want := "breaker: circuit open: kafka:orders (retry after 2026-01-02T03:04:05Z)"
	if made.Error() != want || literal.Error() != want {
		t.Fatalf("messages %q and %q, want %q", made.Error(), literal.Error(), want)
	}
	ramping := &breaker.OpenError{Identity: "kafka:orders", NotBefore: t0, Ramping: true}
	if got := ramping.Error(); got != "breaker: circuit ramping up: kafka:orders (retry after 2026-01-02T03:04:05Z)" {
		t.Fatalf("ramping message %q", got)
	}
	if isRampRefusal(made) || !errors.Is(made, breaker.ErrOpen) {
		t.Fatal("an open circuit's refusal: want ErrOpen, not a ramp refusal")
	}
	if !isRampRefusal(ramping) || !errors.Is(ramping, breaker.ErrOpen) {
		t.Fatal("a ramp's refusal: want a ramp refusal and ErrOpen")
	}
	if errors.Is(made, breaker.ErrSaturated) || errors.Is(ramping, breaker.ErrSaturated) {
		t.Fatal("a refusal of an open circuit is ErrSaturated")
	}
}
