// Package admin is the on-call surface of brokerguard: an [http.Handler] that a service
// mounts on its own mux (nothing listens by itself), serving
//
//   - a JSON API: every circuit of a registry with its snapshot, one circuit by
//     destination, the recent transitions, and the outbox's backlog (per destination),
//     held destinations and dead rows by reason, and its dead rows page by page;
//   - mutations, off unless the service enables them with [WithMutations]: hold a
//     circuit open or closed until a time or for a duration, clear the hold, requeue
//     dead rows of the outbox;
//   - a live dashboard page (embedded HTML, CSS and JavaScript; nothing is loaded from
//     the internet) showing each destination's state, a countdown to its NotBefore, its
//     failure evidence, why and since when an unhealthy circuit is unhealthy (its last
//     error, the outage's start, its failed probes), a timeline of recent transitions
//     from the process's start, with probe cycles collapsed into one line, and the
//     outbox backlog. The mutation token is pasted into a password field and kept
//     nowhere else: not in storage, and not from a link (a URL, fragment included,
//     stays in the browser's history).
//
// Routes, relative to where the handler is mounted:
//
//	GET  /                                 the dashboard
//	GET  /api/circuits?limit=&after=&unhealthy=   the live circuits, sorted by destination:
//	                                       all, or a page (limit up to 10,000, after the
//	                                       previous page's next_after), or the unhealthy
//	                                       ones only; with total, unhealthy and a weak ETag
//	                                       (If-None-Match: 304 while it holds)
//	GET  /api/circuits/{destination}       one circuit ("kafka:orders"), 404 if unknown
//	POST /api/circuits/{destination}/force-open    {"for":"10m"} or {"until":"RFC 3339"}
//	POST /api/circuits/{destination}/force-close   the same body
//	POST /api/circuits/{destination}/clear         no body
//	GET  /api/transitions?limit=N          the newest transitions first (needs a Journal)
//	GET  /api/outbox                       backlog and oldest pending age (needs WithOutbox),
//	                                       per destination, holds, dead rows by reason;
//	                                       read at most once a second, one read at a time
//	GET  /api/outbox/dead?destination=&reason=&after=&limit=   one page of dead rows
//	POST /api/outbox/requeue               {"ids":[...]} or {"destination":"kafka:x","reason":"..."}
//
// Mutations need a bearer token ("Authorization: Bearer ..."), compared in constant
// time, a JSON body, and a same-origin request: cross-site form posts are refused twice
// over, by the content type and by the browser's Sec-Fetch-Site and Origin headers
// ([http.CrossOriginProtection]). Every mutation, allowed or refused, is reported to
// the audit hook given by [WithAudit]. Bad input gets a 4xx whose JSON body names the
// field that was wrong.
//
// Every route answers only a Host it knows ([WithAllowedHosts]; loopback names, IP
// addresses and the machine's host name by default) and refuses others with 421, so
// that a hostile page cannot read the API through DNS rebinding. Audit events carry
// the request's text with control, bidirectional and invisible characters escaped.
//
// The dashboard polls the circuit list every second, a page of 200 circuits at a
// time, revalidated with its ETag: a registry of 10,000 circuits costs a page's
// answer, or an empty 304 while nothing changed, not the whole list each second
// (BenchmarkCircuitList).
//
// The read routes need no token: they show destination names, dead rows' keys and
// errors as the store and the brokers wrote them (a database error may name its host
// and user). Mount the handler where only operators reach it, as with net/http/pprof.
//
// A circuit from a shared backend (DynamoDB, Redis, a state directory) applies an
// override to the shared state, so a hold made through any replica's handler holds on
// every replica.
package admin
