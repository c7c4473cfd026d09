package harness

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/brokerguard/brokerguard/breaker/dynamo"
)

// DynamoDBClient is a DynamoDB client for the test endpoint (from Dynalite or
// NewDynalite), with the static test credentials dynalite and LocalStack accept;
// optFns adjust it as they would dynamodb.New's (a retryer, an HTTP client, hooks).
func DynamoDBClient(endpoint string, optFns ...func(*dynamodb.Options)) *dynamodb.Client {
	return dynamodb.New(dynamodb.Options{
		BaseEndpoint: aws.String(endpoint),
		Region:       "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
	}, optFns...)
}

// DynamoDBTable creates a shared-circuit table (dynamo.CreateTable) whose name starts
// with prefix and is new to this run, and returns its name.
func DynamoDBTable(t testing.TB, client *dynamodb.Client, prefix string) string {
	t.Helper()
	table := fmt.Sprint(prefix, time.Now().UnixNano())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := dynamo.CreateTable(ctx, client, table); err != nil {
		t.Fatalf("creating DynamoDB table %s: %v", table, err)
	}
	return table
}
