package registry

import (
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/backend"
	"github.com/brokerguard/brokerguard/transport"
)

// Defaults of PartitionPolicy.
const (
	DefaultPartitionFailures = 3
	DefaultMaxPartitions     = 4096
	// MaxDefaultPartitionIsolation caps the default Isolation: an isolated partition
	// probes at least every second, so that a broker that comes back takes its keys
	// back within about a second however long the topic's BreakDuration is.
	MaxDefaultPartitionIsolation = time.Second
)

// PartitionPolicy says when one partition of a destination is isolated under the
// destination's circuit. Adapters of brokers whose destinations are split into
// partitions led by different servers (the Kafka adapters) keep this evidence by
// default; the zero PartitionPolicy is the defaults.
type PartitionPolicy struct {
	// Failures is how many consecutive Failures of calls to one partition isolate
	// it; 0 means the destination policy's FailureThreshold, or
	// DefaultPartitionFailures when that is not set.
	Failures int
	// Isolation is how long an isolated partition refuses calls before it admits one
	// as its probe; 0 means the destination policy's BreakDuration, at most
	// MaxDefaultPartitionIsolation (a partition's probe costs one call, and the
	// topic's other partitions carry its traffic meanwhile).
	Isolation time.Duration
	// MaxPartitions bounds the partitions tracked per destination; calls to higher
	// partitions are judged by the destination's circuit only. 0 means
	// DefaultMaxPartitions.
	MaxPartitions int
	// Disabled turns partition evidence off: every call is judged at the destination.
	Disabled bool
}

// WithPartitionPolicy sets the partition policy of every destination (see
// PartitionPolicy; without this option the defaults apply).
func WithPartitionPolicy(p PartitionPolicy) Option {
	return func(r *Registry) error {
		switch {
		case p.Failures < 0:
			return fmt.Errorf("registry: WithPartitionPolicy: Failures %d is negative", p.Failures)
		case p.Isolation < 0:
			return fmt.Errorf("registry: WithPartitionPolicy: Isolation %v is negative", p.Isolation)
		case p.MaxPartitions < 0:
			return fmt.Errorf("registry: WithPartitionPolicy: MaxPartitions %d is negative", p.MaxPartitions)
		}
		r.partPolicy = p
		return nil
	}
}

// PartitionRejectedError is the refusal of a call, or of the messages of a call,
// bound for an isolated partition; the inner publisher did not send them.
// errors.Is(err, transport.ErrPartitionRejected), errors.Is(err, breaker.ErrOpen) and
// errors.As(err, **breaker.OpenError) see through it; the OpenError's Identity names
// the partition ("kafka:orders/3").
type PartitionRejectedError struct {
	Destination transport.Destination
	Partition   int
	Err         *breaker.OpenError
}

// Error names the partition and when it admits a probe.
func (e *PartitionRejectedError) Error() string {
	return "registry: publish to " + e.Destination.String() + " partition " + strconv.Itoa(e.Partition) + " rejected: " + e.Err.Error()
}

// Unwrap returns the partition's *breaker.OpenError.
func (e *PartitionRejectedError) Unwrap() error { return e.Err }

// Is reports whether target is transport.ErrPartitionRejected.
func (e *PartitionRejectedError) Is(target error) bool {
	return target == transport.ErrPartitionRejected
}

// IsolatedPartition is one isolated partition of a destination, as Snapshot-like
// views (Report, the admin API) show it.
type IsolatedPartition struct {
	Partition int
	// Since is when it was isolated; NotBefore when it admits its next probe.
	Since, NotBefore time.Time
	// Failures is the failure streak that isolated it (and failed probes since).
	Failures int
	// LastError is the text of the last failure told with its error (as
	// breaker.ErrorText keeps it); empty when none was.
	LastError string
}

// Partitions is the partition-level evidence under one destination's circuit: a
// consecutive-failure streak per partition, and the isolation of a partition whose
// streak reached the policy's Failures. While isolated, a partition refuses calls
// (Admit returns a *PartitionRejectedError) until its NotBefore, then admits one call
// as its probe: a Success ends the isolation, a Failure starts a new one.
//
// Isolation holds only while some partition the destination's calls went to is not
// isolated: when every used partition is, the destination as a whole is failing for
// this process (a topic written with one key included) and calls go through to be
// judged by its circuit, which opens and refuses them all. TopicOutcome tells the
// circuit a partition's failure only when no other used partition answers. A
// partition is used from the first outcome told of it; partitions never written
// say nothing either way.
//
// Isolations and their ends reach the registry's observers (WithObserver) as
// transitions of the partition (see ReasonPartitionIsolated).
//
// The healthy path (Admit and Complete(Success) of a partition without a streak)
// takes no lock, reads no clock and allocates nothing. It is safe for concurrent use.
type Partitions struct {
	dest      transport.Destination
	failures  int32
	isolation time.Duration
	max       int
	now       func() time.Time

	observe  func(transport.Destination, breaker.Transition) // the registry's observers; nil when none
	count    atomic.Int32                                    // partitions the client reported; 0 while unknown
	used     atomic.Int32                                    // slots used (partSlot.used)
	isolated atomic.Int32                                    // slots isolated now; changed under mu
	slots    atomic.Pointer[[]*partSlot]
	mu       sync.Mutex // serializes growth of slots and isolation changes
}

type partSlot struct {
	streak atomic.Int32              // consecutive Failures; kept while isolated
	iso    atomic.Pointer[isolation] // nil unless isolated
	leader atomic.Int32              // the partition's leader + 1; 0 while unknown
	used   atomic.Bool               // some outcome was told of it
	last   atomic.Pointer[string]    // the text of the last failure told with its error
}

// isolation is one isolation of a partition; it is replaced, never changed, except
// for probeAt.
type isolation struct {
	since, until time.Time
	err          *PartitionRejectedError // built once: a refusal allocates nothing
	probeAt      atomic.Int64            // unix nanos of the probe in flight; 0 when none
}

// testHookIsolating, when set by a test, runs in isolate before mu is taken: there a
// Success can heal the slot between the streak reaching the threshold and the
// isolation. Nil in production.
var testHookIsolating func()

// testHookPartitionsBuilt, when set by a test, runs in Registry.Partitions between
// building a destination's Partitions and publishing them: there another caller can
// publish its own first. Nil in production.
var testHookPartitionsBuilt func()

// Partitions returns the partition evidence of destination d, created with its
// circuit. It returns nil, nil when the partition policy is Disabled; adapters then
// judge every call at the destination.
func (r *Registry) Partitions(d transport.Destination) (*Partitions, error) {
	if r.partPolicy.Disabled {
		return nil, nil
	}
	e, err := r.entry(d)
	if err != nil {
		return nil, err
	}
	if ps := e.parts.Load(); ps != nil {
		return ps, nil
	}
	pp := r.partPolicy
	ps := &Partitions{dest: d, failures: int32(pp.Failures), isolation: pp.Isolation, max: pp.MaxPartitions, now: r.now, observe: r.observePartition}
	if ps.failures == 0 {
		ps.failures = DefaultPartitionFailures
		if n := r.Policy(d).Circuit.FailureThreshold; n > 0 {
			ps.failures = int32(n) // a partition fails as its topic would have to
		}
	}
	if ps.isolation == 0 {
		ps.isolation = min(backend.Normalize(r.Policy(d).Circuit).BreakDuration, MaxDefaultPartitionIsolation)
	}
	if ps.max == 0 {
		ps.max = DefaultMaxPartitions
	}
	ps.slots.Store(new([]*partSlot))
	if testHookPartitionsBuilt != nil {
		testHookPartitionsBuilt()
	}
	if !e.parts.CompareAndSwap(nil, ps) {
		return e.parts.Load(), nil
	}
	return ps, nil
}

// isolatedPartitions lists e's isolated partitions; nil when it has none.
func (e *entry) isolatedPartitions() []IsolatedPartition {
	if ps := e.parts.Load(); ps != nil {
		return ps.Isolated()
	}
	return nil
}

// IsolatedPartitions lists the isolated partitions of destination d, by partition;
// nil when it has none or is not live.
func (r *Registry) IsolatedPartitions(d transport.Destination) []IsolatedPartition {
	if e, ok := r.lookup(d); ok {
		return e.isolatedPartitions()
	}
	return nil
}

// Destination is the destination whose partitions these are.
func (ps *Partitions) Destination() transport.Destination { return ps.dest }

// SetCount records how many partitions the client sees for the destination (a
// Kafka client's balancer or partitioner is told on every message).
func (ps *Partitions) SetCount(n int) {
	if n > 0 && int(ps.count.Load()) != n {
		ps.count.Store(int32(min(n, ps.max)))
	}
}

// Count is the last count SetCount recorded, 0 while unknown.
func (ps *Partitions) Count() int { return int(ps.count.Load()) }

// slot returns partition p's slot, creating it (and the ones below) when create is
// set; nil for a partition out of range.
func (ps *Partitions) slot(p int, create bool) *partSlot {
	if p < 0 || p >= ps.max {
		return nil
	}
	if s := *ps.slots.Load(); p < len(s) {
		return s[p]
	}
	if !create {
		return nil
	}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	old := *ps.slots.Load()
	if p < len(old) {
		return old[p]
	}
	next := make([]*partSlot, p+1)
	copy(next, old)
	for i := len(old); i <= p; i++ {
		next[i] = new(partSlot)
	}
	ps.slots.Store(&next)
	return next[p]
}

// answering reports whether some used partition is not isolated. A partition whose
// last calls failed but that is not isolated yet still counts: a burst of deadlines
// that touches every partition once is not a topic that fails. Partitions never
// used do not: a topic written with one key is down when that key's partition is.
func (ps *Partitions) answering() bool {
	return ps.used.Load() > ps.isolated.Load()
}

// use returns partition p's slot, created and marked used; nil for a partition out
// of range.
func (ps *Partitions) use(p int) *partSlot {
	s := ps.slot(p, true)
	if s != nil && !s.used.Load() && s.used.CompareAndSwap(false, true) {
		ps.used.Add(1)
	}
	return s
}

// isolatedNow reports whether partition p is isolated, whether or not it refuses.
func (ps *Partitions) isolatedNow(p int) bool {
	s := ps.slot(p, false)
	return s != nil && s.iso.Load() != nil
}

// Admit says whether a call may go to partition p now: nil when it is not isolated
// (or the destination has no answering partition left, see Partitions), or when this
// call takes the isolated partition's probe; else a *PartitionRejectedError, without
// allocating before the isolation ends.
func (ps *Partitions) Admit(p int) error {
	s := ps.slot(p, false)
	if s == nil {
		return nil
	}
	iso := s.iso.Load()
	if iso == nil || !ps.answering() {
		return nil
	}
	now := ps.now()
	if now.Before(iso.until) {
		return iso.err
	}
	at := iso.probeAt.Load()
	// A probe whose outcome never came is given up after an isolation's length.
	if (at == 0 || now.UnixNano()-at >= int64(ps.isolation)) && iso.probeAt.CompareAndSwap(at, now.UnixNano()) {
		return nil
	}
	return ps.rejection(p, now.Add(min(ps.isolation, time.Second)))
}

func (ps *Partitions) rejection(p int, notBefore time.Time) *PartitionRejectedError {
	id := ps.dest.String() + "/" + strconv.Itoa(p)
	return &PartitionRejectedError{Destination: ps.dest, Partition: p, Err: backend.NewOpenError(id, breaker.LocalProcess, notBefore)}
}

// Complete records the outcome o of a call (or of the messages of a call) that went
// to partition p, and marks p used. A Success ends p's streak and its isolation; a
// Failure adds to its streak, isolates it at the policy's Failures, and after a
// probe isolates it again; a Neutral outcome of a probe frees the probe's place.
func (ps *Partitions) Complete(p int, o breaker.Outcome) { ps.CompleteWith(p, o, nil) }

// CompleteWith is Complete keeping, for a Failure, err's text as the partition's
// last error (IsolatedPartition.LastError).
func (ps *Partitions) CompleteWith(p int, o breaker.Outcome, err error) {
	switch o {
	case breaker.Success:
		s := ps.slot(p, false)
		if s != nil && s.used.Load() && s.streak.Load() == 0 && s.iso.Load() == nil { // the healthy path
			return
		}
		if s = ps.use(p); s != nil && (s.streak.Load() != 0 || s.iso.Load() != nil) {
			ps.heal(p, s, ReasonPartitionHealed)
		}
	case breaker.Failure:
		s := ps.use(p)
		if s == nil {
			return
		}
		if err != nil {
			text := backend.ErrorText(err)
			s.last.Store(&text)
		}
		if iso := s.iso.Load(); iso != nil {
			if iso.probeAt.Load() != 0 { // the probe (or a call beside it) failed
				ps.isolate(p, s, iso)
			}
			return
		}
		if s.streak.Add(1) >= ps.failures {
			ps.isolate(p, s, nil)
		}
	default:
		if s := ps.use(p); s != nil {
			if iso := s.iso.Load(); iso != nil {
				iso.probeAt.Store(0)
			}
		}
	}
}

// isolate isolates p from now, replacing the isolation was (nil: p is not isolated);
// it does nothing when another call changed p's isolation first.
func (ps *Partitions) isolate(p int, s *partSlot, was *isolation) {
	if testHookIsolating != nil {
		testHookIsolating()
	}
	ps.mu.Lock()
	if s.iso.Load() != was {
		ps.mu.Unlock()
		return
	}
	now := ps.now()
	since := now
	if was != nil {
		since = was.since
		s.streak.Add(1)
	}
	until := now.Add(ps.isolation)
	s.iso.Store(&isolation{since: since, until: until, err: ps.rejection(p, until)})
	if was == nil {
		ps.isolated.Add(1)
	}
	ps.mu.Unlock()
	if was == nil { // a failed probe's new isolation changes no state
		ps.transition(p, breaker.Closed, breaker.Open, now, ReasonPartitionIsolated)
	}
}

// heal ends s's streak and isolation (partition p's), telling the observers with
// reason when it was isolated.
func (ps *Partitions) heal(p int, s *partSlot, reason string) {
	ps.mu.Lock()
	was := s.iso.Swap(nil)
	if was != nil {
		ps.isolated.Add(-1)
	}
	ps.mu.Unlock()
	s.streak.Store(0)
	if was != nil {
		ps.transition(p, breaker.Open, breaker.Closed, ps.now(), reason)
	}
}

// Leader records the broker leading partition p. When it differs from the leader
// recorded before, p's evidence is reset: the streak and isolation were about the
// old leader.
func (ps *Partitions) Leader(p int, leader int32) {
	s := ps.slot(p, leader >= 0)
	if s == nil || leader < 0 {
		return
	}
	if old := s.leader.Swap(leader + 1); old != 0 && old != leader+1 {
		ps.heal(p, s, ReasonPartitionLeaderMoved)
	}
}

// Isolated lists the isolated partitions, by partition; nil when none is.
func (ps *Partitions) Isolated() []IsolatedPartition {
	if ps.isolated.Load() == 0 {
		return nil
	}
	var out []IsolatedPartition
	for p, s := range *ps.slots.Load() {
		if iso := s.iso.Load(); iso != nil {
			ip := IsolatedPartition{Partition: p, Since: iso.since, NotBefore: iso.until, Failures: int(s.streak.Load())}
			if last := s.last.Load(); last != nil {
				ip.LastError = *last
			}
			out = append(out, ip)
		}
	}
	return out
}

// Route picks the partition of a message for which the client's own balancer or
// partitioner chose pick among the n partitions 0..n-1. A keyed message keeps pick:
// Route returns Admit's error when pick is isolated. An unkeyed message avoids
// isolated partitions: the first admitted partition after pick (cyclically) is
// taken; when none is admitted Route returns pick and the error. When every used
// partition is isolated (Admit lets pick through to the destination's circuit), an
// unkeyed message still goes to the first partition after pick that is not isolated.
func (ps *Partitions) Route(pick, n int, keyed bool) (int, error) {
	err := ps.Admit(pick)
	through := err == nil && ps.isolatedNow(pick) && !ps.answering()
	if keyed || err == nil && !through {
		return pick, err
	}
	for i := 1; i < n; i++ {
		p := (pick + i) % n
		if through && !ps.isolatedNow(p) || !through && ps.Admit(p) == nil {
			return p, nil
		}
	}
	return pick, err
}

// TopicOutcome is what the destination's circuit is told of a call whose outcome o
// was attributed to its partitions, failing being the partitions whose messages
// failed (told to Complete first): a Failure counts against the destination only
// when no used partition besides them is answering (every other one is isolated: a
// topic of one partition, a topic written with one key, or the last partitions of a
// topic failing whole); otherwise it is the partitions' evidence alone, and the
// circuit is told published (Success) when some of the call's messages were, else
// Neutral.
func (ps *Partitions) TopicOutcome(o breaker.Outcome, somePublished bool, failing ...int) breaker.Outcome {
	if o != breaker.Failure {
		return o
	}
	others := int(ps.used.Load()) - int(ps.isolated.Load())
	for _, p := range failing {
		if s := ps.slot(p, false); p >= 0 && p < ps.max && (s == nil || s.iso.Load() == nil) {
			others--
		}
	}
	if others <= 0 {
		return breaker.Failure
	}
	if somePublished {
		return breaker.Success
	}
	return breaker.Neutral
}

// IsPartitionRejection reports whether err is, or wraps, a partition's refusal.
func IsPartitionRejection(err error) bool {
	var pe *PartitionRejectedError
	return errors.As(err, &pe)
}

// RefusedUntil is until when Admit refuses calls to partition p: its isolation's
// end while it is isolated (and some other partition answers), else zero. It only
// looks: it takes no probe.
func (ps *Partitions) RefusedUntil(p int) time.Time {
	s := ps.slot(p, false)
	if s == nil {
		return time.Time{}
	}
	iso := s.iso.Load()
	if iso == nil || !ps.answering() {
		return time.Time{}
	}
	if now := ps.now(); !now.Before(iso.until) {
		if at := iso.probeAt.Load(); at == 0 || now.UnixNano()-at >= int64(ps.isolation) {
			return time.Time{} // due for its probe
		}
		return now.Add(min(ps.isolation, time.Second))
	}
	return iso.until
}

// AnyIsolated reports whether some partition is isolated now: one atomic load, for
// adapters that do extra work only then.
func (ps *Partitions) AnyIsolated() bool { return ps.isolated.Load() > 0 }
