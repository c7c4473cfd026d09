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
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/transport"
)

// Defaults of the Processor's options.
const (
	DefaultBatchSize          = 500
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

// WithOwner names the Processor in the claim tokens it leases rows under (each token
// adds a random part and a claim number, so owners need not be unique); the default
// is host name and process id.
func WithOwner(owner string) ProcessorOption {
	return func(p *Processor) error {
		if owner == "" {
			return errors.New("outbox: WithOwner: empty owner")
		}
		p.owner = owner
		return nil
	}
}

// WithBatchSize sets how many rows one ProcessPending claims (default 500). A claim
// costs a round trip, a plan and a commit whatever its size, so bigger batches
// spread those over more rows; a batch must still publish well within the lease.
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

// WithMaxCircuitDeferral sets the time budget of an outage: once a destination has
// been held for longer than d, its rows enqueued more than d ago are dead with
// ReasonDeferralExhausted (default 24h). A row's attempts are never spent on an
// outage.
func WithMaxCircuitDeferral(d time.Duration) ProcessorOption {
	return positive("WithMaxCircuitDeferral", d, func(p *Processor) { p.maxDeferral = d })
}

// WithDeferralJitter sets the most a hold adds at random to the circuit's NotBefore,
// so that dispatchers do not all come back at the same instant (default 1s; 0 adds
// nothing). One jitter is drawn per hold.
func WithDeferralJitter(d time.Duration) ProcessorOption {
	return func(p *Processor) error {
		if d < 0 {
			return fmt.Errorf("outbox: WithDeferralJitter(%v): negative", d)
		}
		p.deferralJitter = d
		return nil
	}
}

// WithRejectedDelay sets how long a destination is held when it is unavailable
// without an open deadline to wait for: breaker.ErrSaturated (too many calls in
// flight), breaker.ErrUnavailable (a shared circuit's state cannot be read), a
// circuit that could not be created, or an outage failure while the circuit is still
// closed. Its rows consume no attempt (default 1s).
func WithRejectedDelay(d time.Duration) ProcessorOption {
	return positive("WithRejectedDelay", d, func(p *Processor) { p.rejectedDelay = d })
}

// WithProbeBatch sets how many rows of a destination whose hold has ended one claim
// takes as its probe (default 1); the destination's other rows wait until the probe
// has gone out.
func WithProbeBatch(n int) ProcessorOption {
	return positive("WithProbeBatch", n, func(p *Processor) { p.probeBatch = n })
}

// WithClassifier tells the Processor whose fault each publish error is: an outage of
// the broker (breaker.Failure) holds the destination and spends its
// MaxCircuitDeferral time; a destination that is unusable (breaker.Unusable:
// missing, forbidden, misconfigured) is held too, probed after the unusable backoff
// (WithUnusableBackoff), and spends that time as well; any other outcome
// (breaker.Rejected, breaker.Neutral) is the message's own and spends the row's
// attempts. Without it the Processor takes the publisher's classifier
// (transport.Classifying: registry.Guard's publisher and the adapters' have one),
// and NewProcessor fails with ErrNoClassifier when the publisher has none.
func WithClassifier(c transport.Classifier) ProcessorOption {
	return func(p *Processor) error { p.classify = c; return nil }
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

// WithErrorHandler has Run pass every error of a batch (and of its Waker) to f, from
// Run's goroutine, instead of logging it through log/slog's default logger. Either
// way Run carries on after a backoff (WithErrorBackoff); it never ends on an error.
func WithErrorHandler(f func(error)) ProcessorOption {
	return func(p *Processor) error {
		if f == nil {
			return errors.New("outbox: WithErrorHandler(nil)")
		}
		p.onError = f
		return nil
	}
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
	// retention, when set, is applied by Run; nextPurge is when Run deletes next
	// (used by Run's goroutine only).
	retention *Retention
	nextPurge time.Time
	classify  transport.Classifier
	nonce     string        // tells this Processor's claim tokens from an earlier one's with the same owner
	claims    atomic.Uint64 // numbers the claim tokens

	batchSize      int
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
	if store == nil || pub == nil {
		return nil, errors.New("outbox: NewProcessor needs a store and a publisher")
	}
	p := &Processor{
		store: store, circuits: circuits, pub: pub,
		random:         rand.Float64,
		batchSize:      DefaultBatchSize,
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
	recs, err := p.store.Claim(ctx, ClaimRequest{Token: token, Now: start, Limit: p.batchSize, Lease: p.lease, ProbeLimit: p.probeBatch})
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

// unavailableUntil asks d's circuit whether to publish before trying. It returns a
// non-zero time until which d should be held when the circuit is open with its
// deadline ahead, or cannot be had. It only looks (Snapshot): the guarded publisher
// acquires the permit, so a half-open circuit's probe is taken by a real publish.
func (p *Processor) unavailableUntil(d transport.Destination, now time.Time) time.Time {
	if p.circuits == nil {
		return time.Time{}
	}
	c, err := p.circuits.Circuit(d)
	if err != nil { // the registry could not give a circuit (cap reached, shared backend down)
		return now.Add(p.rejectedDelay)
	}
	s := c.Snapshot()
	// Shadow and FailOpen circuits let calls through while open (breaker.Mode), so
	// their rows are published, not held.
	if s.State == breaker.Open && s.Mode == breaker.Enforce && s.NotBefore.After(now) {
		return s.NotBefore
	}
	return time.Time{}
}

// holdUntil is how long to hold d after an outage failure: the circuit's open
// deadline when it has one ahead, else the rejected delay.
func (p *Processor) holdUntil(d transport.Destination, now time.Time, rejection error) time.Time {
	var oe *breaker.OpenError
	if errors.As(rejection, &oe) && oe.NotBefore.After(now) {
		return oe.NotBefore
	}
	if until := p.unavailableUntil(d, now); !until.IsZero() {
		return until
	}
	return now.Add(p.rejectedDelay)
}

// claim is one ProcessPending's claim: its token fences every write-back, and its
// rows are not published once its lease has ended.
type claim struct {
	token    string
	leaseEnd time.Time
}

// dispatch handles the rows of one destination, in id order, and writes them back.
func (p *Processor) dispatch(ctx context.Context, cl claim, d transport.Destination, recs []Record, pc *pacing) (Counts, error) {
	token := cl.token
	now := p.now()
	if err := d.Validate(); err != nil {
		return p.failDead(ctx, token, recs, now, ReasonInvalidDestination, err.Error())
	}
	var c Counts
	good := recs[:0:0]
	var poison []Record
	for _, r := range recs {
		if r.Undecodable != "" {
			poison = append(poison, r)
		} else {
			good = append(good, r)
		}
	}
	for _, r := range poison { // each has its own detail
		c2, err := p.failDead(ctx, token, []Record{r}, now, ReasonUndecodable, r.Undecodable)
		c.add(c2)
		if err != nil {
			return c, err
		}
	}
	probe := recs[0].Probe
	if len(good) == 0 {
		if probe { // nothing to probe with
			return c, p.reprobe(ctx, token, d, now)
		}
		return c, nil
	}
	if until := p.unavailableUntil(d, now); !until.IsZero() {
		c2, err := p.hold(ctx, token, d, good, now, until)
		c.add(c2)
		return c, err
	}
	// Partition holds (partitions.go): one partition at a time, isolated ones held alone.
	if groups, ok := p.partitionGroups(d, good, now, probe); ok {
		for _, g := range groups {
			c2, err := p.dispatch(ctx, cl, d, g, pc)
			c.add(c2)
			if err != nil {
				return c, err
			}
		}
		return c, nil
	}
	if good = p.pace(pc, p.limiterOf(d), good); len(good) == 0 { // bulk work: pace.go
		return c, nil
	}
	r, err := p.send(ctx, token, d, good)
	c.add(r.counts)
	pc.after(r)
	if err != nil || r.pause > 0 {
		return c, err
	}
	if r.messageFailure && len(good) > 1 {
		// One of the rows made the whole publish fail: send them one at a time, so
		// that it ends alone and the others go on.
		r, err = p.sendEach(ctx, cl, d, good)
		c.add(r.counts)
		pc.after(r) // rows a limit paced stay leased until the claim releases them
		if err != nil {
			return c, err
		}
	} else if r.messageFailure {
		c2, err := p.failEach(ctx, token, good, p.now(), []error{r.err})
		c.add(c2)
		if err != nil {
			return c, err
		}
	}
	switch {
	case !probe:
	case r.published:
		err = p.store.Unhold(ctx, d, token)
	case r.held.IsZero(): // the probe failed for reasons of its message
		err = p.reprobe(ctx, token, d, p.now())
	}
	return c, err
}

// reprobe ends at once the hold whose probe token holds, so that the next claim
// probes d again with its next row.
func (p *Processor) reprobe(ctx context.Context, token string, d transport.Destination, now time.Time) error {
	_, err := p.store.Hold(ctx, Hold{Destination: d, Token: token, Now: now, Until: now, MaxDeferral: p.maxDeferral})
	return err
}

// sent is what one publish of a destination's rows came to.
type sent struct {
	counts         Counts
	published      bool            // some rows went out
	held           time.Time       // the destination was held until then (an outage)
	messageFailure bool            // the whole publish failed for a message's reason; nothing written back
	err            error           // that failure
	pause          time.Duration   // paced by the destination's limit: try again after this (pace.go)
	leased         bool            // paced rows were left leased (pace.go)
	wake           <-chan struct{} // closed when the limit may admit bulk work again (pace.go)
}

// sendEach publishes recs one at a time, in order. A row whose own failure costs it
// an attempt keeps back the later rows of its key (given back uncharged, to keep
// the key's order); an outage holds the destination and gives back the rest.
func (p *Processor) sendEach(ctx context.Context, cl claim, d transport.Destination, recs []Record) (sent, error) {
	token := cl.token
	var out sent
	stopped := map[string]bool{}
	for i, rec := range recs {
		if !p.now().Before(cl.leaseEnd) {
			return out, ErrLeaseExpired
		}
		if !out.held.IsZero() {
			c, err := p.deferRows(ctx, token, recs[i:], p.now())
			out.counts.add(c)
			return out, err
		}
		if k := rec.Message.Key; k != nil && stopped[string(k)] {
			c, err := p.deferRows(ctx, token, recs[i:i+1], p.now())
			out.counts.add(c)
			if err != nil {
				return out, err
			}
			continue
		}
		r, err := p.send(ctx, token, d, recs[i:i+1])
		out.counts.add(r.counts)
		out.published = out.published || r.published
		out.held = r.held
		if err != nil || r.pause > 0 { // paced: the rest stay leased (pace.go)
			out.pause, out.leased, out.wake = r.pause, r.leased || i+1 < len(recs), r.wake
			return out, err
		}
		if r.messageFailure {
			c, err := p.failEach(ctx, token, recs[i:i+1], p.now(), []error{r.err})
			out.counts.add(c)
			if err != nil {
				return out, err
			}
		}
		if (r.messageFailure || r.counts.Failed+r.counts.Dead > 0) && rec.Message.Key != nil {
			stopped[string(rec.Message.Key)] = true
		}
	}
	return out, nil
}

// send publishes recs in one call and writes back what it can: published rows,
// failed entries of a batch, and, on an outage, a hold of the destination with the
// rows given back uncharged. A whole publish that failed for a message's reason is
// reported, not written back.
func (p *Processor) send(ctx context.Context, token string, d transport.Destination, recs []Record) (sent, error) {
	msgs := make([]transport.Message, len(recs))
	for i, r := range recs {
		msgs[i] = r.Message
		if p.idHeader != "" {
			h := make([]transport.Header, len(r.Message.Headers), len(r.Message.Headers)+1)
			copy(h, r.Message.Headers)
			msgs[i].Headers = append(h, transport.Header{Key: p.idHeader, Value: strconv.AppendInt(nil, r.ID, 10)})
		}
	}
	pubErr := p.publishBulk(transport.WithMessageIDs(ctx, p.messageIDs(recs)), d, msgs)
	var be *transport.BatchError
	partial := errors.As(pubErr, &be) && validIndexes(be, len(recs))
	cancelled := pubErr != nil && ctx.Err() != nil
	if cancelled && !partial {
		// The publish may or may not have reached the broker; leave the rows leased so
		// that they are published again (at least once) rather than counted as failed.
		return sent{}, ctx.Err()
	}
	// What was published must be recorded even if ctx ends now, or it is sent again.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.lease)
	defer cancel()
	now := p.now()

	var out sent
	switch {
	case pubErr == nil:
		p.unusable.clear(d)
		n, err := p.store.MarkPublished(wctx, token, now, ids(recs))
		out.counts.Published, out.published = n, true
		return out, err
	case !partial && limitRefused(pubErr):
		l := p.limiterOf(d)
		return sent{pause: p.pauseOf(l), leased: true, wake: bulkWake(l)}, nil // released after the claim
	case !partial && p.judge(pubErr) == outage && p.partitionOutage(d, recs, pubErr):
		return out, nil // held alone, left leased (partitions.go)
	case !partial && p.judge(pubErr) == outage && p.retryOutage(d, now, pubErr):
		c, err := p.deferRows(wctx, token, recs, now)
		return sent{counts: c, pause: p.pauseOf(p.limiterOf(d))}, err
	case !partial && p.judge(pubErr) == outage:
		out.held = p.holdUntil(d, now, pubErr)
		c, err := p.hold(wctx, token, d, recs, now, out.held)
		out.counts = c
		return out, err
	case !partial && p.judge(pubErr) == unusable:
		var err error
		out.held, out.counts, err = p.holdUnusable(wctx, token, d, recs, now, pubErr)
		return out, err
	case !partial:
		return sent{messageFailure: true, err: pubErr}, nil
	}
	failed := map[int]error{}
	for _, f := range be.Failed {
		failed[f.Index] = f.Err
	}
	var ok, own, down, refused []Record
	var errs []error
	var refusal error
	for i, r := range recs {
		e, isFailed := failed[i]
		switch {
		case !isFailed:
			ok = append(ok, r)
		case p.judge(e) == outage || isPartitionRefusal(e):
			down = append(down, r)
		case p.judge(e) == unusable:
			refused, refusal = append(refused, r), e
		default:
			own, errs = append(own, r), append(errs, e)
		}
	}
	if len(down) > 0 { // the outage holds the destination, whatever else it said
		down = append(down, refused...)
	} else if len(refused) > 0 {
		until, c, err := p.holdUnusable(wctx, token, d, refused, now, refusal)
		out.held = until
		out.counts.add(c)
		if err != nil {
			return out, err
		}
	}
	if len(ok) > 0 {
		p.unusable.clear(d)
		n, err := p.store.MarkPublished(wctx, token, now, ids(ok))
		out.counts.Published, out.published = n, true
		if err != nil {
			return out, err
		}
	}
	if cancelled {
		// The rest may have failed only because ctx ended: leave them leased, as
		// above, rather than consume an attempt.
		return out, ctx.Err()
	}
	c, err := p.failEach(wctx, token, own, now, errs)
	out.counts.add(c)
	if err != nil || len(down) == 0 {
		return out, err
	}
	if p.partitionOutage(d, down, downErrs(be, recs, down)) {
		return out, nil // held alone, left leased (partitions.go)
	}
	out.held = p.holdUntil(d, now, nil)
	c, err = p.hold(wctx, token, d, down, now, out.held)
	out.counts.add(c)
	return out, err
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

// hold holds d until until (plus jitter), which makes dead the rows whose outage
// budget is spent, and gives the claimed rows still pending back uncharged.
func (p *Processor) hold(ctx context.Context, token string, d transport.Destination, recs []Record, now, until time.Time) (Counts, error) {
	return p.holdFor(ctx, token, d, recs, now, until, "")
}

// holdFor is hold with the Hold's Reason: why d is unusable, or "" for an outage.
func (p *Processor) holdFor(ctx context.Context, token string, d transport.Destination, recs []Record, now, until time.Time, reason string) (Counts, error) {
	dead, err := p.store.Hold(ctx, Hold{
		Destination: d, Token: token, Now: now,
		Until:       until.Add(time.Duration(p.random() * float64(p.deferralJitter))),
		MaxDeferral: p.maxDeferral, Reason: reason,
	})
	if err != nil {
		return Counts{}, err
	}
	c, err := p.deferRows(ctx, token, recs, now)
	c.Dead += dead
	return c, err
}

func (p *Processor) deferRows(ctx context.Context, token string, recs []Record, now time.Time) (Counts, error) {
	n, err := p.store.Defer(ctx, Deferral{Token: token, IDs: ids(recs), Now: now})
	return Counts{Deferred: n}, err
}

// failDead makes recs dead at once with last error "reason: detail".
func (p *Processor) failDead(ctx context.Context, token string, recs []Record, now time.Time, reason, detail string) (Counts, error) {
	fs := make([]Failure, len(recs))
	for i, r := range recs {
		fs[i] = Failure{ID: r.ID, RetryAt: now, Dead: true, Err: truncate(reason + ": " + detail)}
	}
	return p.writeFailures(ctx, token, fs)
}

// failEach records errs[i] (or errs[0] for all, when it is the only one) against
// recs[i]: one more attempt, and a retry after the backoff, or death once MaxAttempts
// failures have been made.
func (p *Processor) failEach(ctx context.Context, token string, recs []Record, now time.Time, errs []error) (Counts, error) {
	fs := make([]Failure, len(recs))
	for i, r := range recs {
		e := errs[min(i, len(errs)-1)].Error()
		f := Failure{ID: r.ID, Err: truncate(e)}
		if r.Attempts+1 >= p.maxAttempts {
			f.Dead, f.RetryAt, f.Err = true, now, truncate(ReasonAttemptsExhausted+": "+e)
		} else {
			f.RetryAt = now.Add(p.backoff.Delay(r.Attempts+1, p.random()))
		}
		fs[i] = f
	}
	return p.writeFailures(ctx, token, fs)
}

func (p *Processor) writeFailures(ctx context.Context, token string, fs []Failure) (Counts, error) {
	if len(fs) == 0 {
		return Counts{}, nil
	}
	failed, dead, err := p.store.Fail(ctx, token, fs)
	return Counts{Failed: failed, Dead: dead}, err
}

// truncate makes s fit last_error, a text column: valid UTF-8 without NUL (an
// error may quote a message's bytes), at most maxErrorLen bytes cut between runes.
func truncate(s string) string {
	s = strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", "\uFFFD"), "\uFFFD")
	if len(s) <= maxErrorLen {
		return s
	}
	cut := maxErrorLen
	for !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}

// Run dispatches batches until ctx ends. After a batch that claimed rows it claims
// again at once; only when nothing was due does it wait, for the poll interval or, with
// a Waker, until the Waker signals, whichever comes first. The Waker is the one given
// to WithWaker or, without one, the store's own (CommitWaker), if it has one. With
// WithRetention it also deletes old settled rows, one bounded batch between claims.
// It runs in the caller's goroutine and starts none but the Waker's. When ctx ends it
// releases the rows its batch still leases, so a stopped Run leaves no row leased, and
// returns nil (or the release's error).
//
// Run does not end on errors: after a failed batch it passes the error to the
// WithErrorHandler function (by default it is logged through log/slog), releases the
// batch's rows (if the release fails too, it tries again once a batch succeeds, so
// the rows come back before their lease ends), and claims again after a capped,
// jittered backoff (WithErrorBackoff)
// that grows while batches keep failing and starts over after one that succeeds. No
// error is treated as final: a missing table can be migrated, a permission granted,
// a database brought back.
func (p *Processor) Run(ctx context.Context) error {
	release := func(token string) error {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.lease)
		defer cancel()
		return p.store.Release(rctx, token)
	}
	w := p.startWaker(ctx)
	defer w.stop()
	timer := time.NewTimer(p.poll)
	defer timer.Stop()
	failures := 0           // batches failed in a row
	var unreleased []string // tokens of failed batches whose release failed too (runerrors.go)
	for {
		drain(w.wake)      // this claim sees every row announced so far
		if failures == 0 { // the store answers again
			unreleased = p.releaseAgain(ctx, unreleased, release)
		}
		rep, token, err := p.process(ctx)
		if ctx.Err() != nil {
			return errors.Join(release(token), p.releaseAll(unreleased, release))
		}
		var more bool
		if err != nil {
			p.onError(err) // before the release, which may wait for a silent store too
			if release(token) != nil {
				unreleased = append(unreleased, token)
			}
		} else {
			if more, err = p.retain(ctx, p.now()); err != nil {
				p.onError(err)
			}
		}
		if ctx.Err() != nil {
			return nil
		}
		idle, wait := true, p.poll
		var paced <-chan struct{} // ends a pacing pause early (pace.go)
		if err != nil {
			failures++
			wait = p.errorBackoff.Delay(failures, p.random())
		} else if failures = 0; rep.Claimed > 0 || more {
			if rep.Pause == 0 {
				continue
			}
			wait, paced = rep.Pause, rep.wake // paced by a destination's limit (pace.go)
		}
		timer.Reset(wait)
		for idle {
			select {
			case <-ctx.Done():
				return nil
			case <-timer.C:
				idle = false
			case <-paced:
				idle = false
			case <-w.wake:
				// After an error, wait out the backoff: a signal must not turn a
				// failing store into a busy loop.
				idle = err != nil
			case lerr := <-w.failed:
				p.onError(lerr)
			}
		}
	}
}
