// Package kafka holds the integration tests and the benchmark of the kafka adapter.
// They drive the real segmentio/kafka-go writer against an in-process kfake cluster,
// or against the brokers in KAFKA_BROKERS (tests that need kfake's fault injection
// skip there). The package has no code of its own.
package kafka
