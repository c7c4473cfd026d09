package outbox

import (
	"context"
)

// Sessions is an optional interface of a Store that knows at once when a dispatcher
// is gone, so that the rows its claims lease go back to the others in the time of a
// claim rather than of a lease. The PostgreSQL store ties a session to a connection of
// its own that holds an advisory lock: the database drops the lock when the
// dispatcher's process dies or its connection breaks. The memory store has sessions too.
//
// Run opens a session before its first claim, for the tokens of its claims (the
// Processor's owner and a random part), and ends it when it returns. A claim made
// outside a session (ProcessPending without Run, or a store that cannot open one)
// keeps its rows until its lease ends, as before.
type Sessions interface {
	// Session ties the claims whose tokens start with prefix (which ends in "/") to a
	// session, until end is called or ctx ends. While the session lasts their rows
	// stay leased until their lease ends, however long a batch takes; once it has
	// ended (end called, ctx ended, or, for a store in another process, the process
	// or its connection gone), the rows those claims still lease may be claimed at
	// once by other claims. It returns an error, and no session, when it cannot open
	// one.
	Session(ctx context.Context, prefix string) (end func(), err error)
}

// sessionPrefix is the start of every claim token of p (newToken).
func (p *Processor) sessionPrefix() string { return p.owner + "/" + p.nonce + "/" }

// openSession opens Run's session on the store, if it has sessions. Without one
// (none offered, or it could not be opened: the error goes to the error handler) the
// claims keep their rows until their leases end.
func (p *Processor) openSession(ctx context.Context) (end func()) {
	if p.sessions == nil {
		return func() {}
	}
	end, err := p.sessions.Session(ctx, p.sessionPrefix())
	if err != nil {
		p.onError(&StoreError{Op: OpSession, Err: err})
		return func() {}
	}
	return end
}
