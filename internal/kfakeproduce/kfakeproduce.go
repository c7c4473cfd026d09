// Package kfakeproduce builds Produce responses for kfake control functions, so that
// tests and the demo can make an in-process Kafka broker fail chosen topics or stop
// answering. The Kafka adapters of every module share it.
package kfakeproduce

import (
	"net"
	"strconv"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Error Kafka error codes the demo and tests inject.
const (
	LeaderNotAvailable    int16 = 5
	NotLeaderForPartition int16 = 6
)

// Failed answers req with code for every partition of every topic in it.
func Failed(req *kmsg.ProduceRequest, code int16) *kmsg.ProduceResponse {
	resp := req.ResponseKind().(*kmsg.ProduceResponse)
	for _, rt := range req.Topics {
		st := kmsg.NewProduceResponseTopic()
		st.Topic = rt.Topic
		st.TopicID = rt.TopicID // clients on Produce v13+ match the answer by ID
		for _, p := range rt.Partitions {
			sp := kmsg.NewProduceResponseTopicPartition()
			sp.Partition = p.Partition
			sp.ErrorCode = code
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp
}

// Answer makes the next Produce request (or every one, with keep) answer with code
// for every partition of the topics that match (all, when match is nil). The counter
// it returns counts the requests it answered.
func Answer(c *kfake.Cluster, code int16, keep bool, match func(topic string) bool) *atomic.Int64 {
	answered := new(atomic.Int64)
	c.ControlKey(int16(kmsg.Produce), func(r kmsg.Request) (kmsg.Response, error, bool) {
		req := r.(*kmsg.ProduceRequest)
		if match != nil && !match(req.Topics[0].Topic) {
			return nil, nil, false
		}
		if keep {
			c.KeepControl()
		}
		answered.Add(1)
		return Failed(req, code), nil, true
	})
	return answered
}

// Hang makes the next Produce request (or every one, with keep) go unanswered, after
// calling onRequest (when not nil).
func Hang(c *kfake.Cluster, keep bool, onRequest func()) {
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		if keep {
			c.KeepControl()
		}
		if onRequest != nil {
			onRequest()
		}
		return nil, nil, true
	})
}

// NoLeader makes every Metadata request from now on answer that topic has one
// partition with no live leader (leader -1), and lists the cluster's brokers: a
// partition in the middle of a leader election, as a client sees it.
func NoLeader(c *kfake.Cluster, topic string) {
	c.ControlKey(int16(kmsg.Metadata), func(r kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		resp := r.ResponseKind().(*kmsg.MetadataResponse)
		for i, addr := range c.ListenAddrs() {
			host, port, _ := net.SplitHostPort(addr)
			b := kmsg.NewMetadataResponseBroker()
			b.NodeID, b.Host = int32(i), host
			p, _ := strconv.Atoi(port)
			b.Port = int32(p)
			resp.Brokers = append(resp.Brokers, b)
		}
		p := kmsg.NewMetadataResponseTopicPartition()
		p.Leader, p.Replicas, p.ISR = -1, []int32{0}, []int32{0}
		rt := kmsg.NewMetadataResponseTopic()
		rt.Topic, rt.Partitions = &topic, []kmsg.MetadataResponseTopicPartition{p}
		resp.Topics = []kmsg.MetadataResponseTopic{rt}
		return resp, nil, true
	})
}
