package sqs

import (
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// Queue returns the destination of an SQS queue, "sqs:<name>"; name may also be the
// queue's URL, which shares the circuit of its name.
func Queue(name string) transport.Destination {
	return transport.Destination{Broker: Broker, Name: name}
}

// GuardedBy returns the registry whose circuits guard the publisher, so that
// registry.Guard recognises it as already guarded (see registry.Guarded).
func (p *Publisher) GuardedBy() *registry.Registry { return p.reg }

var _ registry.Guarded = (*Publisher)(nil)
