package memory_test

import (
	"testing"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/outbox/memory"
	"github.com/brokerguard/brokerguard/outbox/storetest"
)

func TestMemoryStoreConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T, clock breaker.Clock) storetest.Store {
		s := memory.New(clock)
		return storetest.Store{Store: s, Enqueue: s.Enqueue}
	})
}
