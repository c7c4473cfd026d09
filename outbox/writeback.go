package outbox

import (
	"context"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/brokerguard/brokerguard/transport"
)

// maxErrorLen bounds the last_error a row keeps.
const maxErrorLen = 1024

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
			f.RetryAt = now.Add(p.backoff.delay(r.Attempts+1, p.random()))
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
