package backend_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker/backend"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// CheckHold refuses an end in the past, beyond LatestHold, or beyond maxHold.
func TestCheckHold(t *testing.T) {
	now := t0
	for _, c := range []struct {
		until time.Time
		max   time.Duration
		ok    bool
	}{
		{now.Add(time.Hour), 24 * time.Hour, true},
		{now.Add(25 * time.Hour), 24 * time.Hour, false},
		{now.Add(25 * time.Hour), 0, true},
		{now, 0, false},
		{now.Add(-time.Second), 0, false},
		{time.Date(2261, 12, 31, 0, 0, 0, 0, time.UTC), 0, true},
		{time.Date(2262, 4, 1, 0, 0, 0, 0, time.UTC), 0, false}, // Unix nanoseconds end on 2262-04-11
		{time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC), 0, false},
	} {
		err := backend.CheckHold(now, c.until, c.max)
		var he *backend.HoldError
		if c.ok != (err == nil) || err != nil && !errors.As(err, &he) {
			t.Errorf("CheckHold(%v, max %v) = %v; want ok %v", c.until, c.max, err, c.ok)
		}
		if err == nil && time.Unix(0, c.until.UnixNano()).UTC() != c.until.UTC() {
			t.Errorf("CheckHold accepted %v, which Unix nanoseconds cannot hold", c.until)
		}
	}
}

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
		{"just before LatestHold", t0, backend.LatestHold.Add(-1), 0, ""},
		{"at LatestHold", t0, backend.LatestHold, 0, "is outside the years 1970 to 2261"},
		{"first instant of 1970", y1970.Add(-time.Hour), y1970, 0, ""},
		{"last instant of 1969", y1970.Add(-time.Hour), y1970.Add(-1), 0, "is outside the years 1970 to 2261"},
		{"exactly maxHold", t0, t0.Add(time.Hour), time.Hour, ""},
		{"maxHold and a nanosecond", t0, t0.Add(time.Hour + 1), time.Hour, "is more than 1h0m0s ahead"},
	} {
		err := backend.CheckHold(c.now, c.until, c.max)
		if c.want == "" {
			if err != nil {
				t.Errorf("%s: CheckHold = %v, want nil", c.name, err)
			}
			continue
		}
		var he *backend.HoldError
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
