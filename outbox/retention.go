package outbox

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Defaults of a Retention.
const (
	DefaultRetentionBatch    = 1000
	DefaultRetentionInterval = time.Minute
)

// Retention says how long settled rows are kept after they settled (were published or
// became dead). Dead rows usually deserve the longer period: someone may want to look
// at them and requeue them.
type Retention struct {
	// Published rows are deleted this long after they were published; 0 keeps them.
	Published time.Duration
	// Dead rows are deleted this long after they became dead; 0 keeps them.
	Dead time.Duration
	// BatchSize bounds the rows of each status one delete statement removes, so that
	// no statement holds its locks for long; 0 means DefaultRetentionBatch.
	BatchSize int
	// Interval is how often Run deletes (WithRetention); 0 means
	// DefaultRetentionInterval. Purge ignores it.
	Interval time.Duration
}

// Validate reports the first field out of range.
func (r Retention) Validate() error {
	switch {
	case r.Published < 0:
		return fmt.Errorf("outbox: retention Published %v is negative", r.Published)
	case r.Dead < 0:
		return fmt.Errorf("outbox: retention Dead %v is negative", r.Dead)
	case r.BatchSize < 0:
		return fmt.Errorf("outbox: retention BatchSize %d is negative", r.BatchSize)
	case r.Interval < 0:
		return fmt.Errorf("outbox: retention Interval %v is negative", r.Interval)
	case r.Published == 0 && r.Dead == 0:
		return errors.New("outbox: retention keeps everything: set Published, Dead or both")
	}
	return nil
}

func (r Retention) batch() int {
	if r.BatchSize == 0 {
		return DefaultRetentionBatch
	}
	return r.BatchSize
}

func (r Retention) interval() time.Duration {
	if r.Interval == 0 {
		return DefaultRetentionInterval
	}
	return r.Interval
}

// Cutoffs returns the settle times before which published and dead rows may be
// deleted at now; a zero time means rows of that status are kept.
func (r Retention) Cutoffs(now time.Time) (published, dead time.Time) {
	if r.Published > 0 {
		published = now.Add(-r.Published)
	}
	if r.Dead > 0 {
		dead = now.Add(-r.Dead)
	}
	return published, dead
}

// Purger is a Store that can delete settled rows; the memory and PostgreSQL
// stores are Purgers.
type Purger interface {
	// DeleteSettled deletes up to limit published rows settled before
	// publishedBefore and up to limit dead rows settled before deadBefore, and
	// returns how many rows it deleted. A zero time deletes no row of that status.
	// Pending rows are never deleted. A negative limit is an error (storekit.CheckDeleteLimit).
	DeleteSettled(ctx context.Context, publishedBefore, deadBefore time.Time, limit int) (int, error)
}

// Purge deletes every row that r no longer keeps at now, one bounded batch after
// another, and returns how many it deleted. It is the call for a cron job; a
// Processor given WithRetention does the same as it runs. Stopping it part way (ctx)
// loses nothing: the rows left are deleted next time.
func Purge(ctx context.Context, s Purger, r Retention, now time.Time) (int, error) {
	if err := r.Validate(); err != nil {
		return 0, err
	}
	published, dead := r.Cutoffs(now)
	total := 0
	for {
		n, err := s.DeleteSettled(ctx, published, dead, r.batch())
		total += n
		if err != nil || n < r.batch() {
			return total, err
		}
	}
}

// WithRetention has Run delete settled rows that r no longer keeps, every r.Interval,
// one bounded batch at a time between claims so that dispatching never waits for a
// long delete. The store must be a Purger.
func WithRetention(r Retention) ProcessorOption {
	return func(p *Processor) error {
		if err := r.Validate(); err != nil {
			return err
		}
		p.retention = &r
		return nil
	}
}

// retain runs one delete batch when one is due and says whether more rows may be
// waiting for the next batch.
func (p *Processor) retain(ctx context.Context, now time.Time) (more bool, err error) {
	if p.retention == nil || now.Before(p.nextPurge) {
		return false, nil
	}
	r := *p.retention
	published, dead := r.Cutoffs(now)
	n, err := p.store.(Purger).DeleteSettled(ctx, published, dead, r.batch())
	if err != nil || n < r.batch() {
		p.nextPurge = now.Add(r.interval())
		return false, err
	}
	return true, nil
}
