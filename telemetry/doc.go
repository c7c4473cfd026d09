// Package telemetry exports brokerguard's circuits and outbox as OpenTelemetry
// metrics (go.opentelemetry.io/otel/metric) on the meter "github.com/brokerguard/brokerguard".
//
// # Wiring
//
// Transitions are told to an observer the registry is given when it is built, but
// New needs the registry. A Recorder breaks the cycle: it exists first, counts, and
// New exports what it counted.
//
//	rec := telemetry.NewRecorder()
//	reg, err := registry.New(policy, registry.WithObserver(rec.ObserveTransition))
//	...
//	m, err := telemetry.New(reg, telemetry.WithRecorder(rec), telemetry.WithMeterProvider(mp))
//	...
//	defer m.Close()
//	pub := m.Instrument(reg.Guard(raw, classify), classify)
//
// The outbox reports its dispatches to m.RecordDispatch; WithOutboxBacklog adds its
// backlog gauges.
//
// # Instruments
//
// Observed at collection time from the registry's snapshots (Registry.Snapshots), so
// the publish path pays nothing for them:
//
//	brokerguard.circuit.open           gauge  {circuit}  1 while any circuit is open or half-open, else 0
//	brokerguard.circuit.failure_count  gauge  {failure}  sum of the circuits' current failure evidence
//	brokerguard.circuit.state          gauge  {circuit}  per destination and state: 1 for the current state, 0 for the others
//	brokerguard.circuit.override       gauge  {circuit}  per destination under an override: 1, with attribute override
//	brokerguard.circuit.bypassed       counter {call}    per Shadow or FailOpen destination: calls admitted that Enforce
//	                                                     would have refused; attribute kind: would_reject (Shadow), bypass (FailOpen)
//
// brokerguard.circuit.state is a state set: each destination has three series,
// state="closed", "open" and "half-open", exactly one of which is 1, so an alert can
// select brokerguard_circuit_state{state="open"} == 1. brokerguard.circuit.override
// has a series only while ForceOpen or ForceClose holds the circuit, with
// override="forced-open" or "forced-closed".
//
// Counted by the Recorder and exported as cumulative observable counters:
//
//	brokerguard.circuit.transitions  {transition}  attribute transition: opened, half_opened, closed (by the state entered)
//	brokerguard.circuit.failures     {failure}     publishes whose outcome was Failure (Instrument)
//	brokerguard.circuit.rejections   {call}        publishes the circuit rejected (Instrument)
//	brokerguard.circuit.probes       {call}        attribute outcome: success, failure, neutral (Instrument; Enforce circuits only)
//
// A destination's counter series appear once something was counted for it, all at
// once (zeros included), so that rates start from a known value.
//
// Outbox counters (synchronous, from RecordDispatch), all {message}:
// brokerguard.outbox.published, brokerguard.outbox.deferred, brokerguard.outbox.failed
// and brokerguard.outbox.dead. With WithOutboxBacklog, the gauges
// brokerguard.outbox.backlog ({message}) and brokerguard.outbox.oldest_pending_age (s).
//
// # Attributes and cardinality
//
// Per-destination series carry messaging.system (kafka, rabbitmq for the amqp broker,
// aws_sqs for sqs, else the broker as given) and messaging.destination.name, plus the
// instrument's own attribute. The circuit series exist only for the registry's live
// circuits, so their number is bounded by its cap (registry.WithMaxDestinations), and
// the series of an evicted destination end with it: its counters start again from
// zero if it comes back. The outbox counters are synchronous instruments, whose
// series the SDK keeps; they are bounded by the destinations the outbox writes to.
//
// Only the registry's local circuits report transitions; circuits from a
// registry.WithCircuitFactory appear in the gauges but not in the transition and
// probe counters.
package telemetry
