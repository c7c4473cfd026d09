package breaker_test

import (
	"errors"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
)

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
		err := breaker.CheckHold(now, c.until, c.max)
		var he *breaker.HoldError
		if c.ok != (err == nil) || err != nil && !errors.As(err, &he) {
			t.Errorf("CheckHold(%v, max %v) = %v; want ok %v", c.until, c.max, err, c.ok)
		}
		if err == nil && time.Unix(0, c.until.UnixNano()).UTC() != c.until.UTC() {
			t.Errorf("CheckHold accepted %v, which Unix nanoseconds cannot hold", c.until)
		}
	}
}
