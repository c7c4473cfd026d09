package outbox_test

import (
	"testing"

	"github.com/brokerguard/brokerguard/outbox"
)

// NewProcessor refuses a nil store and a nil publisher each on its own, whatever
// else it is given.
func TestNewProcessorNeedsAStoreAndAPublisher(t *testing.T) {
	store := outbox.NewMemoryStore(nil)
	if _, err := outbox.NewProcessor(store, nil, nil, outbox.WithClassifier(outageOnError)); err == nil {
		t.Error("NewProcessor accepted a nil publisher")
	}
	if _, err := outbox.NewProcessor(nil, nil, &fakePublisher{}, outbox.WithClassifier(outageOnError)); err == nil {
		t.Error("NewProcessor accepted a nil store")
	}
}
