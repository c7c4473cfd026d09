package outbox_test

import (
	"testing"

	"github.com/brokerguard/brokerguard/outbox"

	"github.com/brokerguard/brokerguard/outbox/memory"
)

// NewProcessor refuses a nil store and a nil publisher each on its own, whatever
// else it is given.
func TestNewProcessorNeedsAStoreAndAPublisher(t *testing.T) {
	store := memory.New(nil)
	if _, err := outbox.NewProcessor(store, nil, nil, outbox.WithClassifier(outageOnError)); err == nil {
		t.Error("NewProcessor accepted a nil publisher")
	}
	if _, err := outbox.NewProcessor(nil, nil, &fakePublisher{}, outbox.WithClassifier(outageOnError)); err == nil {
		t.Error("NewProcessor accepted a nil store")
	}
}
