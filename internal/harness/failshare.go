package harness

import (
	"math"
	"math/rand/v2"
	"sync/atomic"
)

// failShare is the share of requests a fault layer fails, drawn independently for
// each request, as a broker in a brownout fails some requests whatever came before.
// The zero value fails nothing.
type failShare struct{ bits atomic.Uint64 } // math.Float64bits of the share

// set makes share (clamped to [0, 1]) of the requests from now on fail.
func (f *failShare) set(share float64) {
	f.bits.Store(math.Float64bits(min(max(share, 0), 1)))
}

// get returns the share in force.
func (f *failShare) get() float64 { return math.Float64frombits(f.bits.Load()) }

// draw reports whether the next request fails.
func (f *failShare) draw() bool {
	s := f.get()
	return s > 0 && rand.Float64() < s
}
