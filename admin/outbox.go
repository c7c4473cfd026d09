package admin

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/brokerguard/brokerguard/outbox"

	"github.com/brokerguard/brokerguard/outbox/storekit"
	"github.com/brokerguard/brokerguard/transport"
)

// backlogByDestination is the optional per-destination backlog of an Outbox.
type backlogByDestination interface {
	BacklogByDestination(ctx context.Context) ([]outbox.DestinationBacklog, error)
}

// OutboxStats is the body of GET /api/outbox. The lists are present when the store
// offers them.
type OutboxStats struct {
	Enabled bool  `json:"enabled"`
	Pending int64 `json:"pending"`
	// Estimated is set when Pending includes an estimate: a destination with a large
	// backlog counted from a sample (outbox/postgres.BacklogExactUpTo).
	Estimated    bool                 `json:"estimated,omitempty"`
	OldestMS     int64                `json:"oldest_pending_ms"`
	Destinations []DestinationBacklog `json:"destinations,omitempty"`
	Held         []HeldDestination    `json:"held,omitempty"`
	// Unusable counts the held destinations that are held because they are unusable
	// (their HeldDestination.Unusable is set), not for an outage.
	Unusable int         `json:"unusable"`
	Dead     []DeadCount `json:"dead,omitempty"`
	Error    *string     `json:"error,omitempty"` // a query failed: the numbers are unknown
}

// DestinationBacklog is one destination's pending rows.
type DestinationBacklog struct {
	Destination string `json:"destination"`
	Pending     int64  `json:"pending"`
	OldestMS    int64  `json:"oldest_pending_ms"`
	Estimated   bool   `json:"estimated,omitempty"` // Pending is an estimate
}

// HeldDestination is a destination whose rows are not claimed until Until;
// RemainingMS counts down to it (0 once it has passed and the next claim probes).
type HeldDestination struct {
	Destination string    `json:"destination"`
	Until       time.Time `json:"until"`
	Since       time.Time `json:"since"` // when the outage began
	RemainingMS int64     `json:"remaining_ms"`
	// Unusable, when present, is why the destination is held: it cannot take messages
	// although its broker answers (the publish error that said so). Absent for an
	// outage.
	Unusable string `json:"unusable,omitempty"`
}

// DeadCount is how many dead rows have one reason (storekit.DeadReason).
type DeadCount struct {
	Reason string `json:"reason"`
	Rows   int64  `json:"rows"`
}

// ReadOutbox reads o's stats at time now (for the holds' countdowns): what the
// handler answers at /api/outbox, and what "brokerguard outbox stats" prints when it
// reads the database itself. A failed query sets Error and zeroes the numbers.
func ReadOutbox(ctx context.Context, o Outbox, now time.Time) OutboxStats {
	out, err := readOutbox(ctx, o, now)
	if err != nil {
		msg := err.Error()
		return OutboxStats{Enabled: true, Error: &msg}
	}
	return out
}

func readOutbox(ctx context.Context, o Outbox, now time.Time) (OutboxStats, error) {
	out, err := readBacklog(ctx, o)
	if err != nil {
		return out, err
	}
	if oc, ok := o.(outbox.OnCall); ok {
		hs, err := oc.Holds(ctx)
		if err != nil {
			return out, err
		}
		out.Held = []HeldDestination{}
		for _, h := range hs {
			out.Held = append(out.Held, HeldDestination{Destination: h.Destination.String(), Until: h.Until,
				Since: h.Since, RemainingMS: max(h.Until.Sub(now), 0).Milliseconds(), Unusable: h.Unusable})
			if h.Unusable != "" {
				out.Unusable++
			}
		}
		dc, err := oc.DeadCounts(ctx)
		if err != nil {
			return out, err
		}
		out.Dead = []DeadCount{}
		for _, c := range dc {
			out.Dead = append(out.Dead, DeadCount{Reason: c.Reason, Rows: c.Rows})
		}
	}
	return out, nil
}

// readBacklog reads the backlog of o: from its destinations' backlogs when it has
// them (one reading, which a store may estimate when it is large), else its total.
func readBacklog(ctx context.Context, o Outbox) (OutboxStats, error) {
	b, ok := o.(backlogByDestination)
	if !ok {
		pending, oldest, err := o.Backlog(ctx)
		return OutboxStats{Enabled: true, Pending: pending, OldestMS: oldest.Milliseconds()}, err
	}
	ds, err := b.BacklogByDestination(ctx)
	if err != nil {
		return OutboxStats{}, err
	}
	out := OutboxStats{Enabled: true, Destinations: []DestinationBacklog{}}
	for _, d := range ds {
		out.Pending += d.Pending
		out.OldestMS = max(out.OldestMS, d.Oldest.Milliseconds())
		out.Estimated = out.Estimated || d.Estimated
		out.Destinations = append(out.Destinations, DestinationBacklog{Destination: d.Destination.String(),
			Pending: d.Pending, OldestMS: d.Oldest.Milliseconds(), Estimated: d.Estimated})
	}
	return out, nil
}

func (h *Handler) outboxStats(w http.ResponseWriter, r *http.Request) {
	if h.outbox == nil {
		writeJSON(w, http.StatusOK, OutboxStats{})
		return
	}
	out := h.stats.get(r.Context(), h.outbox, h.now())
	status := http.StatusOK
	if out.Error != nil {
		status = http.StatusServiceUnavailable
	}
	writeJSON(w, status, out)
}

// MaxDeadPage bounds the limit of GET /api/outbox/dead.
const MaxDeadPage = 500

// DeadRow is the JSON view of one dead row.
type DeadRow struct {
	ID          int64  `json:"id"`
	Destination string `json:"destination"`
	Key         string `json:"key,omitempty"` // as text (bytes that are not UTF-8 show as U+FFFD)
	ValueBytes  int    `json:"value_bytes"`
	Attempts    int    `json:"attempts"`
	Deferrals   int    `json:"deferrals"`
	Reason      string `json:"reason"`
	LastError   string `json:"last_error"`
	// CreatedAt is when the row was enqueued, SettledAt when it became dead.
	CreatedAt time.Time  `json:"created_at"`
	SettledAt *time.Time `json:"settled_at,omitempty"`
}

// DeadPage is the body of GET /api/outbox/dead. NextAfter, when not 0, is the after=
// of the next page; 0 means this page was the last.
type DeadPage struct {
	Rows      []DeadRow `json:"rows"`
	NextAfter int64     `json:"next_after,omitempty"`
}

// DeadRowView is the JSON view of r.
func DeadRowView(r outbox.Record) DeadRow {
	return DeadSummaryView(storekit.Summarize([]outbox.Record{r})[0])
}

// DeadSummaryView is the JSON view of the dead row d.
func DeadSummaryView(d outbox.DeadSummary) DeadRow {
	r := d.Record
	return DeadRow{ID: r.ID, Destination: r.Destination.String(), Key: string(r.Message.Key),
		ValueBytes: d.ValueBytes, Attempts: r.Attempts, Deferrals: r.Deferrals,
		Reason: storekit.DeadReason(r.LastError), LastError: r.LastError,
		CreatedAt: r.CreatedAt, SettledAt: timePtr(r.SettledAt)}
}

// NewDeadPage is the page of recs read with page size limit.
func NewDeadPage(recs []outbox.Record, limit int) DeadPage {
	return NewSummaryPage(storekit.Summarize(recs), limit)
}

// NewSummaryPage is the page of the dead rows rows, read with page size limit.
func NewSummaryPage(rows []outbox.DeadSummary, limit int) DeadPage {
	out := DeadPage{Rows: make([]DeadRow, 0, len(rows))}
	for _, d := range rows {
		out.Rows = append(out.Rows, DeadSummaryView(d))
	}
	if len(rows) == limit && limit > 0 {
		out.NextAfter = rows[len(rows)-1].ID
	}
	return out
}

// ReadDeadPage reads one page of dead rows from dl, without their payloads when the
// store can (outbox.DeadSummaries).
func ReadDeadPage(ctx context.Context, dl outbox.DeadLetters, f outbox.DeadFilter, p outbox.Page) (DeadPage, error) {
	if ds, ok := dl.(outbox.DeadSummaries); ok {
		rows, err := ds.DeadSummaries(ctx, f, p)
		return NewSummaryPage(rows, storekit.PageSize(p)), err
	}
	recs, err := dl.DeadRows(ctx, f, p)
	return NewDeadPage(recs, storekit.PageSize(p)), err
}

// deadLetters returns the handler's outbox as outbox.DeadLetters, or a 501.
func (h *Handler) deadLetters() (outbox.DeadLetters, *apiError) {
	if dl, ok := h.outbox.(outbox.DeadLetters); ok {
		return dl, nil
	}
	return nil, &apiError{Status: http.StatusNotImplemented, Msg: "this handler has no outbox whose dead rows it can read (WithOutbox with an outbox.DeadLetters store)"}
}

// maxReason bounds a dead reason in a filter; the reasons are short words.
const maxReason = 200

// parseDeadQuery reads the filter and page of GET /api/outbox/dead.
func parseDeadQuery(r *http.Request) (outbox.DeadFilter, outbox.Page, *apiError) {
	var f outbox.DeadFilter
	q := r.URL.Query()
	if s := q.Get("destination"); s != "" {
		d, err := transport.ParseDestination(s)
		if err != nil {
			return f, outbox.Page{}, badField("destination", err.Error())
		}
		f.Destination = d
	}
	f.Reason = q.Get("reason")
	if len(f.Reason) > maxReason {
		return f, outbox.Page{}, badField("reason", "at most "+strconv.Itoa(maxReason)+" bytes")
	}
	var p outbox.Page
	if s := q.Get("after"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 0 {
			return f, p, badField("after", "must be a row id, a whole number of at least 0")
		}
		p.After = n
	}
	limit, aerr := intParam(r, "limit", outbox.DefaultPageLimit, 1, MaxDeadPage)
	if aerr != nil {
		return f, p, aerr
	}
	p.Limit = limit
	return f, p, nil
}

func (h *Handler) deadRows(w http.ResponseWriter, r *http.Request) {
	dl, aerr := h.deadLetters()
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	f, p, aerr := parseDeadQuery(r)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	page, err := ReadDeadPage(r.Context(), dl, f, p)
	if err != nil {
		writeError(w, &apiError{Status: http.StatusServiceUnavailable, Msg: err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, page)
}

// RequeueRequest is the body of POST /api/outbox/requeue: ids, or a destination and
// or a reason; what is given must all match. An empty filter is refused.
type RequeueRequest struct {
	IDs         []int64 `json:"ids,omitempty"`
	Destination string  `json:"destination,omitempty"`
	Reason      string  `json:"reason,omitempty"`
}

// MaxRequeueIDs bounds the ids of one requeue request.
const MaxRequeueIDs = 1000

// maxRequeueBody fits MaxRequeueIDs ids of 19 digits.
const maxRequeueBody = 32 << 10

// Requeued is the body of a successful POST /api/outbox/requeue.
type Requeued struct {
	Requeued int `json:"requeued"`
}

// parseRequeue reads and checks a requeue request.
func parseRequeue(body io.Reader) (outbox.DeadFilter, *apiError) {
	var req RequeueRequest
	var f outbox.DeadFilter
	dec := json.NewDecoder(io.LimitReader(body, maxRequeueBody+1))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		if errors.Is(err, io.EOF) {
			return f, badField("body", `a JSON object with "ids" or "destination" and "reason" is required`)
		}
		return f, badField("body", "not a valid requeue request: "+err.Error())
	}
	if dec.More() {
		return f, badField("body", "one JSON object expected")
	}
	if len(req.IDs) > MaxRequeueIDs {
		return f, badField("ids", "at most "+strconv.Itoa(MaxRequeueIDs)+" per request")
	}
	for _, id := range req.IDs {
		if id <= 0 {
			return f, badField("ids", "row ids are positive: "+strconv.FormatInt(id, 10))
		}
	}
	f.IDs = req.IDs
	if req.Destination != "" {
		d, err := transport.ParseDestination(req.Destination)
		if err != nil {
			return f, badField("destination", err.Error())
		}
		f.Destination = d
	}
	if len(req.Reason) > maxReason {
		return f, badField("reason", "at most "+strconv.Itoa(maxReason)+" bytes")
	}
	f.Reason = req.Reason
	if f.IsZero() {
		return f, badField("ids", `give "ids", or "destination" and/or "reason": requeueing every dead row at once is refused`)
	}
	return f, nil
}

func (h *Handler) requeue(w http.ResponseWriter, r *http.Request) {
	now := h.now()
	ev := AuditEvent{At: now, Action: "requeue", Remote: r.RemoteAddr}
	err := h.requeueRequest(r, now, &ev)
	ev.Status = http.StatusOK
	if err != nil {
		var ae *apiError
		if !errors.As(err, &ae) {
			ae = &apiError{Status: http.StatusBadGateway,
				Msg: "requeue failed after " + strconv.Itoa(ev.Requeued) + " rows: " + err.Error()}
		}
		ev.Status, ev.Err = ae.Status, ae.Msg
		writeError(w, ae)
	} else {
		writeJSON(w, http.StatusOK, Requeued{Requeued: ev.Requeued})
	}
	h.report(r.Context(), ev)
}

func (h *Handler) requeueRequest(r *http.Request, now time.Time, ev *AuditEvent) error {
	if err := h.guard(r, maxRequeueBody, true); err != nil {
		return err
	}
	dl, aerr := h.deadLetters()
	if aerr != nil {
		return aerr
	}
	f, aerr := parseRequeue(r.Body)
	if aerr != nil {
		return aerr
	}
	if f.Destination != (transport.Destination{}) {
		ev.Destination = f.Destination.String()
	}
	ev.DeadReason, ev.IDs = f.Reason, f.IDs
	n, err := dl.Requeue(r.Context(), f, now)
	ev.Requeued = n
	return err
}

// statsFor is how long GET /api/outbox answers with the stats it read last: the
// dashboard's poll interval, so that any number of open dashboards (and scripts)
// cost the database one read of the stats a second.
const statsFor = time.Second

// statsCache serves GET /api/outbox: at most one read of the store at a time, its
// result kept for statsFor. A request that finds the result older than that reads
// again, unless a read is under way: then it answers at once with the last result
// (or, before the first one, waits for that read). Requests never queue reads
// behind each other on the database, whatever their number.
type statsCache struct {
	mu      sync.Mutex    // guards the fields below
	last    OutboxStats   // the last result
	at      time.Time     // when the read of last began; zero: none yet
	reading chan struct{} // closed when the read under way ends; nil: none
}

// get returns the stats of o as statsCache says, now being the handler's time.
func (c *statsCache) get(ctx context.Context, o Outbox, now time.Time) OutboxStats {
	c.mu.Lock()
	switch {
	case !c.at.IsZero() && (now.Sub(c.at) < statsFor || c.reading != nil):
		last := c.last
		c.mu.Unlock()
		return last
	case c.reading != nil:
		wait := c.reading
		c.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			msg := ctx.Err().Error()
			return OutboxStats{Enabled: true, Error: &msg}
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.last
	}
	done := make(chan struct{})
	c.reading = done
	c.mu.Unlock()
	out := ReadOutbox(ctx, o, now)
	c.mu.Lock()
	c.last, c.at, c.reading = out, now, nil
	c.mu.Unlock()
	close(done)
	return out
}
