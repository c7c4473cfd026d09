package storekit_test

import (
	"slices"
	"testing"

	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/storekit"
	"github.com/brokerguard/brokerguard/transport"
)

// A header key is stored as text: ValidateEntry refuses a key that is not valid
// UTF-8 or holds a NUL anywhere, its first byte included, and accepts other text.
func TestHeaderKeyMustBeTextWithoutNUL(t *testing.T) {
	refused := []string{"\x00", "\x00key", "bad\x00key", "key\x00", "\xffkey"}
	for _, key := range append(refused, "key", "κλειδί") {
		e := outbox.Entry{Destination: transport.Destination{Broker: "kafka", Name: "orders"}, Message: transport.Message{Headers: []transport.Header{{Key: "first"}, {Key: key}}}}
		err := storekit.ValidateEntry(e, 0)
		if want := slices.Contains(refused, key); (err != nil) != want {
			t.Errorf("ValidateEntry of header key %q = %v, want refused %v", key, err, want)
		}
	}
}
