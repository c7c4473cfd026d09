package outbox_test

import (
	"math"
	"testing"

	"github.com/brokerguard/brokerguard/outbox"
)

// A delay that reaches the cap is the cap itself, also where the cap has no exact
// float64: a Max of 2^53+1 ns rounds to 2^53 as a float, so a grown delay equal to
// that float is the cap, not a nanosecond below it; at Max = MaxInt64 the float is
// 2^63, which does not convert back to a Duration at all.
func TestBackoffDelayAtACapWithoutAnExactFloat(t *testing.T) {
	for _, b := range []outbox.Backoff{
		{Initial: 1 << 52, Max: 1<<53 + 1, Multiplier: 2},
		{Initial: 1 << 62, Max: math.MaxInt64, Multiplier: 2},
	} {
		if err := b.Validate(); err != nil {
			t.Fatal(err)
		}
		if got := b.Delay(2, 0); got != b.Max {
			t.Errorf("%+v: Delay(2, 0) = %d ns, want the cap %d ns", b, int64(got), int64(b.Max))
		}
		if got, want := b.Delay(1, 0), b.Initial; got != want {
			t.Errorf("%+v: Delay(1, 0) = %v, want Initial %v", b, got, want)
		}
	}
}
