// Package kfakeproduce builds Produce responses for kfake control functions, so that
// tests and the demo can make an in-process Kafka broker fail chosen topics.
package kfakeproduce

import "github.com/twmb/franz-go/pkg/kmsg"

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
