// Package telemetry exports brokerguard's circuits and outbox as OpenTelemetry
// metrics (go.opentelemetry.io/otel/metric) on the meter "github.com/brokerguard/brokerguard",
// chosen for the alerts people on call write; deploy/prometheus holds those alerts and
// deploy/grafana a dashboard.
//
// # Wiring
//
// The registry counts the calls and reports transitions to an observer it is given
// when it is built, but New needs the registry. A Recorder breaks the cycle: it
// exists first and gives the registry its options; New exports the registry and the
// Recorder.
//
//	rec := telemetry.NewRecorder()
//	reg, err := registry.New(policy, rec.RegistryOptions()...)
//	...
//	m, err := telemetry.New(reg, telemetry.WithRecorder(rec), telemetry.WithMeterProvider(mp))
//	...
//	defer m.Close()
//	pub := reg.Guard(raw, classify) // or an adapter's publisher over reg
//
// Give the provider sdkmetric.WithCardinalityLimit(CardinalityLimit(cap)) for the
// registry's cap on live circuits: the SDK's default limit of 2,000 series per
// instrument holds only 500 destinations' call counts. The outbox processor reports
// its dispatches to m (outbox.WithHooks); WithOutboxBacklog adds its backlog.
//
// # Instruments
//
// Every instrument is observed at collection time, from the registry's Report (its
// live circuits' snapshots and call counts) and the Recorder, so the publish path pays
// one atomic addition (the registry's call count) and nothing here.
//
// Per destination:
//
//	brokerguard.circuit.calls               counter        {call}        by brokerguard.call.outcome: published, failed, rejected, neutral
//	brokerguard.circuit.probes              counter        {call}        half-open probes, by brokerguard.call.outcome: published, failed, neutral
//	brokerguard.circuit.transitions         counter        {transition}  changes of state, by the state entered (brokerguard.circuit.state)
//	brokerguard.circuit.state               updowncounter  1             state set: 1 for the current brokerguard.circuit.state, 0 for the others
//	brokerguard.circuit.unhealthy.duration  gauge          s             time since the circuit left closed, through probes; 0 while closed or overridden
//	brokerguard.circuit.override            updowncounter  1             1 while brokerguard.circuit.override is forced_open or forced_closed; absent otherwise
//	brokerguard.circuit.bypassed            counter        {call}        Shadow and FailOpen circuits: calls admitted that Enforce would have refused
//	brokerguard.circuit.ramp.refused        counter        {call}        calls turned away while ramping up after recovery (also rejected calls)
//	brokerguard.outbox.published, .deferred, .failed, .dead  counter  {message}  from RecordDispatch
//	brokerguard.outbox.backlog              gauge          {message}     pending rows (WithOutboxBacklog)
//	brokerguard.outbox.oldest_pending_age   gauge          s             age of the oldest pending row (WithOutboxBacklog)
//	brokerguard.outbox.store.errors         counter        {error}       failed outbox store calls, by brokerguard.outbox.operation (RecordStoreError; from the first error on)
//
// Aggregates: brokerguard.circuit.open (gauge, {circuit}: live circuits open or
// half-open), brokerguard.circuit.failures (gauge, {failure}: the sum of the circuits'
// current failure evidence) and brokerguard.outbox.backlog.errors (counter, {error}:
// failed backlog readings).
//
// The call outcomes say what the circuit made of each call (see registry.CallCounts):
// a failure the circuit ignored, under ForceClose or as a Shadow would-reject, is
// neutral, not failed. The state, unhealthy duration and bypass series carry the
// circuit's mode (brokerguard.circuit.mode: enforce, shadow, fail_open), so that an
// alert can leave out the circuits that let their traffic through.
//
// A destination's counter series appear once something was counted for it, all its
// outcomes at once (zeros included), so that rates start from a known value.
//
// # Attributes and cardinality
//
// Per-destination series carry messaging.system (kafka, rabbitmq for the amqp broker,
// aws_sqs for sqs, else the broker as given) and messaging.destination.name, as the
// OpenTelemetry messaging conventions spell them, plus the instrument's own attribute.
// They exist only for the registry's live circuits, so each instrument has at most
// SeriesPerDestination series per live circuit, bounded by the registry's cap, and
// the series of an evicted destination end with it, outbox counters included: they
// start again from zero if it comes back. Backlog gauges exist for the destinations
// with pending rows.
//
// Only the registry's local circuits report transitions; circuits from a
// registry.WithCircuitFactory appear in every other instrument, their unhealthy
// duration counted from the first collection that sees them open.
package telemetry
