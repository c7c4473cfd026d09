package telemetry

import (
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// Recorder keeps what the registry's snapshots do not say about each destination:
// its transitions, since when its circuit has been unhealthy, and what the outbox
// dispatched to it. It exists before the registry does, so that the registry can be
// built with its RegistryOptions; New then exports it (WithRecorder). Recording is a
// few atomic operations; the values become OpenTelemetry measurements only when a
// reader collects.
//
// A Recorder serves one registry. Create it with NewRecorder; it is safe for
// concurrent use.
type Recorder struct {
	records sync.Map // transport.Destination -> *record

	pruneMu sync.Mutex // serializes prune; guards record.missed
}

// NewRecorder returns an empty Recorder.
func NewRecorder() *Recorder { return &Recorder{} }

// RegistryOptions are the options a registry needs for telemetry: ObserveTransition as
// its observer, and call counting (registry.WithCallCounts).
func (r *Recorder) RegistryOptions() []registry.Option {
	return []registry.Option{registry.WithObserver(r.ObserveTransition), registry.WithCallCounts()}
}

// record holds one destination's values.
type record struct {
	attrs atomic.Pointer[attrSets] // built at the first collection, when the mode is known

	transitioned atomic.Bool     // some transition was counted
	transitions  [3]atomic.Int64 // by the state entered, indexed by breaker.State
	// unhealthySince is when the circuit last left closed, in Unix nanoseconds; 0
	// while it is closed or an operator holds it open.
	unhealthySince atomic.Int64
	dispatched     atomic.Bool     // some outbox count is non-zero
	outbox         [4]atomic.Int64 // published, deferred, failed, dead
	unusableHolds  atomic.Int64    // outbox holds of the destination for being unusable (unusable.go)
	unusableSeen   atomic.Bool     // the destination was seen unusable once: its gauge is observed from then on
	isolations     atomic.Int64    // isolations of its partitions (registry.ReasonPartitionIsolated)

	missed int // consecutive collections that did not find the destination live; guarded by Recorder.pruneMu
}

// get returns the record of d, creating it.
func (r *Recorder) get(d transport.Destination) *record {
	if v, ok := r.records.Load(d); ok {
		return v.(*record)
	}
	v, _ := r.records.LoadOrStore(d, &record{})
	return v.(*record)
}

// ObserveTransition records a transition of destination d's circuit. It is the
// registry's observer (RegistryOptions); it is cheap and never blocks. A transition
// that leaves the state as it was (ForceOpen on an open circuit, a ForceClose ending)
// is not counted: the counter counts changes of state.
//
// A partition's transition (registry.PartitionOfTransition) is not the circuit's:
// it counts the destination's partition isolations and leaves the circuit's values
// alone.
func (r *Recorder) ObserveTransition(d transport.Destination, t breaker.Transition) {
	rec := r.get(d)
	if _, ok := registry.PartitionOfTransition(t); ok {
		if t.To == breaker.Open {
			rec.isolations.Add(1)
		}
		return
	}
	switch {
	case t.To == breaker.Closed:
		rec.unhealthySince.Store(0)
	case t.Reason == breaker.ReasonForcedOpen:
		rec.unhealthySince.Store(0) // an operator's hold, not an outage; it shows as an override
	default:
		rec.unhealthySince.CompareAndSwap(0, t.At.UnixNano())
	}
	if t.From == t.To {
		return
	}
	if i := int(t.To); i >= 0 && i < len(rec.transitions) {
		rec.transitions[i].Add(1)
		if !rec.transitioned.Load() {
			rec.transitioned.Store(true)
		}
	}
}

// unhealthyFor is how long the circuit whose snapshot is s has been unhealthy at now:
// open or half-open, without closing in between, and not held by an override. A
// circuit that has reported no transitions (a shared one that was open before this
// process saw it, or any circuit when New has no WithRecorder) is unhealthy from the
// first collection that sees it so until one sees it closed. One that
// reports them is not: its snapshot may predate a close the observer has recorded
// since, and would backdate its next outage.
func (rec *record) unhealthyFor(s breaker.Snapshot, now time.Time) time.Duration {
	since := rec.unhealthySince.Load()
	if s.State == breaker.Closed || s.Override != breaker.NoOverride {
		if since != 0 && !rec.transitioned.Load() {
			// No observer ends the outage the fallback below started: this reading
			// does. A transition recorded meanwhile keeps its own start (the swap fails).
			rec.unhealthySince.CompareAndSwap(since, 0)
		}
		return 0
	}
	if since == 0 {
		if !rec.transitioned.Load() {
			rec.unhealthySince.CompareAndSwap(0, now.UnixNano())
		}
		return 0
	}
	return max(now.Sub(time.Unix(0, since)), 0)
}

func (rec *record) markDispatched() {
	if !rec.dispatched.Load() {
		rec.dispatched.Store(true)
	}
}

// prune forgets the records of destinations that two collections in a row did not
// find among the registry's live circuits (evicted ones), so that memory and series
// stay bounded by the registry's cap. Waiting for a second collection keeps the
// values of a destination created while the first one ran.
func (r *Recorder) prune(live []registry.CircuitReport) {
	seen := make(map[transport.Destination]struct{}, len(live))
	for _, c := range live {
		seen[c.Destination] = struct{}{}
	}
	r.pruneMu.Lock()
	defer r.pruneMu.Unlock()
	r.records.Range(func(k, v any) bool {
		rec := v.(*record)
		if _, ok := seen[k.(transport.Destination)]; ok {
			rec.missed = 0
			return true
		}
		if rec.missed++; rec.missed >= 2 {
			r.records.Delete(k)
		}
		return true
	})
}

// Attribute keys: the OpenTelemetry messaging conventions for the destination, and
// this library's own, namespaced, for the rest.
const (
	keySystem      = attribute.Key("messaging.system")
	keyDestination = attribute.Key("messaging.destination.name")
	keyState       = attribute.Key("brokerguard.circuit.state")
	keyMode        = attribute.Key("brokerguard.circuit.mode")
	keyOverride    = attribute.Key("brokerguard.circuit.override")
	keyOutcome     = attribute.Key("brokerguard.call.outcome")
)

// messagingSystem maps a transport broker kind to the OpenTelemetry
// messaging.system value; unknown kinds are reported as they are.
func messagingSystem(broker string) string {
	switch broker {
	case "amqp":
		return "rabbitmq"
	case "sqs":
		return "aws_sqs"
	}
	return broker // "kafka" is already the conventional value
}

// attrSets are a destination's attribute sets, built once so that no collection
// builds one.
type attrSets struct {
	dest       metric.MeasurementOption    // messaging.system, messaging.destination.name
	mode       metric.MeasurementOption    // plus mode
	state      [3]metric.MeasurementOption // plus state and mode, by breaker.State
	transition [3]metric.MeasurementOption // plus the state entered, by breaker.State
	calls      [4]metric.MeasurementOption // plus outcome: published, failed, rejected, neutral
	probe      [3]metric.MeasurementOption // plus outcome: published, failed, neutral
	override   [3]metric.MeasurementOption // plus override, by breaker.Override (0 unused)
}

// Attribute values: snake_case throughout.
var (
	stateValues    = [3]string{"closed", "open", "half_open"}
	modeValues     = [3]string{"enforce", "shadow", "fail_open"}
	outcomeValues  = [4]string{"published", "failed", "rejected", "neutral"}
	overrideValues = [3]string{"", "forced_open", "forced_closed"}
)

// attrSets returns the record's attribute sets, building them for d and mode the
// first time.
func (rec *record) attrSets(d transport.Destination, mode breaker.Mode) *attrSets {
	if a := rec.attrs.Load(); a != nil {
		return a
	}
	a := newAttrSets(d, mode)
	if !rec.attrs.CompareAndSwap(nil, a) {
		return rec.attrs.Load()
	}
	return a
}

func newAttrSets(d transport.Destination, mode breaker.Mode) *attrSets {
	sys, name := keySystem.String(messagingSystem(d.Broker)), keyDestination.String(d.Name)
	m := keyMode.String(mode.String())
	if int(mode) < len(modeValues) {
		m = keyMode.String(modeValues[mode])
	}
	set := func(extra ...attribute.KeyValue) metric.MeasurementOption {
		return metric.WithAttributeSet(attribute.NewSet(append([]attribute.KeyValue{sys, name}, extra...)...))
	}
	a := &attrSets{dest: set(), mode: set(m)}
	for i := range 3 {
		a.state[i] = set(keyState.String(stateValues[i]), m)
		a.transition[i] = set(keyState.String(stateValues[i]))
		if i > 0 {
			a.override[i] = set(keyOverride.String(overrideValues[i]))
		}
	}
	for i := range 4 {
		a.calls[i] = set(keyOutcome.String(outcomeValues[i]))
	}
	for i, o := range [...]int{0, 1, 3} { // published, failed, neutral
		a.probe[i] = a.calls[o]
	}
	return a
}
