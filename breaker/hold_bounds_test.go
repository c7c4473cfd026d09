package breaker_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
)

// CheckHold at each exact bound: one nanosecond ahead is a hold, LatestHold itself
// is not, the first instant of 1970 is, and a hold of exactly maxHold is allowed.
// The error says which rule failed and shows the end it refused.
func TestCheckHoldAtItsExactBounds(t *testing.T) {
	y1970 := time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name       string
		now, until time.Time
		max        time.Duration
		want       string // "" when accepted, else a part of the message
	}{
		{"one nanosecond ahead", t0, t0.Add(1), 0, ""},
		{"at now", t0, t0, 0, "is not in the future"},
		{"just before LatestHold", t0, breaker.LatestHold.Add(-1), 0, ""},
		{"at LatestHold", t0, breaker.LatestHold, 0, "is outside the years 1970 to 2261"},
		{"first instant of 1970", y1970.Add(-time.Hour), y1970, 0, ""},
		{"last instant of 1969", y1970.Add(-time.Hour), y1970.Add(-1), 0, "is outside the years 1970 to 2261"},
		{"exactly maxHold", t0, t0.Add(time.Hour), time.Hour, ""},
		{"maxHold and a nanosecond", t0, t0.Add(time.Hour + 1), time.Hour, "is more than 1h0m0s ahead"},
	} {
		err := breaker.CheckHold(c.now, c.until, c.max)
		if c.want == "" {
			if err != nil {
				t.Errorf("%s: CheckHold = %v, want nil", c.name, err)
			}
			continue
		}
		var he *breaker.HoldError
		if !errors.As(err, &he) || !he.Until.Equal(c.until) {
			t.Errorf("%s: CheckHold = %v, want a *HoldError for %v", c.name, err, c.until)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, c.want) || !strings.HasPrefix(msg, "breaker: a hold until "+c.until.UTC().Format(time.RFC3339)+" ") {
			t.Errorf("%s: message %q, want the end and %q", c.name, msg, c.want)
		}
	}
}
