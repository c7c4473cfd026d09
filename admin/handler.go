package admin

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/option"
	"github.com/brokerguard/brokerguard/registry"
)

// Outbox is what the handler reads from an outbox; outbox/memory's Store and the
// PostgreSQL store satisfy it. As with database/sql/driver, the handler finds more by
// asking the value for optional interfaces: per-destination backlog
// (BacklogByDestination, as both stores have), holds and dead rows by reason
// (outbox.OnCall), and paging and requeueing dead rows (outbox.DeadLetters).
type Outbox interface {
	Backlog(ctx context.Context) (pending int64, oldest time.Duration, err error)
}

// AuditEvent describes one mutation request, allowed or refused, for the service's
// audit log.
type AuditEvent struct {
	At          time.Time
	Action      string // "force-open", "force-close", "clear", "requeue" or "policy-dry-run", "policy-apply", "policy-rollback"
	Destination string // as requested
	Until       time.Time
	Reason      string // the operator's stated reason, if any
	Remote      string // the request's RemoteAddr
	Status      int    // the HTTP status answered
	Err         string // why it was refused; empty when it was applied
	// A requeue's filter (Destination above, DeadReason and IDs) and how many dead
	// rows it made pending again (some may have been, even when Err is set).
	DeadReason string
	IDs        []int64
	Requeued   int
	// A policy change's author (as the request names it) and the version it made,
	// or for a refused rollback the version asked for (policies.go).
	Author        string
	PolicyVersion uint64
}

// Option configures a Handler.
type Option func(*Handler) error

// WithMutations enables the mutation routes, guarded by the bearer token. The token
// must be at least 16 bytes: it is the only thing between the network and a hold on
// every circuit.
func WithMutations(token string) Option {
	return func(h *Handler) error {
		if len(token) < 16 {
			return errors.New("admin: WithMutations: token must be at least 16 bytes")
		}
		sum := sha256.Sum256([]byte(token))
		h.token = &sum
		return nil
	}
}

// WithAudit reports every mutation request to f, after it was applied or refused. f
// runs on the request's goroutine; it should not block for long.
func WithAudit(f func(context.Context, AuditEvent)) Option {
	return option.Check(f == nil, "admin: WithAudit(nil)", func(h *Handler) { h.audit = f })
}

// WithJournal serves the journal's transitions at /api/transitions and in the
// dashboard's timeline.
func WithJournal(j *Journal) Option {
	return option.Check(j == nil, "admin: WithJournal(nil)", func(h *Handler) { h.journal = j })
}

// WithOutbox serves the outbox's backlog, holds and dead rows at /api/outbox and on
// the dashboard, and its dead rows at /api/outbox/dead and /api/outbox/requeue.
func WithOutbox(o Outbox) Option {
	return option.Check(o == nil, "admin: WithOutbox(nil)", func(h *Handler) { h.outbox = o })
}

// WithClock sets the clock that checks override times and computes countdowns; it
// should be the registry's. The default is time.Now.
func WithClock(c breaker.Clock) Option {
	return option.Check(c == nil, "admin: WithClock(nil)", func(h *Handler) { h.clock = c })
}

// WithMaxHold bounds how far ahead an override may be set (default 24h), so a typo
// cannot hold a circuit for a year.
func WithMaxHold(d time.Duration) Option {
	return option.Check(d <= 0, "admin: WithMaxHold: duration must be positive", func(h *Handler) { h.maxHold = d })
}

// Handler serves the admin API and the dashboard for one registry. Create it with New.
type Handler struct {
	reg     *registry.Registry
	mux     *http.ServeMux
	token   *[sha256.Size]byte // nil: mutations disabled
	audit   func(context.Context, AuditEvent)
	journal *Journal
	outbox  Outbox
	stats   statsCache // GET /api/outbox (outbox.go)
	clock   breaker.Clock
	maxHold time.Duration
	origin  *http.CrossOriginProtection
	started time.Time // WithProcessStart
	hosts   []string  // the Host names answered besides IP addresses (hosts.go)
}

// New returns the handler for reg.
func New(reg *registry.Registry, opts ...Option) (*Handler, error) {
	if reg == nil {
		return nil, errors.New("admin: New: nil registry")
	}
	h := &Handler{reg: reg, maxHold: 24 * time.Hour, origin: http.NewCrossOriginProtection(), hosts: defaultHosts()}
	if err := option.Apply("admin: New", h, opts); err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", h.dashboard)
	mux.HandleFunc("GET /api/circuits", h.listCircuits)
	mux.HandleFunc("GET /api/circuits/{dest}", h.getCircuit)
	mux.HandleFunc("POST /api/circuits/{dest}/{action}", h.mutate)
	mux.HandleFunc("GET /api/transitions", h.transitions)
	mux.HandleFunc("GET /api/outbox", h.outboxStats)
	mux.HandleFunc("GET /api/outbox/dead", h.deadRows)
	mux.HandleFunc("POST /api/outbox/requeue", h.requeue)
	h.policyRoutes(mux) // policies.go
	h.mux = mux
	if h.started.IsZero() {
		h.started = h.now()
	}
	return h, nil
}

// ServeHTTP implements http.Handler. A request for a Host the handler does not answer
// (see WithAllowedHosts) is refused with 421 Misdirected Request on every route.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !h.hostAllowed(r) {
		writeError(w, &apiError{Status: http.StatusMisdirectedRequest, Field: "Host",
			Msg: "Host: this handler does not answer for this host name (see admin.WithAllowedHosts)"})
		return
	}
	h.mux.ServeHTTP(w, r)
}

func (h *Handler) now() time.Time {
	if h.clock != nil {
		return h.clock.Now()
	}
	return time.Now()
}

// apiError is the body of every 4xx and 5xx answer.
type apiError struct {
	Status int    `json:"-"`
	Field  string `json:"field,omitempty"` // the request part that was wrong
	Msg    string `json:"error"`
}

func (e *apiError) Error() string { return e.Msg }

func badField(field, msg string) *apiError {
	return &apiError{Status: http.StatusBadRequest, Field: field, Msg: field + ": " + msg}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v) // the client went away; nothing to tell it
}

func writeError(w http.ResponseWriter, err error) {
	var ae *apiError
	if !errors.As(err, &ae) {
		ae = &apiError{Status: http.StatusInternalServerError, Msg: err.Error()}
	}
	if ae.Status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="brokerguard"`)
	}
	writeJSON(w, ae.Status, ae)
}

// authorize checks, in order: mutations enabled, same origin, bearer token.
func (h *Handler) authorize(r *http.Request) *apiError {
	if h.token == nil {
		return &apiError{Status: http.StatusForbidden, Msg: "mutations are disabled on this handler"}
	}
	if err := h.origin.Check(r); err != nil {
		return &apiError{Status: http.StatusForbidden, Msg: "cross-origin request refused"}
	}
	auth := r.Header.Get("Authorization")
	given, ok := strings.CutPrefix(auth, "Bearer ")
	if !ok || given == "" {
		return &apiError{Status: http.StatusUnauthorized, Field: "Authorization", Msg: "Authorization: a bearer token is required"}
	}
	sum := sha256.Sum256([]byte(given)) // equal lengths: the comparison time says nothing
	if subtle.ConstantTimeCompare(sum[:], h.token[:]) != 1 {
		return &apiError{Status: http.StatusUnauthorized, Field: "Authorization", Msg: "Authorization: wrong bearer token"}
	}
	return nil
}

// guard checks a mutation before its body is read: authorize, then a body of at most
// limit bytes that is JSON when it is needed or given at all.
func (h *Handler) guard(r *http.Request, limit int64, needBody bool) *apiError {
	if err := h.authorize(r); err != nil {
		return err
	}
	if r.ContentLength > limit {
		return &apiError{Status: http.StatusRequestEntityTooLarge, Field: "body", Msg: "body: too large"}
	}
	if needBody || r.ContentLength != 0 {
		if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
			return &apiError{Status: http.StatusUnsupportedMediaType, Field: "Content-Type",
				Msg: "Content-Type: must be application/json"}
		}
	}
	return nil
}
