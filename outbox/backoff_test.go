package outbox

import (
	"math"
	"testing"
	"time"
)

func TestBackoffDelay(t *testing.T) {
	b := Backoff{Initial: time.Second, Max: 10 * time.Second, Multiplier: 2, Jitter: 0.5}
	for _, tc := range []struct {
		attempt int
		r       float64
		want    time.Duration
	}{
		{1, 0, time.Second},
		{2, 0, 2 * time.Second},
		{4, 0, 8 * time.Second},
		{5, 0, 10 * time.Second}, // capped
		{1000, 0, 10 * time.Second},
		{3, 0.5, 3 * time.Second}, // 4s less a quarter
		{5, 0.999, 5005 * time.Millisecond},
		{0, 0, time.Second},
	} {
		if got := b.delay(tc.attempt, tc.r); got != tc.want {
			t.Errorf("Delay(%d, %v) = %v, want %v", tc.attempt, tc.r, got, tc.want)
		}
	}
	// A cap at the largest Duration: the float delay rounds up to 2^63, which does not
	// convert back to a Duration; the delay must stay the cap, not wrap negative.
	huge := Backoff{Initial: time.Second, Max: math.MaxInt64, Multiplier: 2}
	if got := huge.delay(40, 0); got != math.MaxInt64 {
		t.Errorf("Delay(40, 0) with Max MaxInt64 = %v, want the cap", got)
	}
	for _, bad := range []Backoff{
		{}, {Initial: time.Second, Max: time.Second, Multiplier: 0.5},
		{Initial: time.Second, Max: time.Second, Multiplier: 1, Jitter: 2},
	} {
		if bad.Validate() == nil {
			t.Errorf("Validate(%+v) = nil", bad)
		}
	}
	if err := DefaultBackoff.Validate(); err != nil {
		t.Errorf("DefaultBackoff: %v", err)
	}
}

// A delay that reaches the cap is the cap itself, also where the cap has no exact
// float64: a Max of 2^53+1 ns rounds to 2^53 as a float, so a grown delay equal to
// that float is the cap, not a nanosecond below it; at Max = MaxInt64 the float is
// 2^63, which does not convert back to a Duration at all.
func TestBackoffDelayAtACapWithoutAnExactFloat(t *testing.T) {
	for _, b := range []Backoff{
		{Initial: 1 << 52, Max: 1<<53 + 1, Multiplier: 2},
		{Initial: 1 << 62, Max: math.MaxInt64, Multiplier: 2},
	} {
		if err := b.Validate(); err != nil {
			t.Fatal(err)
		}
		if got := b.delay(2, 0); got != b.Max {
			t.Errorf("%+v: Delay(2, 0) = %d ns, want the cap %d ns", b, int64(got), int64(b.Max))
		}
		if got, want := b.delay(1, 0), b.Initial; got != want {
			t.Errorf("%+v: Delay(1, 0) = %v, want Initial %v", b, got, want)
		}
	}
}
