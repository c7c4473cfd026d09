package telemetry

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// Recorder counts what happens to each destination's circuit: transitions, failures,
// rejections and probe outcomes. It exists before the registry does, so that its
// ObserveTransition method can be given to registry.WithObserver; New then exports
// its counts (WithRecorder). Counting is a few atomic additions; the counts become
// OpenTelemetry measurements only when a reader collects.
//
// A Recorder serves one registry. Create it with NewRecorder; it is safe for
// concurrent use.
type Recorder struct {
	records sync.Map // transport.Destination -> *record

	// unsettled counts the records whose circuit the transitions left open or
	// half-open. While it is zero an instrumented publish needs no lookup.
	unsettled atomic.Int64

	pruneMu sync.Mutex // serializes prune; guards record.missed
}

// NewRecorder returns an empty Recorder.
func NewRecorder() *Recorder { return &Recorder{} }

// record holds one destination's counts and its pre-built attribute sets.
type record struct {
	attrs *attrSets // immutable

	// state is the circuit's state as the last transition told it (breaker.State);
	// only probe counting reads it. The state gauge reads the circuit's snapshot.
	state       atomic.Int32
	active      atomic.Bool // some count below is non-zero
	failures    atomic.Int64
	rejections  atomic.Int64
	transitions [3]atomic.Int64 // by the state entered: opened, half_opened, closed
	probes      [3]atomic.Int64 // by outcome: success, failure, neutral

	missed int // consecutive collections that did not find the destination live; guarded by Recorder.pruneMu
}

// load returns the record of d, or nil.
func (r *Recorder) load(d transport.Destination) *record {
	if v, ok := r.records.Load(d); ok {
		return v.(*record)
	}
	return nil
}

// get returns the record of d, creating it.
func (r *Recorder) get(d transport.Destination) *record {
	if rec := r.load(d); rec != nil {
		return rec
	}
	v, _ := r.records.LoadOrStore(d, &record{attrs: newAttrSets(d)})
	return v.(*record)
}

// markActive makes the record's counters visible; it writes only once.
func (rec *record) markActive() {
	if !rec.active.Load() {
		rec.active.Store(true)
	}
}

// ObserveTransition counts a transition of destination d's circuit. Give it to
// registry.WithObserver; it is cheap and never blocks.
func (r *Recorder) ObserveTransition(d transport.Destination, t breaker.Transition) {
	rec := r.get(d)
	rec.setState(r, t.To)
	if i := int(t.To); i >= 0 && i < len(rec.transitions) {
		rec.transitions[i].Add(1)
		rec.markActive()
	}
}

// setState records the circuit's new state and keeps Recorder.unsettled in step. The
// swap makes every change of the closed/unsettled split counted exactly once.
func (rec *record) setState(r *Recorder, s breaker.State) {
	old := breaker.State(rec.state.Swap(int32(s)))
	switch {
	case old == breaker.Closed && s != breaker.Closed:
		r.unsettled.Add(1)
	case old != breaker.Closed && s == breaker.Closed:
		r.unsettled.Add(-1)
	}
}

// publish counts one instrumented publish to d that returned err; probe says whether
// the call, if admitted, was a probe.
func (r *Recorder) publish(ctx context.Context, d transport.Destination, start registry.Start, probe bool, err error, n int, classify transport.Classifier) {
	if err != nil {
		if _, ok := errors.AsType[*registry.RejectedError](err); ok {
			rec := r.get(d)
			rec.rejections.Add(1)
			rec.markActive()
			return
		}
		if errors.Is(err, registry.ErrTooManyDestinations) || errors.Is(err, transport.ErrInvalidDestination) ||
			errors.Is(err, registry.ErrNoMessages) {
			return // the registry refused the destination or the empty call: no circuit saw it
		}
	}
	o := registry.Outcome(ctx, start, err, n, classify)
	if o != breaker.Failure && !probe {
		return
	}
	rec := r.get(d)
	if o == breaker.Failure {
		rec.failures.Add(1)
	}
	if probe {
		rec.probes[outcomeIndex(o)].Add(1)
	}
	rec.markActive()
}

// outcomeIndex maps an outcome to its index in record.probes.
func outcomeIndex(o breaker.Outcome) int {
	switch o {
	case breaker.Success:
		return 0
	case breaker.Failure:
		return 1
	}
	return 2
}

// prune forgets the records of destinations that two collections in a row did not
// find among the registry's live circuits (evicted ones), so that memory and series
// stay bounded by the registry's cap. Waiting for a second collection keeps the
// counts of a destination created while the first one ran.
func (r *Recorder) prune(live map[transport.Destination]breaker.Snapshot) {
	r.pruneMu.Lock()
	defer r.pruneMu.Unlock()
	r.records.Range(func(k, v any) bool {
		rec := v.(*record)
		if _, ok := live[k.(transport.Destination)]; ok {
			rec.missed = 0
			return true
		}
		if rec.missed++; rec.missed >= 2 {
			r.records.Delete(k)
			rec.setState(r, breaker.Closed)
		}
		return true
	})
}

// Instrument returns a Publisher that publishes through pub and counts, for the
// destination, rejections (a *registry.RejectedError), failures (errors that the
// registry.Outcome rule with classify makes a Failure, as registry.Guard does) and
// the outcomes of probes. As with Guard, a nil classify makes every error a Failure.
// Put it outside the guard and give it the guard's classifier:
//
//	pub := m.Instrument(reg.Guard(raw, classify), classify)
//
// Adapters that guard their own calls (kafka.Publisher, sqs.Publisher) are wrapped the
// same way, with their Classify. Give such a publisher destinations by name (an SQS
// queue name, not its URL) so that the counters' series are those of the circuits. A
// publish split into several guarded calls that the circuit refused partway through
// counts as one rejection.
//
// A call is counted as a probe when the transitions observed before it left the
// circuit open or half-open, so probes are counted only when the Recorder observes
// the registry's transitions (WithRecorder), and a call racing a transition may be
// counted on either side of it. Only circuits in breaker.Enforce mode count probes:
// a Shadow or FailOpen circuit admits every call while open, and those calls are
// bypasses (brokerguard.circuit.bypassed), not probes. A successful publish to a
// closed circuit costs one atomic load and allocates nothing.
func (m *Metrics) Instrument(pub transport.Publisher, classify transport.Classifier) transport.Publisher {
	if classify == nil {
		classify = everyErrorFails
	}
	return &instrumented{rec: m.rec, reg: m.reg, pub: pub, classify: classify}
}

func everyErrorFails(error) breaker.Outcome { return breaker.Failure }

type instrumented struct {
	rec      *Recorder
	reg      *registry.Registry
	pub      transport.Publisher
	classify transport.Classifier
}

var _ transport.Publisher = (*instrumented)(nil)

func (p *instrumented) Publish(ctx context.Context, d transport.Destination, msgs ...transport.Message) error {
	pre := breaker.Closed
	if p.rec.unsettled.Load() > 0 {
		if rec := p.rec.load(d); rec != nil {
			pre = breaker.State(rec.state.Load())
		}
	}
	// Under Enforce an open or half-open circuit admits only probes; the other modes
	// admit bypasses too, which the probe counter must not take for probes.
	probe := pre != breaker.Closed && p.reg.Policy(d).Mode == breaker.Enforce
	start := p.reg.Start(ctx, d)
	err := p.pub.Publish(ctx, d, msgs...)
	if err != nil || probe {
		p.rec.publish(ctx, d, start, probe, err, len(msgs), p.classify)
	}
	return err
}

// Attribute keys, following the OpenTelemetry messaging conventions where they apply.
const (
	keySystem      = attribute.Key("messaging.system")
	keyDestination = attribute.Key("messaging.destination.name")
	keyState       = attribute.Key("state")
	keyTransition  = attribute.Key("transition")
	keyOutcome     = attribute.Key("outcome")
	keyOverride    = attribute.Key("override")
	keyKind        = attribute.Key("kind")
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

// attrSets are a destination's attribute sets, built once so that neither a publish
// nor a collection builds one.
type attrSets struct {
	dest       metric.MeasurementOption    // messaging.system, messaging.destination.name
	state      [3]metric.MeasurementOption // plus state, by breaker.State
	transition [3]metric.MeasurementOption // plus transition, by the state entered
	probe      [3]metric.MeasurementOption // plus outcome, by outcomeIndex
	override   [3]metric.MeasurementOption // plus override, by breaker.Override (0 unused)
	bypass     [3]metric.MeasurementOption // plus kind, by breaker.Mode (0 unused)
}

var (
	stateValues      = [3]string{"closed", "open", "half-open"}
	transitionValues = [3]string{"closed", "opened", "half_opened"}
	outcomeValues    = [3]string{"success", "failure", "neutral"}
	overrideValues   = [3]string{"", "forced-open", "forced-closed"}
	bypassValues     = [3]string{"", "would_reject", "bypass"} // Shadow, FailOpen
)

func newAttrSets(d transport.Destination) *attrSets {
	sys, name := keySystem.String(messagingSystem(d.Broker)), keyDestination.String(d.Name)
	with := func(extra attribute.KeyValue) metric.MeasurementOption {
		return metric.WithAttributeSet(attribute.NewSet(sys, name, extra))
	}
	a := &attrSets{dest: metric.WithAttributeSet(attribute.NewSet(sys, name))}
	for i := range 3 {
		a.state[i] = with(keyState.String(stateValues[i]))
		a.transition[i] = with(keyTransition.String(transitionValues[i]))
		a.probe[i] = with(keyOutcome.String(outcomeValues[i]))
		if i > 0 {
			a.override[i] = with(keyOverride.String(overrideValues[i]))
			a.bypass[i] = with(keyKind.String(bypassValues[i]))
		}
	}
	return a
}
