// Package bench measures brokerguard against sony/gobreaker v2, failsafe-go and a
// bare atomic counter, in one run on one machine. It has its own module so that the
// peers never become dependencies of brokerguard.
//
// # Hot paths
//
// Run `make bench` at the repository root: it runs the benchmarks with -benchmem
// and -cpu 1,2 and prints the table with ratios (cmd/ratios).
//
// # Goodput scenarios
//
// Long runs against real servers, skipped unless GOODPUT is short or full
// (docs/goodput.md): TestSlowBroker (a broker that slows down without errors),
// TestDrain (an outbox backlog draining after saturation) and TestIncidents, the
// partial-failure suite:
//
//	GOODPUT=short go test -v -run TestIncidents -timeout 60m .   # about 3 minutes a broker
//	GOODPUT=full  go test -v -run TestIncidents -timeout 60m .   # about 7 minutes a broker
//
// TestIncidents runs four scenarios on SQS (the in-process sqstest server behind an
// HTTP fault layer and a TCP proxy), Kafka (kafka-go on kfake, with a produce fault
// and the proxy) and RabbitMQ (the machine's server behind the proxy): 200 callers
// in a closed loop, 500 ms deadlines.
//
//   - brownout: the broker fails 10, 30, then 60 % of requests with its own error
//     (40 s each), then is healthy (20 s). Not on RabbitMQ: a share of publishes
//     cannot be failed without parsing AMQP.
//   - flapping: the broker refuses connections for 3 s and is up for 7 s, 12 times:
//     goodput overall and in the up windows, and on how many up-edges the first
//     second brought 90 % of the healthy rate.
//   - mixed: the broker answers in 100 ms; half the callers have 50 ms deadlines,
//     half 2 s: each half's goodput.
//   - harddown: the broker refuses connections for 30 s, then is healthy: seconds
//     to 90 % of the healthy rate, what the broker received per second while down,
//     and how fast refusals return.
//
// Its columns are the same adapter publisher unprotected (breaker.DisabledPolicy),
// under DefaultPolicy, inside failsafe-go's adaptive limiter and inside gobreaker
// (columns_test.go). Each column runs in a child process of its own, all on one
// schedule, so they share the machine's load; each table also prints what the
// broker received per phase, and the targets beside the figures.
package bench
