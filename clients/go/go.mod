module github.com/tickd/tickd/clients/go

go 1.19

// The versions this module was built and tested with (Debian 12's packages; see README.md).
require (
	google.golang.org/grpc v1.33.3
	google.golang.org/protobuf v1.28.1
	// Only package tickdotel (and its tests, the SDK) imports OpenTelemetry: a program using
	// package tickd alone builds none of it.
	go.opentelemetry.io/otel v1.1.0
	go.opentelemetry.io/otel/sdk v1.1.0
	go.opentelemetry.io/otel/trace v1.1.0
)
