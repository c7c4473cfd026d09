package outbox

import (
	"fmt"
	"math"
	"time"
)

// Backoff spaces the retries of a row whose publish failed: the n-th failure makes the
// row visible again after Initial*Multiplier^(n-1), capped at Max, less a random part
// of up to Jitter of it (so the cap is never passed and retries of a burst of failures
// spread out).
type Backoff struct {
	Initial    time.Duration // delay after the first failure; must be positive
	Max        time.Duration // cap on the delay; at least Initial
	Multiplier float64       // growth per failure; at least 1
	Jitter     float64       // fraction 0..1 of the delay taken off at random; 0 means none
}

// DefaultBackoff is the Processor's backoff unless WithBackoff says otherwise.
var DefaultBackoff = Backoff{Initial: time.Second, Max: 5 * time.Minute, Multiplier: 2, Jitter: 0.2}

// Validate reports the first field out of range.
func (b Backoff) Validate() error {
	switch {
	case b.Initial <= 0:
		return fmt.Errorf("outbox: backoff Initial %v must be positive", b.Initial)
	case b.Max < b.Initial:
		return fmt.Errorf("outbox: backoff Max %v is below Initial %v", b.Max, b.Initial)
	case !(b.Multiplier >= 1): // also rejects NaN
		return fmt.Errorf("outbox: backoff Multiplier %v must be at least 1", b.Multiplier)
	case !(b.Jitter >= 0 && b.Jitter <= 1):
		return fmt.Errorf("outbox: backoff Jitter %v must be within [0, 1]", b.Jitter)
	}
	return nil
}

// delay returns the wait after the attempt-th failure (attempt >= 1) given a random
// number r in [0, 1).
func (b Backoff) delay(attempt int, r float64) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	// Cap in Durations, not floats: float64(b.Max) may round up past the largest
	// Duration, which does not convert back. (A NaN or infinite d also takes the cap.)
	d := b.Max
	if f := float64(b.Initial) * math.Pow(b.Multiplier, float64(attempt-1)); f < float64(b.Max) {
		d = time.Duration(f)
	}
	return d - time.Duration(float64(d)*b.Jitter*r)
}
