package registry

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"testing/synctest"
	"time"

	"github.com/brokerguard/brokerguard/admission"
	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/transport"
)

// lateContext is a context whose deadline has passed but whose cancellation has not
// run yet, as an SDK that returns its connection's timeout at the deadline may see it.
type lateContext struct {
	context.Context
	deadline time.Time
}

func (c lateContext) Deadline() (time.Time, bool) { return c.deadline, true }

// Errors of the calls in TestEveryJudgeGetsTheDeadlineRule.
var (
	errAnswer   = errors.New("broker: not leader")
	errTooLarge = errors.New("message too large")
	errIOTimout = fmt.Errorf("read tcp: %w", os.ErrDeadlineExceeded)
)

func judgeClassify(err error) breaker.Outcome {
	if errors.Is(err, errTooLarge) {
		return breaker.Rejected
	}
	return breaker.Failure
}

// TestEveryJudgeGetsTheDeadlineRule lists what the circuit, the adaptive limit and
// the throttle each learn from every kind of call end under DefaultPolicy. The rule
// the table keeps: a call that started with less than MinCallBudget and was ended by
// its deadline says nothing to any of them, however the SDK reports the deadline; the
// caller's cancellation and a message's own rejection neither.
func TestEveryJudgeGetsTheDeadlineRule(t *testing.T) {
	const short, fair = 50 * time.Millisecond, 200 * time.Millisecond
	type want struct {
		o        breaker.Outcome
		res, thr admission.Result
		missed   bool
	}
	for _, tc := range []struct {
		name  string
		state string        // the destination before the call: "cold", "idle" (a success 2s ago) or "answering"
		dl    time.Duration // the call's deadline; 0: none
		late  bool          // the SDK returns at the deadline before the context's cancellation runs
		call  func(ctx context.Context, cancel context.CancelFunc) error
		want  want
	}{
		{"success", "idle", 0, false, func(context.Context, context.CancelFunc) error { return nil },
			want{breaker.Success, admission.Success, admission.Success, false}},
		// An error answer is the throttle's: the limit learns concurrency from latency
		// and drops (see entry.end).
		{"error answer", "idle", 0, false, func(context.Context, context.CancelFunc) error { return errAnswer },
			want{breaker.Failure, admission.Ignored, admission.Failure, false}},
		{"error answer within a short deadline", "idle", short, false, func(context.Context, context.CancelFunc) error { return errAnswer },
			want{breaker.Failure, admission.Ignored, admission.Failure, false}},
		{"message rejected", "idle", 0, false, func(context.Context, context.CancelFunc) error { return errTooLarge },
			want{breaker.Rejected, admission.Ignored, admission.Ignored, false}},
		{"caller cancelled", "idle", 0, false, func(ctx context.Context, cancel context.CancelFunc) error {
			cancel()
			return ctx.Err()
		}, want{breaker.Neutral, admission.Ignored, admission.Ignored, false}},
		{"client timeout, no deadline", "idle", 0, false, func(context.Context, context.CancelFunc) error { return errIOTimout },
			want{breaker.Failure, admission.Dropped, admission.Dropped, true}},
		{"fair deadline", "idle", fair, false, waitDone,
			want{breaker.Failure, admission.Dropped, admission.Dropped, true}},
		{"fair deadline, reported as the client's timeout first", "idle", fair, true, sleepThen(fair, errIOTimout),
			want{breaker.Failure, admission.Dropped, admission.Dropped, true}},
		{"short deadline", "idle", short, false, waitDone,
			want{breaker.Neutral, admission.Ignored, admission.Ignored, false}},
		{"short deadline, reported as the client's timeout first", "idle", short, true, sleepThen(short, errIOTimout),
			want{breaker.Neutral, admission.Ignored, admission.Ignored, false}},
		{"short deadline, reported as the SDK's own error first", "idle", short, true, sleepThen(short, errAnswer),
			want{breaker.Neutral, admission.Ignored, admission.Ignored, false}},
		{"short deadline, wrapped by the SDK", "idle", short, false, func(ctx context.Context, _ context.CancelFunc) error {
			<-ctx.Done()
			return fmt.Errorf("produce: %w", ctx.Err())
		}, want{breaker.Neutral, admission.Ignored, admission.Ignored, false}},
		{"fair deadline, cold destination, call alone", "cold", fair, false, waitDone,
			want{breaker.Failure, admission.Dropped, admission.Dropped, true}},
		{"fair deadline, destination answering", "answering", fair, false, waitDone,
			want{breaker.Neutral, admission.Dropped, admission.Ignored, false}},
		{"fair deadline in set-up, destination answered", "answering", fair, false, func(ctx context.Context, _ context.CancelFunc) error {
			<-ctx.Done()
			return fmt.Errorf("%w: %w", transport.ErrNotSent, ctx.Err())
		}, want{breaker.Neutral, admission.Ignored, admission.Ignored, false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r, err := New(DefaultPolicy())
				if err != nil {
					t.Fatal(err)
				}
				d := transport.Destination{Broker: "kafka", Name: "orders"}
				ok := func(context.Context) error { return nil }
				switch tc.state {
				case "idle":
					_ = r.Call(t.Context(), d, 1, judgeClassify, ok)
					time.Sleep(2 * time.Second)
				case "answering": // successes over more than a window of the limit
					for range 10 {
						_ = r.Call(t.Context(), d, 1, judgeClassify, ok)
						time.Sleep(20 * time.Millisecond)
					}
				}
				var got []want
				testHookEnd = func(o breaker.Outcome, res, thr admission.Result, missed bool) { // res as the limit gets it
					got = append(got, want{o, res, thr, missed})
				}
				defer func() { testHookEnd = nil }()
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				if tc.dl > 0 {
					if tc.late {
						ctx = lateContext{ctx, time.Now().Add(tc.dl)}
					} else {
						ctx, cancel = context.WithTimeout(ctx, tc.dl)
						defer cancel()
					}
				}
				_ = r.Call(ctx, d, 1, judgeClassify, func(ctx context.Context) error { return tc.call(ctx, cancel) })
				if len(got) != 1 || got[0] != tc.want {
					t.Fatalf("judges got %+v, want once %+v", got, tc.want)
				}
			})
		})
	}
}

func waitDone(ctx context.Context, _ context.CancelFunc) error {
	<-ctx.Done()
	return ctx.Err()
}

// sleepThen returns a call that returns err after d, whatever its context says.
func sleepThen(d time.Duration, err error) func(context.Context, context.CancelFunc) error {
	return func(context.Context, context.CancelFunc) error {
		time.Sleep(d)
		return err
	}
}
