module github.com/brokerguard/brokerguard

go 1.26
