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
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/transport"
)

// Defaults of the Processor's options.
const (
	DefaultBatchSize          = 100
	DefaultLease              = 30 * time.Second
	DefaultPollInterval       = time.Second
	DefaultMaxAttempts        = 10
	DefaultMaxCircuitDeferral = 24 * time.Hour
	DefaultDeferralJitter     = time.Second
	DefaultRejectedDelay      = time.Second
)

// maxErrorLen bounds the last_error a row keeps.
const maxErrorLen = 1024

// ErrLeaseExpired is returned by ProcessPending when the batch's lease ended before
// every destination of the batch was dispatched. The rows not yet dispatched were left
// alone (another dispatcher may hold them now); the lease is too short for the
// publisher's latency.
var ErrLeaseExpired = errors.New("outbox: batch lease ended before the batch was dispatched")

// Circuits hands out the circuit of a destination; *registry.Registry is one.
type Circuits interface {
	Circuit(d transport.Destination) (breaker.Circuit, error)
}

// Hooks is told what each batch did, once per destination per batch, after the
// destination's rows were written back. Package telemetry satisfies it.
type Hooks interface {
	RecordDispatch(d transport.Destination, published, deferred, failed, dead int)
}

// Counts says what a batch did with rows: published them, deferred them because the
// circuit was open (no attempt consumed), failed them for a retry after a backoff, or
// made them dead.
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
}

// Total adds up the counts of every destination.
func (r Report) Total() Counts {
	var t Counts
	for _, c := range r.ByDestination {
		t.add(c)
	}
	return t
}

// ProcessorOption configures a Processor.
type ProcessorOption func(*Processor) error

// WithHooks has h told what every batch did, per destination.
func WithHooks(h Hooks) ProcessorOption {
	return func(p *Processor) error { p.hooks = h; return nil }
}

// WithClock makes the Processor take every time decision from c: claims, leases,
// backoff, deferrals. Give the registry's circuits the same clock.
func WithClock(c breaker.Clock) ProcessorOption {
	return func(p *Processor) error {
		if c == nil {
			return errors.New("outbox: WithClock(nil)")
		}
		p.clock = c
		return nil
	}
}

// WithRandom sets the source of jitter: f returns a number in [0, 1). The default is
// math/rand/v2.Float64.
func WithRandom(f func() float64) ProcessorOption {
	return func(p *Processor) error {
		if f == nil {
			return errors.New("outbox: WithRandom(nil)")
		}
		p.random = f
		return nil
	}
}

// WithOwner names the Processor in the leases it takes. It must differ between
// dispatchers sharing a table; the default is host name, process id and a random part.
func WithOwner(owner string) ProcessorOption {
	return func(p *Processor) error {
		if owner == "" {
			return errors.New("outbox: WithOwner: empty owner")
		}
		p.owner = owner
		return nil
	}
}

// WithBatchSize sets how many rows one ProcessPending claims (default 100).
func WithBatchSize(n int) ProcessorOption {
	return positive("WithBatchSize", n, func(p *Processor) { p.batchSize = n })
}

// WithMaxAttempts sets the failed publishes after which a row is dead (default 10).
func WithMaxAttempts(n int) ProcessorOption {
	return positive("WithMaxAttempts", n, func(p *Processor) { p.maxAttempts = n })
}

// WithLease sets how long a claimed batch belongs to this Processor (default 30s). It
// must exceed the time a batch takes to publish: a row whose lease ends may be claimed
// and published by another dispatcher, and this one stops before publishing rows whose
// lease has ended.
func WithLease(d time.Duration) ProcessorOption {
	return positive("WithLease", d, func(p *Processor) { p.lease = d })
}

// WithPollInterval sets how long Run waits after a batch that was not full (default 1s).
func WithPollInterval(d time.Duration) ProcessorOption {
	return positive("WithPollInterval", d, func(p *Processor) { p.poll = d })
}

// WithMaxCircuitDeferral sets how long after its first deferral a row may still be
// deferred; a row deferred later than that is dead with ReasonDeferralExhausted
// (default 24h).
func WithMaxCircuitDeferral(d time.Duration) ProcessorOption {
	return positive("WithMaxCircuitDeferral", d, func(p *Processor) { p.maxDeferral = d })
}

// WithDeferralJitter sets the most a deferral adds at random to the circuit's
// NotBefore, so that dispatchers do not all come back at the same instant (default
// 1s; 0 adds nothing). One jitter is drawn per destination per batch.
func WithDeferralJitter(d time.Duration) ProcessorOption {
	return func(p *Processor) error {
		if d < 0 {
			return fmt.Errorf("outbox: WithDeferralJitter(%v): negative", d)
		}
		p.deferralJitter = d
		return nil
	}
}

// WithRejectedDelay sets how long rows wait when the circuit refused the publish
// without an open deadline: breaker.ErrSaturated (too many calls in flight),
// breaker.ErrUnavailable (a shared circuit's state cannot be read) or a circuit that
// could not be created. Such rows are deferred, consuming no attempt (default 1s).
func WithRejectedDelay(d time.Duration) ProcessorOption {
	return positive("WithRejectedDelay", d, func(p *Processor) { p.rejectedDelay = d })
}

// WithBackoff sets the spacing of retries after failed publishes (default
// DefaultBackoff).
func WithBackoff(b Backoff) ProcessorOption {
	return func(p *Processor) error {
		if err := b.Validate(); err != nil {
			return err
		}
		p.backoff = b
		return nil
	}
}

// WithIDHeader adds to every published message a header with this key and the row's
// id in decimal, so that consumers can drop the duplicates at-least-once delivery
// allows.
func WithIDHeader(key string) ProcessorOption {
	return func(p *Processor) error {
		if key == "" {
			return errors.New("outbox: WithIDHeader: empty key")
		}
		p.idHeader = key
		return nil
	}
}

// WithErrorHandler has Run pass errors of a batch to f and carry on after the poll
// interval. Without it Run returns the first error.
func WithErrorHandler(f func(error)) ProcessorOption {
	return func(p *Processor) error { p.onError = f; return nil }
}

func positive[T int | time.Duration](name string, v T, set func(*Processor)) ProcessorOption {
	return func(p *Processor) error {
		if v <= 0 {
			return fmt.Errorf("outbox: %s(%v): must be positive", name, v)
		}
		set(p)
		return nil
	}
}

// Processor dispatches outbox rows: it claims a batch, groups it by destination,
// defers the rows of destinations whose circuit is open (consuming no attempt) and
// publishes the others through the guarded publisher. ProcessPending may be called
// from several goroutines at once, but nothing else may use the Processor while Run
// runs: when Run returns it releases every row leased under the Processor's owner,
// which would hand rows another call is still publishing to other dispatchers within
// their lease. To share a table, run several Processors (or processes), each with its
// own owner.
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
	// retention, when set, is applied by Run; nextPurge is when Run deletes next
	// (used by Run's goroutine only).
	retention *Retention
	nextPurge time.Time

	batchSize      int
	maxAttempts    int
	lease          time.Duration
	poll           time.Duration
	maxDeferral    time.Duration
	deferralJitter time.Duration
	rejectedDelay  time.Duration
	backoff        Backoff
}

// NewProcessor returns a Processor that claims rows from store and publishes them
// with pub, which should be guarded by the same circuits (registry.Guard, or an
// adapter's guarded publisher): the Processor looks at a destination's circuit before
// publishing to it and treats a rejection by pub as a deferral. A nil circuits
// consults no circuit.
func NewProcessor(store Store, circuits Circuits, pub transport.Publisher, opts ...ProcessorOption) (*Processor, error) {
	if store == nil || pub == nil {
		return nil, errors.New("outbox: NewProcessor needs a store and a publisher")
	}
	p := &Processor{
		store: store, circuits: circuits, pub: pub,
		random:         rand.Float64,
		batchSize:      DefaultBatchSize,
		maxAttempts:    DefaultMaxAttempts,
		lease:          DefaultLease,
		poll:           DefaultPollInterval,
		maxDeferral:    DefaultMaxCircuitDeferral,
		deferralJitter: DefaultDeferralJitter,
		rejectedDelay:  DefaultRejectedDelay,
		backoff:        DefaultBackoff,
	}
	for _, o := range opts {
		if err := o(p); err != nil {
			return nil, err
		}
	}
	if p.owner == "" {
		p.owner = defaultOwner()
	}
	if _, ok := store.(Purger); p.retention != nil && !ok {
		return nil, fmt.Errorf("outbox: WithRetention: the store (%T) cannot delete rows: it is no Purger", store)
	}
	return p, nil
}

func defaultOwner() string {
	host, _ := os.Hostname()
	var b [6]byte
	_, _ = crand.Read(b[:]) // crypto/rand.Read does not fail
	return host + "-" + strconv.Itoa(os.Getpid()) + "-" + hex.EncodeToString(b[:])
}

// Owner returns the name this Processor leases rows under.
func (p *Processor) Owner() string { return p.owner }

func (p *Processor) now() time.Time {
	if p.clock != nil {
		return p.clock.Now()
	}
	return time.Now()
}

// ProcessPending claims one batch and dispatches it, destination by destination, each
// destination's rows in one Publish call. Rows are written back as soon as their
// destination is done, so an error or a cancelled ctx part way leaves only the rest of
// the batch leased (they come back when the lease ends, or at once after Release).
// The Report counts what was written back.
func (p *Processor) ProcessPending(ctx context.Context) (Report, error) {
	start := p.now()
	recs, err := p.store.Claim(ctx, p.owner, start, p.batchSize, p.lease)
	if err != nil {
		return Report{}, err
	}
	rep := Report{Claimed: len(recs), ByDestination: map[transport.Destination]Counts{}}
	leaseEnd := start.Add(p.lease)
	for _, g := range groupByDestination(recs) {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		if !p.now().Before(leaseEnd) {
			return rep, ErrLeaseExpired
		}
		c, err := p.dispatch(ctx, g.dest, g.recs)
		if c != (Counts{}) || err == nil {
			cur := rep.ByDestination[g.dest]
			cur.add(c)
			rep.ByDestination[g.dest] = cur
			if p.hooks != nil {
				p.hooks.RecordDispatch(g.dest, c.Published, c.Deferred, c.Failed, c.Dead)
			}
		}
		if err != nil {
			return rep, err
		}
	}
	return rep, nil
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

// circuitGate is the one place the Processor asks a destination's circuit whether to
// publish before it tries. It returns defer=true and the circuit's NotBefore when the
// circuit is open with a deadline still ahead. It only looks (Snapshot): the guarded
// publisher acquires the permit, so a half-open circuit's probe is taken by a real
// publish.
func (p *Processor) circuitGate(d transport.Destination, now time.Time) (notBefore time.Time, deferred bool, err error) {
	if p.circuits == nil {
		return time.Time{}, false, nil
	}
	c, err := p.circuits.Circuit(d)
	if err != nil {
		return time.Time{}, false, err
	}
	s := c.Snapshot()
	// Shadow and FailOpen circuits let calls through while open (breaker.Mode), so
	// their rows are published, not deferred.
	if s.State == breaker.Open && s.Mode == breaker.Enforce && s.NotBefore.After(now) {
		return s.NotBefore, true, nil
	}
	return time.Time{}, false, nil
}

// dispatch handles the rows of one destination and writes them back.
func (p *Processor) dispatch(ctx context.Context, d transport.Destination, recs []Record) (Counts, error) {
	now := p.now()
	notBefore, deferred, err := p.circuitGate(d, now)
	switch {
	case errors.Is(err, transport.ErrInvalidDestination):
		return p.fail(ctx, recs, now, err, true)
	case err != nil: // the registry could not give a circuit (cap reached, shared backend down)
		return p.deferRows(ctx, recs, now, now.Add(p.rejectedDelay))
	case deferred:
		return p.deferRows(ctx, recs, now, notBefore)
	}

	msgs := make([]transport.Message, len(recs))
	for i, r := range recs {
		msgs[i] = r.Message
		if p.idHeader != "" {
			h := make([]transport.Header, len(r.Message.Headers), len(r.Message.Headers)+1)
			copy(h, r.Message.Headers)
			msgs[i].Headers = append(h, transport.Header{Key: p.idHeader, Value: strconv.AppendInt(nil, r.ID, 10)})
		}
	}
	pubErr := p.pub.Publish(ctx, d, msgs...)
	var (
		be *transport.BatchError
		oe *breaker.OpenError
	)
	partial := errors.As(pubErr, &be) && validIndexes(be, len(recs))
	cancelled := pubErr != nil && ctx.Err() != nil
	if cancelled && !partial {
		// The publish may or may not have reached the broker; leave the rows leased so
		// that they are published again (at least once) rather than counted as failed.
		return Counts{}, ctx.Err()
	}
	// What was published must be recorded even if ctx ends now, or it is sent again.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.lease)
	defer cancel()
	now = p.now()

	switch {
	case pubErr == nil:
		return p.publish(wctx, recs, now)
	case partial:
		failed := map[int]error{}
		for _, f := range be.Failed {
			failed[f.Index] = f.Err
		}
		var ok, bad []Record
		var errs []error
		for i, r := range recs {
			if e, isFailed := failed[i]; isFailed {
				bad, errs = append(bad, r), append(errs, e)
			} else {
				ok = append(ok, r)
			}
		}
		c, err := p.publish(wctx, ok, now)
		if err != nil {
			return c, err
		}
		if cancelled {
			// The rest may have failed only because ctx ended: leave them leased, as
			// above, rather than consume an attempt.
			return c, ctx.Err()
		}
		c2, err := p.failEach(wctx, bad, now, errs)
		c.add(c2)
		return c, err
	case errors.As(pubErr, &oe):
		return p.deferRows(wctx, recs, now, oe.NotBefore)
	case errors.Is(pubErr, breaker.ErrSaturated), errors.Is(pubErr, breaker.ErrUnavailable):
		return p.deferRows(wctx, recs, now, now.Add(p.rejectedDelay))
	default:
		return p.fail(wctx, recs, now, pubErr, false)
	}
}

// validIndexes reports whether a BatchError lists only indexes of the publish; an
// adapter that got them wrong cannot be trusted with which messages went out.
func validIndexes(be *transport.BatchError, n int) bool {
	for _, f := range be.Failed {
		if f.Index < 0 || f.Index >= n {
			return false
		}
	}
	return len(be.Failed) > 0
}

func ids(recs []Record) []int64 {
	out := make([]int64, len(recs))
	for i, r := range recs {
		out[i] = r.ID
	}
	return out
}

func (p *Processor) publish(ctx context.Context, recs []Record, now time.Time) (Counts, error) {
	if len(recs) == 0 {
		return Counts{}, nil
	}
	if err := p.store.MarkPublished(ctx, p.owner, now, ids(recs)); err != nil {
		return Counts{}, err
	}
	return Counts{Published: len(recs)}, nil
}

func (p *Processor) deferRows(ctx context.Context, recs []Record, now, notBefore time.Time) (Counts, error) {
	deferred, dead, err := p.store.Defer(ctx, Deferral{
		Owner:       p.owner,
		IDs:         ids(recs),
		Now:         now,
		NotBefore:   notBefore,
		Jitter:      time.Duration(p.random() * float64(p.deferralJitter)),
		MaxDeferral: p.maxDeferral,
	})
	return Counts{Deferred: deferred, Dead: dead}, err
}

// fail records the same error for every row; dead makes them dead at once.
func (p *Processor) fail(ctx context.Context, recs []Record, now time.Time, cause error, dead bool) (Counts, error) {
	errs := make([]error, len(recs))
	for i := range errs {
		errs[i] = cause
	}
	if dead {
		return p.failWith(ctx, recs, now, errs, func(Record) bool { return true })
	}
	return p.failEach(ctx, recs, now, errs)
}

// failEach records errs[i] against recs[i]: one more attempt, and a retry after the
// backoff, or death once MaxAttempts failures have been made.
func (p *Processor) failEach(ctx context.Context, recs []Record, now time.Time, errs []error) (Counts, error) {
	return p.failWith(ctx, recs, now, errs, func(r Record) bool { return r.Attempts+1 >= p.maxAttempts })
}

func (p *Processor) failWith(ctx context.Context, recs []Record, now time.Time, errs []error, dead func(Record) bool) (Counts, error) {
	if len(recs) == 0 {
		return Counts{}, nil
	}
	var c Counts
	fs := make([]Failure, len(recs))
	for i, r := range recs {
		f := Failure{ID: r.ID, RetryAt: now, Dead: dead(r), Err: truncate(errs[i].Error())}
		if f.Dead {
			c.Dead++
		} else {
			c.Failed++
			f.RetryAt = now.Add(p.backoff.Delay(r.Attempts+1, p.random()))
		}
		fs[i] = f
	}
	if err := p.store.Fail(ctx, p.owner, fs); err != nil {
		return Counts{}, err
	}
	return c, nil
}

func truncate(s string) string {
	if len(s) <= maxErrorLen {
		return s
	}
	return s[:maxErrorLen]
}

// Run dispatches batches until ctx ends. After a batch that claimed rows it claims
// again at once; only when nothing was due does it wait, for the poll interval or, with
// WithWaker, until the Waker signals, whichever comes first. With WithRetention it
// also deletes old settled rows, one bounded batch between claims. It runs in the
// caller's goroutine and starts none but the Waker's. When ctx ends it releases the
// rows it still leases, so a stopped Run leaves no row leased, and returns nil (or the
// release's error). An error of a batch goes to the WithErrorHandler function, if
// any, and Run carries on after the poll interval; without one Run releases its rows
// and returns the error.
func (p *Processor) Run(ctx context.Context) (err error) {
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.lease)
		defer cancel()
		if rerr := p.store.Release(rctx, p.owner); rerr != nil {
			err = errors.Join(err, rerr)
		}
	}()
	w := p.startWaker(ctx)
	defer w.stop()
	timer := time.NewTimer(p.poll)
	defer timer.Stop()
	for {
		drain(w.wake) // this claim sees every row announced so far
		rep, err := p.ProcessPending(ctx)
		var more bool
		if err == nil && ctx.Err() == nil {
			more, err = p.retain(ctx, p.now())
		}
		if ctx.Err() != nil {
			return nil
		}
		idle := true
		if err != nil {
			if p.onError == nil {
				return err
			}
			p.onError(err)
		} else if rep.Claimed > 0 || more {
			continue
		}
		timer.Reset(p.poll)
		for idle {
			select {
			case <-ctx.Done():
				return nil
			case <-timer.C:
				idle = false
			case <-w.wake:
				// After an error, wait for the poll interval: a signal must not turn a
				// failing store into a busy loop.
				idle = err != nil
			case lerr := <-w.failed:
				if p.onError != nil {
					p.onError(lerr)
				}
			}
		}
	}
}
