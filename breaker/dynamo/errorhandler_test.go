package dynamo

import (
	"errors"
	"sync"
	"testing"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
)

// WithErrorHandler is told the write Permit.Complete could not make: a failure the
// table refused to count.
func TestErrorHandlerHearsTheWritesCompleteCannotReturn(t *testing.T) {
	var mu sync.Mutex
	var heard []error
	f := newFleet(t, 1, sharedPolicy(), sharedstate.WithErrorHandler(func(err error) {
		mu.Lock()
		defer mu.Unlock()
		heard = append(heard, err)
	}))
	p := mustAcquire(t, f.r[0]) // reads the item while the table answers
	refused := errors.New("throttled")
	f.st.mu.Lock()
	f.st.refuse = refused
	f.st.mu.Unlock()
	p.Complete(breaker.Failure)
	mu.Lock()
	defer mu.Unlock()
	if len(heard) == 0 || !errors.Is(heard[0], refused) {
		t.Fatalf("error handler heard %v; want the refused write (%v)", heard, refused)
	}
}
