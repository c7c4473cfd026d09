package sharedstate

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/backend"
)

// Lister is an optional capability of a Driver (found by type assertion): naming the
// identities that have a record, for operators' tools such as "brokerguard circuits
// list". It is not a hot path and no circuit calls it: a listing reads the whole store
// in bounded pages (a DynamoDB Scan, a Redis SCAN, a directory listing), and a record
// created or removed meanwhile may or may not be named.
type Lister interface {
	// List calls yield with each identity that starts with prefix and has a record,
	// in no particular order, until yield returns an error (which List returns) or
	// the store is exhausted. It returns when ctx ends.
	List(ctx context.Context, prefix string, yield func(id string) error) error
}

// ErrNotListable is returned by Operator.List for a driver that is not a Lister.
var ErrNotListable = errors.New("sharedstate: this store cannot list its circuits")

// Operator reads and holds the shared circuits of one store without knowing their
// policy: what a person on call needs, who does not know the service's Policy. Its
// holds are the ones Circuit.ForceOpen, ForceClose and ClearOverride write, applied to
// the record with the same conditional replace, so they act the same way: every
// replica sees them within its MaxStaleness, each starts a new generation, and the
// replicas' observers are told of it when they read the record. The policy a record
// was written under is kept as it is.
//
// An Operator only changes records that exist: a circuit that no replica has used yet
// has no record (and no policy to write into one), and every method returns an error
// matching ErrNotFound for it. The zero value is not usable; Driver is required.
type Operator struct {
	Driver Driver
	// Scope is reported in the snapshots of Status (the scope the backend provides).
	Scope breaker.Scope
	// Clock tells the time written into records (default: the system clock). The
	// replicas read deadlines against their own clocks, which must agree with it.
	Clock breaker.Clock
	// IOTimeout bounds each method (0 means DefaultIOTimeout).
	IOTimeout time.Duration
	// MaxHold bounds how far ahead ForceOpen and ForceClose may hold a circuit (0
	// means DefaultMaxHold; negative means no bound), as the admin handler's
	// WithMaxHold does. Holds past backend.LatestHold are always refused.
	MaxHold time.Duration
}

// DefaultMaxHold is Operator's bound on a hold, the admin handler's default too.
const DefaultMaxHold = 24 * time.Hour

// Status is one circuit's record as an operator reads it.
type Status struct {
	// Snapshot presents the record the way a circuit's Snapshot does (Probes counts
	// the leases unexpired when it was read); InFlight, Calls and Mode are per
	// process and left at zero.
	breaker.Snapshot
	// Record is the record as stored: the probe leases and their owners, the reason
	// and time of the transition that began the generation, and the policy in words.
	Record Record
}

func (o *Operator) now() time.Time {
	if o.Clock == nil {
		return time.Now()
	}
	return o.Clock.Now()
}

func (o *Operator) context(ctx context.Context) (context.Context, context.CancelFunc) {
	if o.IOTimeout > 0 {
		return context.WithTimeout(ctx, o.IOTimeout)
	}
	return context.WithTimeout(ctx, DefaultIOTimeout)
}

// load reads and checks the record of id; a missing one is an error naming id that
// matches ErrNotFound.
func (o *Operator) load(ctx context.Context, id string) (Record, error) {
	if id == "" {
		return Record{}, errors.New("sharedstate: empty identity")
	}
	r, err := o.Driver.Load(ctx, id)
	if err != nil {
		return Record{}, fmt.Errorf("sharedstate: circuit %q: %w", id, err)
	}
	if err := r.Check(id); err != nil {
		return Record{}, err
	}
	return r, nil
}

func (o *Operator) status(id string, r Record) Status {
	return Status{Snapshot: snapshotOf(id, o.Scope, r, o.now().UnixNano()), Record: r}
}

// Status reads the record of id.
func (o *Operator) Status(ctx context.Context, id string) (Status, error) {
	ctx, cancel := o.context(ctx)
	defer cancel()
	r, err := o.load(ctx, id)
	if err != nil {
		return Status{}, err
	}
	return o.status(id, r), nil
}

// ForceOpen holds the circuit id open until the given time, as Circuit.ForceOpen
// does, and returns its status as written.
func (o *Operator) ForceOpen(ctx context.Context, id string, until time.Time) (Status, error) {
	if err := o.checkHold(until); err != nil {
		return Status{}, err
	}
	return o.override(ctx, id, forceOpen(until))
}

// ForceClose holds the circuit id closed until the given time, as Circuit.ForceClose
// does, and returns its status as written.
func (o *Operator) ForceClose(ctx context.Context, id string, until time.Time) (Status, error) {
	if err := o.checkHold(until); err != nil {
		return Status{}, err
	}
	return o.override(ctx, id, forceClose(until))
}

// checkHold refuses a hold until that backend.CheckHold refuses, with MaxHold.
func (o *Operator) checkHold(until time.Time) error {
	limit := o.MaxHold
	if limit == 0 {
		limit = DefaultMaxHold
	}
	return backend.CheckHold(o.now(), until, max(limit, 0))
}

// ClearOverride ends the hold on the circuit id, as Circuit.ClearOverride does, and
// returns its status afterwards. Without a hold it writes nothing.
func (o *Operator) ClearOverride(ctx context.Context, id string) (Status, error) {
	return o.override(ctx, id, clearOverride)
}

func (o *Operator) override(ctx context.Context, id string, h hold) (Status, error) {
	ctx, cancel := o.context(ctx)
	defer cancel()
	load := func() (Record, error) { return o.load(ctx, id) }
	replace := func(prev, next Record) error { return o.Driver.Replace(ctx, id, prev.Version, next) }
	r, err := overrideRecord(load, replace, func() int64 { return o.now().UnixNano() }, h)
	if errors.Is(err, errContention) {
		err = fmt.Errorf("sharedstate: circuit %q: %w", id, err)
	}
	if err != nil {
		return Status{}, err
	}
	return o.status(id, r), nil
}

// List calls yield with every identity in the store that starts with prefix (see
// Lister); it returns an error matching ErrNotListable when the driver cannot list.
// It is bounded by ctx alone, not by IOTimeout: a large store takes many pages.
func (o *Operator) List(ctx context.Context, prefix string, yield func(id string) error) error {
	l, ok := o.Driver.(Lister)
	if !ok {
		return ErrNotListable
	}
	return l.List(ctx, prefix, yield)
}
