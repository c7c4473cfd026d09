package harness

import (
	"errors"
	"net"
	"net/url"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

func dynamoClient(endpoint string) *dynamodb.Client {
	// A stopped server should fail the call at once.
	return DynamoDBClient(endpoint, func(o *dynamodb.Options) { o.Retryer = aws.NopRetryer{} })
}

func TestDynaliteStopStart(t *testing.T) {
	start := time.Now()
	server := NewDynalite(t)
	t.Logf("dynalite started in %v", time.Since(start).Round(time.Millisecond))
	client := dynamoClient(server.Endpoint())

	_, err := client.CreateTable(t.Context(), &dynamodb.CreateTableInput{
		TableName:            aws.String("circuits"),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("id"), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("id"), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	})
	if err != nil {
		t.Fatal(err)
	}
	listTables := func() ([]string, error) {
		out, err := client.ListTables(t.Context(), &dynamodb.ListTablesInput{})
		if err != nil {
			return nil, err
		}
		return out.TableNames, nil
	}
	if names, err := listTables(); err != nil || !slices.Equal(names, []string{"circuits"}) {
		t.Fatalf("ListTables = %q, %v; want [circuits]", names, err)
	}

	if err := server.Stop(); err != nil {
		t.Fatal(err)
	}
	// A fresh connection proves the port is closed; a request could instead reuse a
	// kept-alive connection and fail with a broken pipe.
	if _, err := listTables(); err == nil {
		t.Fatal("ListTables on a stopped server succeeded")
	}
	endpoint, err := url.Parse(server.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	if c, err := net.Dial("tcp", endpoint.Host); !errors.Is(err, syscall.ECONNREFUSED) {
		if c != nil {
			c.Close()
		}
		t.Fatalf("dialling a stopped server: %v; want connection refused", err)
	}

	start = time.Now()
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	t.Logf("dynalite restarted in %v", time.Since(start).Round(time.Millisecond))
	if names, err := listTables(); err != nil || !slices.Equal(names, []string{"circuits"}) {
		t.Fatalf("ListTables after restart = %q, %v; want the table kept: [circuits]", names, err)
	}
}

func TestDynaliteFromEnvironment(t *testing.T) {
	server := NewDynalite(t)
	t.Setenv("DYNAMODB_ENDPOINT", server.Endpoint())
	if got := Dynalite(t); got != server.Endpoint() {
		t.Fatalf("Dynalite = %q; want DYNAMODB_ENDPOINT %q", got, server.Endpoint())
	}
	if _, err := dynamoClient(server.Endpoint()).ListTables(t.Context(), &dynamodb.ListTablesInput{}); err != nil {
		t.Fatal(err)
	}
}
