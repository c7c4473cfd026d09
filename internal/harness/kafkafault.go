package harness

import (
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// produceFault fails a share of the produce requests a kfake cluster receives with a
// broker error code, through kfake's faults, and counts the produce requests that
// reached the cluster, as a broker in a brownout fails some writes (NOT_ENOUGH_REPLICAS
// while its followers lag, say) and takes the rest.
//
// The share is drawn once per request: a failed request to several partitions fails
// for all of them.
type produceFault struct {
	share    failShare
	mu       sync.Mutex         // guards the two fields below
	last     kmsg.Request       // the request drawn for last
	lastFail bool               // its draw
	observed *kfake.FaultHandle // counts every produce request
	failing  *kfake.FaultHandle // answers the failed ones
}

// NewProduceFault installs the fault on c, failing no request until SetFailShare and
// failing with code after it. A code that kfake answers after applying the write
// (REQUEST_TIMED_OUT, NOT_ENOUGH_REPLICAS_AFTER_APPEND) stores the records anyway, as
// a broker does.
func NewProduceFault(c *kfake.Cluster, code *kerr.Error) *produceFault {
	f := &produceFault{}
	produce := []kmsg.Key{kmsg.Produce}
	// Faults are checked in the order added: the observer first, so that it counts
	// the requests the failing fault answers too.
	f.observed = c.Fault(kfake.Fault{Keys: produce, Count: -1, Observe: true})
	f.failing = c.Fault(kfake.Fault{Keys: produce, Count: -1, Err: code, When: f.fails})
	return f
}

// fails draws whether req fails, once per request: kfake may ask more than once.
func (f *produceFault) fails(req kmsg.Request) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if req != f.last {
		f.last, f.lastFail = req, f.share.draw()
	}
	return f.lastFail
}

// SetFailShare makes share (0 to 1) of the produce requests from now on fail, each
// drawn at random; 0 fails none.
func (f *produceFault) SetFailShare(share float64) { f.share.set(share) }

// Counts returns the produce requests the cluster received so far and how many of
// them the fault failed.
func (f *produceFault) Counts() (received, failed int64) {
	return int64(f.observed.Hits()), int64(f.failing.Hits())
}
