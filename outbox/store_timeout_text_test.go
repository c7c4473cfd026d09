package outbox_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/brokerguard/brokerguard/outbox"

	"github.com/brokerguard/brokerguard/outbox/memory"
)

// obClaimStore answers Claim with claim's result.
type obClaimStore struct {
	*memory.Store
	claim func(ctx context.Context) error
}

func (s obClaimStore) Claim(ctx context.Context, _ outbox.ClaimRequest) ([]outbox.Record, error) {
	return nil, s.claim(ctx)
}

// A store call that ran out of WithStoreTimeout says so ("no answer within" the
// timeout) and matches context.DeadlineExceeded, whether the store returned the
// context's error or one of its own; a store's own error within the timeout is
// passed on as it is, not dressed as a timeout. Either way the text is one line that
// names each cause once, as the default log and the error handler show it.
func TestStoreErrorSaysWhetherTheStoreDidNotAnswer(t *testing.T) {
	for _, c := range []struct {
		name     string
		claim    func(ctx context.Context) error
		noAnswer bool
	}{
		{"returned the context's error", func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }, true},
		{"returned its own error late", func(ctx context.Context) error { <-ctx.Done(); return errStore }, true},
		{"returned its own error in time", func(context.Context) error { return errStore }, false},
	} {
		synctest.Test(t, func(t *testing.T) {
			store := obClaimStore{memory.New(nil), c.claim}
			proc, err := outbox.NewProcessor(store, nil, &fakePublisher{}, outbox.WithClassifier(outageOnError),
				outbox.WithStoreTimeout(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			_, err = proc.ProcessPending(context.Background())
			var se *outbox.StoreError
			if !errors.As(err, &se) {
				t.Fatalf("%s: ProcessPending = %v, want a *StoreError", c.name, err)
			}
			said := strings.Contains(err.Error(), "no answer within 1s")
			if said != c.noAnswer || errors.Is(err, context.DeadlineExceeded) != c.noAnswer {
				t.Errorf("%s: %q (matches DeadlineExceeded: %v); want a timeout: %v", c.name, err, errors.Is(err, context.DeadlineExceeded), c.noAnswer)
			}
			text := err.Error()
			if strings.Contains(text, "\n") || strings.Count(text, errStore.Error()) > 1 || strings.Count(text, context.DeadlineExceeded.Error()) > 1 {
				t.Errorf("%s: %q repeats a cause or spans lines", c.name, text)
			}
		})
	}
}
