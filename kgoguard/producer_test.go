package kgoguard_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/kgoguard"
	"github.com/brokerguard/brokerguard/registry"
)

// TestNewRequiresThePartitioner: New refuses a client without kgoguard's partitioner
// for the Producer's registry (franz-go's default one, or one made for another
// registry), with an error naming the option that fixes it; with it, New accepts.
func TestNewRequiresThePartitioner(t *testing.T) {
	newReg := func() *registry.Registry {
		reg, err := registry.New(registry.Policy{Circuit: breaker.Policy{FailureThreshold: 5, BreakDuration: time.Second}})
		if err != nil {
			t.Fatal(err)
		}
		return reg
	}
	reg, other := newReg(), newReg()
	client := func(opts ...kgo.Opt) *kgo.Client { // no broker is dialled before the first request
		cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers("127.0.0.1:1")}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		return cl
	}
	for name, cl := range map[string]*kgo.Client{
		"franz-go's default":           client(),
		"franz-go's sticky key":        client(kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil))),
		"kgoguard's, another registry": client(kgo.RecordPartitioner(kgoguard.Partitioner(other, nil))),
	} {
		p, err := kgoguard.New(cl, reg)
		if p != nil || !errors.Is(err, kgoguard.ErrNoPartitioner) ||
			!strings.Contains(err.Error(), "kgo.RecordPartitioner(kgoguard.Partitioner(reg, nil))") {
			t.Errorf("%s: New = %v, %v; want ErrNoPartitioner naming the fix", name, p, err)
		}
	}
	if _, err := kgoguard.New(client(kgo.RecordPartitioner(kgoguard.Partitioner(reg, kgo.StickyKeyPartitioner(nil)))), reg); err != nil {
		t.Errorf("a client with kgoguard's partitioner around franz-go's sticky key: %v", err)
	}
}
