// Package bench measures brokerguard's hot paths against sony/gobreaker v2,
// failsafe-go and a bare atomic counter, in one run on one machine. It has its own
// module so that the peers never become dependencies of brokerguard.
//
// Run `make bench` at the repository root: it runs these benchmarks with -benchmem
// and -cpu 1,2 and prints the table with ratios (cmd/ratios).
package bench
