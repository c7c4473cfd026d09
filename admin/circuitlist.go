package admin

import (
	"encoding/json"
	"hash/fnv"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/registry"
)

// Circuits is the body of GET /api/circuits.
type Circuits struct {
	Now time.Time `json:"now"`
	// Started is when the process began (WithProcessStart; by default when the
	// handler was made): the dashboard's timeline starts there.
	Started   time.Time `json:"started"`
	Mutations bool      `json:"mutations"` // whether this handler accepts mutations
	// Total is how many circuits the request selects (all, or the unhealthy ones),
	// on every page; Unhealthy how many of all the live circuits are unhealthy: not
	// closed, with a partition isolated, unusable, held by an operator, or with their
	// shared store degraded.
	Total     int `json:"total"`
	Unhealthy int `json:"unhealthy"`
	// NextAfter, when set, is the "after" of the next page: more circuits follow.
	NextAfter string    `json:"next_after,omitempty"`
	Circuits  []Circuit `json:"circuits"`
}

// NowHeader is the header of GET /api/circuits answers (304 Not Modified included)
// that gives the service's time, RFC 3339 with nanoseconds.
const NowHeader = "Brokerguard-Now"

// MaxCircuitPage bounds the limit query parameter of GET /api/circuits.
const MaxCircuitPage = 10000

// listCircuits answers GET /api/circuits: every live circuit by destination, or a
// page of them (limit, after: the previous page's next_after), or only the unhealthy
// ones (unhealthy=true). The answer carries a weak ETag over what it says (the clock
// and countdowns aside), and a request whose If-None-Match has it gets 304 Not
// Modified without a body: a dashboard polling every second re-reads a large
// registry only when something changed.
func (h *Handler) listCircuits(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, aerr := intParam(r, "limit", MaxCircuitPage, 1, MaxCircuitPage)
	if aerr != nil {
		writeError(w, aerr)
		return
	}
	unhealthyOnly := false
	if v := q.Get("unhealthy"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			writeError(w, badField("unhealthy", "must be true or false"))
			return
		}
		unhealthyOnly = b
	}
	out := h.circuitPage(limit, q.Get("after"), unhealthyOnly)
	tag := circuitsETag(out)
	w.Header().Set("ETag", tag)
	// The service's time, on a 304 too: a client counts the countdowns it kept down
	// by the service's clock, not its own.
	w.Header().Set(NowHeader, out.Now.Format(time.RFC3339Nano))
	if etagMatches(r.Header.Get("If-None-Match"), tag) {
		w.Header().Set("Cache-Control", "no-cache")
		w.WriteHeader(http.StatusNotModified)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// circuitPage builds the list: the circuits after the destination after, in order,
// at most limit of them, only the unhealthy ones when asked. Only the page's circuits
// are made into views: a page of a large registry costs its snapshots and a sort.
func (h *Handler) circuitPage(limit int, after string, unhealthyOnly bool) Circuits {
	now := h.now()
	reports := h.reg.Report()
	type listed struct { // small: sorting moves these, not reports
		name string // the destination's String, the sort key
		i    int    // in reports
	}
	all := make([]listed, 0, len(reports))
	out := Circuits{Now: now, Started: h.started, Mutations: h.token != nil}
	for i, r := range reports {
		if unhealthy(r.Snapshot, r.IsolatedPartitions) {
			out.Unhealthy++
		} else if unhealthyOnly {
			continue
		}
		all = append(all, listed{name: r.Destination.String(), i: i})
	}
	slices.SortFunc(all, func(a, b listed) int { return strings.Compare(a.name, b.name) })
	out.Total = len(all)
	first, _ := slices.BinarySearchFunc(all, after, func(l listed, d string) int {
		if l.name <= d {
			return -1
		}
		return 1
	})
	page := all[first:min(first+limit, len(all))]
	out.Circuits = make([]Circuit, len(page))
	for i, l := range page {
		r := &reports[l.i]
		out.Circuits[i] = withIsolated(View(r.Destination, r.Snapshot, now), r.IsolatedPartitions, now)
	}
	if first+limit < len(all) {
		out.NextAfter = page[len(page)-1].name
	}
	return out
}

// unhealthy reports whether a circuit with snapshot s and isolated partitions parts
// needs a person's eye: not closed, a partition isolated, unusable, held by an
// operator, or its shared store degraded.
func unhealthy(s breaker.Snapshot, parts []registry.IsolatedPartition) bool {
	return s.State != breaker.Closed || len(parts) > 0 || s.Unusable != "" || s.Override != breaker.NoOverride ||
		!s.DegradedSince.IsZero()
}

// circuitsETag is a weak validator of what c says: every field but the time of the
// answer and the countdowns derived from it (RemainingMS), which a client advances by
// its own clock.
func circuitsETag(c Circuits) string {
	sum := fnv.New64a()
	c.Now = time.Time{}
	c.Circuits = slices.Clone(c.Circuits)
	for i := range c.Circuits {
		c.Circuits[i].RemainingMS = 0
		if ps := c.Circuits[i].IsolatedPartitions; len(ps) > 0 {
			ps = slices.Clone(ps)
			for j := range ps {
				ps[j].RemainingMS = 0
			}
			c.Circuits[i].IsolatedPartitions = ps
		}
	}
	_ = json.NewEncoder(sum).Encode(c) // a hash.Hash never fails to write
	return `W/"` + strconv.FormatUint(sum.Sum64(), 36) + `"`
}

// etagMatches reports whether an If-None-Match header lists tag (weak comparison,
// as RFC 9110 asks for If-None-Match) or is "*".
func etagMatches(header, tag string) bool {
	if header == "" {
		return false
	}
	for _, t := range strings.Split(header, ",") {
		t = strings.TrimSpace(t)
		if t == "*" || strings.TrimPrefix(t, "W/") == strings.TrimPrefix(tag, "W/") {
			return true
		}
	}
	return false
}
