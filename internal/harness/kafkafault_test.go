package harness

import (
	"context"
	"errors"
	"testing"

	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
)

// TestProduceFaultShare: over many produce requests the fault fails the share set
// with its code, and counts every request and every failure as the client saw them.
func TestProduceFaultShare(t *testing.T) {
	for _, share := range []float64{0, 0.3, 1} {
		c := KFake(t, kfake.SeedTopics(1, "t"))
		f := NewProduceFault(c, kerr.NotEnoughReplicas)
		f.SetFailShare(share)
		// One message a request and no retry: each WriteMessages is one produce request.
		w := &kafkago.Writer{Addr: kafkago.TCP(c.ListenAddrs()...), Topic: "t", BatchSize: 1, MaxAttempts: 1,
			RequiredAcks: kafkago.RequireAll}
		var faults int64
		for i := range shareRequests(share) {
			err := w.WriteMessages(context.Background(), kafkago.Message{Value: []byte("m")})
			var we kafkago.WriteErrors
			switch {
			case err == nil:
			case errors.As(err, &we) && len(we) == 1 && errors.Is(we[0], kafkago.NotEnoughReplicas):
				faults++
			default:
				t.Fatalf("share %.2f: write %d: %v", share, i, err)
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		received, failed := f.Counts()
		if failed != faults {
			t.Errorf("share %.2f: the fault counted %d failed, the client saw %d", share, failed, faults)
		}
		checkShare(t, share, received, failed)
	}
}
