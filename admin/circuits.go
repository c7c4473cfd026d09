package admin

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/backend"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// Circuit is the JSON view of one destination's circuit.
type Circuit struct {
	Destination string `json:"destination"`
	Broker      string `json:"broker"`
	Name        string `json:"name"`
	Scope       string `json:"scope"`
	State       string `json:"state"`
	Generation  uint64 `json:"generation"`
	Failures    int    `json:"failures"`
	Calls       int    `json:"calls"`
	InFlight    int    `json:"in_flight"`
	Probes      int    `json:"probes"`
	// NotBefore is when an open circuit admits its next probe; RemainingMS counts down
	// to it, or to the override's end while one holds.
	NotBefore     *time.Time `json:"not_before,omitempty"`
	RemainingMS   int64      `json:"remaining_ms"`
	Override      string     `json:"override"`
	OverrideUntil *time.Time `json:"override_until,omitempty"`
	Mode          string     `json:"mode"`
	Bypassed      uint64     `json:"bypassed"`
	// Unusable, when present, says why the destination cannot take messages although
	// its broker answers (missing, forbidden, misconfigured), and UnusableSince since
	// when; the circuit stays closed for it.
	Unusable      string     `json:"unusable,omitempty"`
	UnusableSince *time.Time `json:"unusable_since,omitempty"`
	// DegradedSince is set on a shared circuit whose store refuses its evidence: since
	// then the replica also decides on evidence of its own (sharedstate.KeepLocal).
	DegradedSince *time.Time `json:"degraded_since,omitempty"`
	Health
	// IsolatedPartitions lists the partitions isolated now (partitions.go).
	IsolatedPartitions []IsolatedPartition `json:"isolated_partitions,omitempty"`
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// View is the JSON view of destination d's circuit from its snapshot s at time now:
// what the handler answers, and what "brokerguard circuits" prints for a circuit it
// read from shared state itself.
func View(d transport.Destination, s breaker.Snapshot, now time.Time) Circuit {
	c := Circuit{
		Destination: d.String(), Broker: d.Broker, Name: d.Name,
		Scope: s.Scope.String(), State: s.State.String(), Generation: s.Generation,
		Failures: s.Failures, Calls: s.Calls, InFlight: s.InFlight, Probes: s.Probes,
		NotBefore: timePtr(s.NotBefore), Override: s.Override.String(),
		OverrideUntil: timePtr(s.OverrideUntil), Mode: s.Mode.String(), Bypassed: s.Bypassed,
		Unusable: s.Unusable, UnusableSince: timePtr(s.UnusableSince),
		DegradedSince: timePtr(s.DegradedSince),
		Health:        healthView(s),
	}
	end := s.NotBefore
	if s.Override != breaker.NoOverride {
		end = s.OverrideUntil
	}
	if !end.IsZero() && end.After(now) {
		c.RemainingMS = end.Sub(now).Milliseconds()
	}
	return c
}

// lookup resolves the {dest} path value to a live circuit.
func (h *Handler) lookup(r *http.Request) (transport.Destination, breaker.Circuit, *apiError) {
	d, err := transport.ParseDestination(r.PathValue("dest"))
	if err != nil {
		return d, nil, badField("destination", err.Error())
	}
	c, ok := h.reg.Lookup(d)
	if !ok {
		return d, nil, &apiError{Status: http.StatusNotFound, Field: "destination",
			Msg: "destination: no live circuit for " + strconv.Quote(d.String())}
	}
	return d, c, nil
}

func (h *Handler) getCircuit(w http.ResponseWriter, r *http.Request) {
	d, c, err := h.lookup(r)
	if err != nil && err.Status == http.StatusNotFound {
		if td, tc, ok := h.topicOf(d); ok { // a partition's refusal names "kafka:orders/3"
			d, c, err = td, tc, nil
		}
	}
	if err != nil {
		writeError(w, err)
		return
	}
	now := h.now()
	writeJSON(w, http.StatusOK, h.withPartitions(View(d, h.snapshot(d, c), now), d, now))
}

// snapshot is d's snapshot as the registry reports it (with the destination's
// unusable mark), or c's own when d is no longer live.
func (h *Handler) snapshot(d transport.Destination, c breaker.Circuit) breaker.Snapshot {
	if s, ok := h.reg.Snapshot(d); ok {
		return s
	}
	return c.Snapshot()
}

// holdRequest is the body of force-open and force-close: exactly one of For and Until.
type holdRequest struct {
	For    string `json:"for"`   // a Go duration, e.g. "10m"
	Until  string `json:"until"` // an RFC 3339 time
	Reason string `json:"reason"`
}

// maxBody bounds a mutation's body; a hold request is a few dozen bytes.
const maxBody = 4 << 10

// parseHold reads and checks a hold request at time now, returning when it ends.
func parseHold(body io.Reader, now time.Time, maxHold time.Duration) (time.Time, string, *apiError) {
	var req holdRequest
	dec := json.NewDecoder(io.LimitReader(body, maxBody+1))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		if errors.Is(err, io.EOF) {
			return time.Time{}, "", badField("body", `a JSON object with "for" or "until" is required`)
		}
		return time.Time{}, "", badField("body", "not a valid hold request: "+err.Error())
	}
	if dec.More() {
		return time.Time{}, "", badField("body", "one JSON object expected")
	}
	if len(req.Reason) > 200 {
		return time.Time{}, "", badField("reason", "at most 200 bytes")
	}
	var until time.Time
	switch {
	case req.For != "" && req.Until != "":
		return until, "", badField("for", `give "for" or "until", not both`)
	case req.For != "":
		d, err := time.ParseDuration(req.For)
		if err != nil {
			return until, "", badField("for", "not a duration like 10m or 90s: "+strconv.Quote(req.For))
		}
		if d <= 0 {
			return until, "", badField("for", "must be positive")
		}
		until = now.Add(d)
	case req.Until != "":
		t, err := time.Parse(time.RFC3339, req.Until)
		if err != nil {
			return until, "", badField("until", "not an RFC 3339 time: "+strconv.Quote(req.Until))
		}
		if !t.After(now) {
			return until, "", badField("until", "is in the past")
		}
		until = t
	default:
		return until, "", badField("for", `give "for" (a duration) or "until" (an RFC 3339 time)`)
	}
	var he *backend.HoldError
	if errors.As(backend.CheckHold(now, until, maxHold), &he) {
		return until, "", badField(map[bool]string{true: "for", false: "until"}[req.For != ""], he.Reason)
	}
	return until, req.Reason, nil
}

// localOverrider is the local breaker's override surface; ctxOverrider that of shared
// circuits, whose overrides write shared state and can fail.
type localOverrider interface {
	ForceOpen(until time.Time)
	ForceClose(until time.Time)
	ClearOverride()
}

type ctxOverrider interface {
	ForceOpen(ctx context.Context, until time.Time) error
	ForceClose(ctx context.Context, until time.Time) error
	ClearOverride(ctx context.Context) error
}

func applyOverride(ctx context.Context, c breaker.Circuit, action string, until time.Time) error {
	switch o := c.(type) {
	case localOverrider:
		switch action {
		case "force-open":
			o.ForceOpen(until)
		case "force-close":
			o.ForceClose(until)
		default:
			o.ClearOverride()
		}
		return nil
	case ctxOverrider:
		switch action {
		case "force-open":
			return o.ForceOpen(ctx, until)
		case "force-close":
			return o.ForceClose(ctx, until)
		default:
			return o.ClearOverride(ctx)
		}
	}
	return &apiError{Status: http.StatusNotImplemented, Msg: "this circuit's backend does not support overrides"}
}

func (h *Handler) mutate(w http.ResponseWriter, r *http.Request) {
	now := h.now()
	ev := AuditEvent{At: now, Action: r.PathValue("action"), Destination: r.PathValue("dest"), Remote: r.RemoteAddr}
	d, c, err := h.mutation(r, now, &ev)
	ev.Status = http.StatusOK
	if err != nil {
		var ae *apiError
		if !errors.As(err, &ae) {
			ae = &apiError{Status: http.StatusBadGateway, Msg: "applying the override failed: " + err.Error()}
		}
		ev.Status, ev.Err = ae.Status, ae.Msg
		writeError(w, ae)
	} else {
		writeJSON(w, http.StatusOK, View(d, h.snapshot(d, c), h.now()))
	}
	h.report(r.Context(), ev)
}

func (h *Handler) mutation(r *http.Request, now time.Time, ev *AuditEvent) (transport.Destination, breaker.Circuit, error) {
	switch ev.Action {
	case "force-open", "force-close", "clear":
	default:
		return transport.Destination{}, nil, &apiError{Status: http.StatusNotFound, Field: "action",
			Msg: "action: unknown " + strconv.Quote(ev.Action) + "; want force-open, force-close or clear"}
	}
	if err := h.guard(r, maxBody, ev.Action != "clear"); err != nil {
		return transport.Destination{}, nil, err
	}
	d, c, aerr := h.lookup(r)
	if aerr != nil {
		return d, nil, aerr
	}
	if ev.Action != "clear" {
		until, reason, aerr := parseHold(r.Body, now, h.maxHold)
		if aerr != nil {
			return d, nil, aerr
		}
		ev.Until, ev.Reason = until, reason
	}
	return d, c, applyOverride(r.Context(), c, ev.Action, ev.Until)
}

// Transition is the JSON view of one journal event.
type Transition struct {
	Destination string    `json:"destination"`
	From        string    `json:"from"`
	To          string    `json:"to"`
	Generation  uint64    `json:"generation"`
	At          time.Time `json:"at"`
	Reason      string    `json:"reason"`
	// Partition is set for a transition of a partition of the destination (an
	// isolation, or its end: registry.ReasonPartitionIsolated); the destination's
	// circuit did not move.
	Partition *int `json:"partition,omitempty"`
	// For an event that collapses probe cycles (see Event): when the latest cycle
	// happened, the probes admitted and the probes that failed.
	LastAt       *time.Time `json:"last_at,omitempty"`
	Cycles       int        `json:"cycles,omitempty"`
	FailedProbes int        `json:"failed_probes,omitempty"`
}

func (h *Handler) transitions(w http.ResponseWriter, r *http.Request) {
	limit, aerr := intParam(r, "limit", 100, 1, 1000)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	out := []Transition{}
	if h.journal != nil {
		for _, e := range h.journal.Recent(limit) {
			out = append(out, Transition{Destination: e.Destination.String(), From: e.From.String(),
				To: e.To.String(), Generation: e.Generation, At: e.At, Reason: e.Reason,
				LastAt: timePtr(e.LastAt), Cycles: e.Cycles, FailedProbes: e.FailedProbes})
			if p, ok := registry.PartitionOfTransition(e.Transition); ok {
				out[len(out)-1].Partition = &p
			}
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"transitions": out})
}

// intParam reads an optional integer query parameter within [lo, hi].
func intParam(r *http.Request, name string, def, lo, hi int) (int, *apiError) {
	s := r.URL.Query().Get(name)
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < lo || n > hi {
		return 0, badField(name, "must be a whole number from "+strconv.Itoa(lo)+" to "+strconv.Itoa(hi))
	}
	return n, nil
}
