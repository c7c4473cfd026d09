package outbox

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/option"
	"github.com/brokerguard/brokerguard/transport"
)

// ErrLeaseExpired is returned by ProcessPending when the batch's lease ended before
// every destination of the batch was dispatched. The rows not yet dispatched were left
// alone (another dispatcher may hold them now); the lease is too short for the
// publisher's latency.
var ErrLeaseExpired = errors.New("outbox: batch lease ended before the batch was dispatched")

// Circuits hands out the circuit of a destination; *registry.Registry is one. A
// Circuits that also hands out destinations' admission control, as the registry does,
// lets the Processor pace its bulk work (pace.go).
type Circuits interface {
	Circuit(d transport.Destination) (breaker.Circuit, error)
}

// Hooks is told what each batch did, once per destination per batch, after the
// destination's rows were written back. Package telemetry satisfies it.
type Hooks interface {
	RecordDispatch(d transport.Destination, published, deferred, failed, dead int)
}

// Counts says what a batch did with rows, counting only rows a write-back changed:
// published them, deferred them (gave them back uncharged because their destination
// was unavailable, and held it), failed them for a retry after a backoff, or made
// them dead.
type Counts struct {
	Published, Deferred, Failed, Dead int
}

func (c *Counts) add(o Counts) {
	c.Published += o.Published
	c.Deferred += o.Deferred
	c.Failed += o.Failed
	c.Dead += o.Dead
}

// Report is the result of one ProcessPending: how many rows were claimed and what
// became of them, per destination.
type Report struct {
	Claimed       int
	ByDestination map[transport.Destination]Counts
	// Pause, when the claim published nothing because the destinations' adaptive
	// limits paced it, is how long Run waits before claiming again (pace.go).
	Pause time.Duration
	wake  <-chan struct{} // closed when the pause may end early (pace.go)
}

// Total adds up the counts of every destination.
func (r Report) Total() Counts {
	var t Counts
	for _, c := range r.ByDestination {
		t.add(c)
	}
	return t
}

// Processor dispatches outbox rows: it claims a batch, groups it by destination,
// holds destinations whose circuit is open (their rows are given back uncharged and
// not claimed again until the hold ends) and publishes the others through the
// guarded publisher. ProcessPending may be called from several goroutines at once,
// also while Run runs: every claim has its own token, and a write-back changes only
// rows its claim still holds. To share a table, run several Processors (or
// processes); WithOwner names them in the tokens.
type Processor struct {
	store    Store
	circuits Circuits
	pub      transport.Publisher
	clock    breaker.Clock
	random   func() float64
	hooks    Hooks
	onError  func(error)
	owner    string
	idHeader string
	waker    Waker
	sessions Sessions // the store's, when it has them (session.go)
	// retention, when set, is applied by Run; nextPurge is when Run deletes next
	// (used by Run's goroutine only).
	retention *Retention
	nextPurge time.Time
	classify  transport.Classifier
	nonce     string        // tells this Processor's claim tokens from an earlier one's with the same owner
	claims    atomic.Uint64 // numbers the claim tokens

	batchSize      int
	batchBytes     int
	probeBatch     int
	maxAttempts    int
	lease          time.Duration
	poll           time.Duration
	maxDeferral    time.Duration
	deferralJitter time.Duration
	rejectedDelay  time.Duration
	backoff        Backoff
	storeTimeout   time.Duration // see WithStoreTimeout; 0 until NewProcessor derives it
	errorBackoff   Backoff       // Run's wait after failed batches

	// Unusable destinations (unusable.go).
	unusableBackoff Backoff
	unusable        unusableHolds
	idPrefix        string
}

// NewProcessor returns a Processor that claims rows from store and publishes them
// with pub, which should be guarded by the same circuits (registry.Guard, or an
// adapter's guarded publisher): the Processor looks at a destination's circuit before
// publishing to it and treats a rejection by pub as a deferral. A nil circuits
// consults no circuit.
func NewProcessor(store Store, circuits Circuits, pub transport.Publisher, opts ...ProcessorOption) (*Processor, error) {
	if err := option.NoNil[Processor]("outbox: NewProcessor", opts); err != nil {
		return nil, err
	}
	if store == nil || pub == nil {
		return nil, errors.New("outbox: NewProcessor needs a store and a publisher")
	}
	p := &Processor{
		store: store, circuits: circuits, pub: pub,
		random:         rand.Float64,
		batchSize:      DefaultBatchSize,
		batchBytes:     DefaultBatchBytes,
		probeBatch:     1,
		maxAttempts:    DefaultMaxAttempts,
		lease:          DefaultLease,
		poll:           DefaultPollInterval,
		maxDeferral:    DefaultMaxCircuitDeferral,
		deferralJitter: DefaultDeferralJitter,
		rejectedDelay:  DefaultRejectedDelay,
		backoff:        DefaultBackoff,
		errorBackoff:   DefaultErrorBackoff,
		onError:        logError,

		unusableBackoff: DefaultUnusableBackoff,
	}
	for _, o := range opts {
		if err := o(p); err != nil {
			return nil, err
		}
	}
	if err := p.resolveClassifier(); err != nil {
		return nil, err
	}
	if p.owner == "" {
		host, _ := os.Hostname()
		p.owner = host + "-" + strconv.Itoa(os.Getpid())
	}
	if _, ok := store.(Purger); p.retention != nil && !ok {
		return nil, fmt.Errorf("outbox: WithRetention: the store (%T) cannot delete rows: it is no Purger", store)
	}
	p.nonce = randomHex()
	p.bindStore()
	return p, nil
}

func randomHex() string {
	var b [6]byte
	_, _ = crand.Read(b[:]) // crypto/rand.Read does not fail
	return hex.EncodeToString(b[:])
}

// Owner returns the name this Processor's claim tokens start with.
func (p *Processor) Owner() string { return p.owner }

// newToken names one claim: every write-back of the claim is fenced by it, so no two
// calls, of this Processor or another, can change each other's rows.
func (p *Processor) newToken() string {
	return p.owner + "/" + p.nonce + "/" + strconv.FormatUint(p.claims.Add(1), 10)
}

func (p *Processor) now() time.Time {
	if p.clock != nil {
		return p.clock.Now()
	}
	return time.Now()
}

// ProcessPending claims one batch and dispatches it, destination by destination, each
// destination's rows in one Publish call. Rows are written back as soon as their
// destination is done, so an error or a cancelled ctx part way leaves only the rest of
// the batch leased (they come back when the lease ends). The Report counts rows the
// write-backs changed. Calls may run at once: each claim has its own token.
func (p *Processor) ProcessPending(ctx context.Context) (Report, error) {
	rep, _, err := p.process(ctx)
	return rep, err
}

// process is ProcessPending; it also returns the claim's token.
func (p *Processor) process(ctx context.Context) (Report, string, error) {
	token := p.newToken()
	start := p.now()
	recs, err := p.store.Claim(ctx, ClaimRequest{Token: token, Now: start, Limit: p.batchSize, Lease: p.lease, ProbeLimit: p.probeBatch, MaxBytes: p.batchBytes})
	if err != nil {
		return Report{}, token, err
	}
	rep := Report{Claimed: len(recs), ByDestination: map[transport.Destination]Counts{}}
	leaseEnd := start.Add(p.lease)
	var pc pacing
	for _, g := range groupByDestination(recs) {
		if err := ctx.Err(); err != nil {
			return rep, token, err
		}
		if !p.now().Before(leaseEnd) {
			return rep, token, ErrLeaseExpired
		}
		c, err := p.dispatch(ctx, claim{token, leaseEnd}, g.dest, g.recs, &pc)
		if c != (Counts{}) || err == nil {
			cur := rep.ByDestination[g.dest]
			cur.add(c)
			rep.ByDestination[g.dest] = cur
			if p.hooks != nil {
				p.hooks.RecordDispatch(g.dest, c.Published, c.Deferred, c.Failed, c.Dead)
			}
		}
		if err != nil {
			return rep, token, err
		}
	}
	if pc.pause > 0 && rep.Total().Published == 0 {
		rep.Pause, rep.wake = pc.pause, pc.wake
	}
	return rep, token, p.releasePaced(ctx, &pc, token)
}

type group struct {
	dest transport.Destination
	recs []Record
}

// groupByDestination keeps the claim order: destinations in the order of their first
// row, rows in claim order within a destination.
func groupByDestination(recs []Record) []group {
	var groups []group
	index := map[transport.Destination]int{}
	for _, r := range recs {
		i, ok := index[r.Destination]
		if !ok {
			i = len(groups)
			index[r.Destination] = i
			groups = append(groups, group{dest: r.Destination})
		}
		groups[i].recs = append(groups[i].recs, r)
	}
	return groups
}
