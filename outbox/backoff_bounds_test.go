package outbox_test

import (
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/outbox"
)

// Validate accepts each field at its bound and refuses it just past.
func TestBackoffValidateBounds(t *testing.T) {
	ok := outbox.Backoff{Initial: time.Second, Max: time.Second, Multiplier: 1, Jitter: 1}
	if err := ok.Validate(); err != nil {
		t.Fatalf("Initial = Max, Multiplier 1, Jitter 1: %v", err)
	}
	for name, b := range map[string]outbox.Backoff{
		"Initial 0":         {Initial: 0, Max: time.Second, Multiplier: 1},
		"Max below Initial": {Initial: time.Second, Max: time.Second - 1, Multiplier: 1},
		"Multiplier < 1":    {Initial: time.Second, Max: time.Second, Multiplier: 0.99},
		"Jitter > 1":        {Initial: time.Second, Max: time.Second, Multiplier: 1, Jitter: 1.01},
	} {
		if b.Validate() == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
