package admission_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/admission"
)

func TestPolicyValidationNamesTheField(t *testing.T) {
	for _, c := range []struct {
		lp    admission.LimitPolicy
		field string
	}{
		{admission.LimitPolicy{Max: -1}, "Limit.Max"},
		{admission.LimitPolicy{Min: 3}, "Limit.Max"},
		{admission.LimitPolicy{Window: time.Second, BulkShare: 0.25}, "Limit.Max"},
		{admission.LimitPolicy{Max: 10, Min: 11}, "Limit.Min"},
		{admission.LimitPolicy{Max: 10, Min: -1}, "Limit.Min"},
		{admission.LimitPolicy{Max: 10, Tolerance: 0.5}, "Limit.Tolerance"},
		{admission.LimitPolicy{Max: 10, Tolerance: -1}, "Limit.Tolerance"},
		{admission.LimitPolicy{Max: 10, BulkShare: 1.5}, "Limit.BulkShare"},
		{admission.LimitPolicy{Max: 10, BulkShare: -0.1}, "Limit.BulkShare"},
		{admission.LimitPolicy{Max: 10, Window: time.Microsecond}, "Limit.Window"},
		{admission.LimitPolicy{Max: 10, Window: -time.Second}, "Limit.Window"},
	} {
		err := admission.Policy{Limit: c.lp}.Validate()
		var pe *admission.PolicyError
		if !errors.As(err, &pe) || pe.Field != c.field {
			t.Errorf("%+v: %v, want an error naming %s", c.lp, err, c.field)
		}
	}
	for _, c := range []struct {
		tp    admission.ThrottlePolicy
		field string
	}{
		{admission.ThrottlePolicy{K: 0.5}, "Throttle.K"},
		{admission.ThrottlePolicy{MinSent: 3}, "Throttle.K"},
		{admission.ThrottlePolicy{K: 3, Window: time.Millisecond}, "Throttle.Window"},
		{admission.ThrottlePolicy{K: 3, MinSent: -1}, "Throttle.MinSent"},
	} {
		err := admission.Policy{Limit: admission.DefaultPolicy().Limit, Throttle: c.tp}.Validate()
		var pe *admission.PolicyError
		if !errors.As(err, &pe) || pe.Field != c.field {
			t.Errorf("%+v: %v, want an error naming %s", c.tp, err, c.field)
		}
	}
	for _, p := range []admission.Policy{{}, admission.DefaultPolicy(), {Throttle: admission.DefaultThrottlePolicy()}, {Limit: admission.LimitPolicy{Max: 1, Min: 1, Tolerance: 1, BulkShare: 1, Window: time.Millisecond}}} {
		if err := p.Validate(); err != nil {
			t.Errorf("%+v: %v", p, err)
		}
	}
	if want := "admission: invalid policy: Limit.Min must not exceed Limit.Max (11 > 10)"; (admission.Policy{Limit: admission.LimitPolicy{Max: 10, Min: 11}}).Validate().Error() != want {
		t.Errorf("message %q, want %q", (admission.Policy{Limit: admission.LimitPolicy{Max: 10, Min: 11}}).Validate(), want)
	}
}

// DefaultPolicy is what its comment says, with every default written out (a Window
// of 100ms), so that it shows the window it runs with; the zero Policy admits
// everything, and a limit turned off is no Limiter.
func TestDefaultPolicyIsWrittenOutAndTheZeroPolicyIsOff(t *testing.T) {
	want := admission.LimitPolicy{Max: 1000, Min: 1, Tolerance: 2, BulkShare: 0.5, Window: 100 * time.Millisecond}
	if got := admission.DefaultPolicy(); got.Limit != want || got.Throttle != admission.DefaultThrottlePolicy() || !got.Enabled() {
		t.Fatalf("DefaultPolicy() = %+v, want the limit %+v and the default throttle, enabled", got, want)
	}
	if !(admission.Policy{Throttle: admission.DefaultThrottlePolicy()}).Enabled() {
		t.Fatal("a policy with the throttle alone does not control admission")
	}
	if (admission.Policy{}).Enabled() || admission.NewLimiter(admission.LimitPolicy{}, nil) != nil {
		t.Fatal("the zero Policy controls admission")
	}
	// 0 means the defaults: a limit of Max alone runs with Min 1, a bulk share of a
	// half and a 100ms Window.
	l := newLimiter(t, admission.LimitPolicy{Max: 10})
	l.wantBulkLimit(5)
	if l.lim.RetryAfter() != 100*time.Millisecond {
		t.Fatalf("RetryAfter %v, want the default Window of 100ms", l.lim.RetryAfter())
	}
	for range 5 { // one failure per ten Windows: each closes a window and halves the limit
		l.calls(1, time.Second, admission.Failure)
	}
	l.wantLimit(1)
}

func TestPrioritiesAndResultsHaveNames(t *testing.T) {
	ctx := context.Background()
	if admission.PriorityOf(ctx) != admission.Online || admission.PriorityOf(admission.WithPriority(ctx, admission.Bulk)) != admission.Bulk {
		t.Fatal("PriorityOf does not read what WithPriority marked")
	}
	for _, c := range []struct{ got, want string }{
		{admission.Online.String(), "online"}, {admission.Bulk.String(), "bulk"},
		{admission.Ignored.String(), "ignored"}, {admission.Success.String(), "success"},
		{admission.Failure.String(), "failure"}, {admission.Dropped.String(), "dropped"},
		{admission.Result(9).String(), "Result(9)"},
	} {
		if c.got != c.want {
			t.Errorf("%q, want %q", c.got, c.want)
		}
	}
}
